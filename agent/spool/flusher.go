package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// flushLoop is the flusher goroutine, started by Open and stopped by
// Close. It owns every fsync, the closing of sealed and deleted segment
// files and the cursor checkpoints, so that neither Append nor the reader
// ever waits for the disk:
//
//   - on a kick (segment sealed or deleted): sync and close sealed files,
//     close deleted ones, sync the directory;
//   - every SyncInterval: the same, plus fdatasync of the head and of the
//     cursor file if it was written since its last sync;
//   - when Ack asks (checkpointAfterAck): write the ack cursor once
//     CheckpointInterval has passed since its last write (one pwrite in
//     place; see writeCursor). A timer is armed only while an
//     acknowledgement waits to be written, so an agent at a low rate,
//     whose acks come further apart than CheckpointInterval and are
//     written by Ack itself, or an idle one, is not woken for nothing.
//
// Errors are logged and counted in Stats.SyncErrors; they do not stop the
// spool (data already in the page cache still survives a process crash).
func (s *Spool) flushLoop() {
	defer close(s.done)
	var syncC <-chan time.Time
	if s.cfg.SyncInterval > 0 {
		t := time.NewTicker(s.cfg.SyncInterval)
		defer t.Stop()
		syncC = t.C
	}
	ck := time.NewTimer(time.Hour)
	ck.Stop()
	defer ck.Stop()
	var ckC <-chan time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			s.flush(false)
		case <-syncC:
			s.flush(true)
			s.syncCursor()
		case <-s.ckptKick:
			s.mu.Lock()
			d := s.cfg.CheckpointInterval - time.Since(s.mu.ckptAt)
			s.mu.Unlock()
			if d > 0 {
				ck.Reset(d)
				ckC = ck.C
				continue
			}
			s.checkpointArmed()
		case <-ckC:
			ckC = nil
			s.checkpointArmed()
		}
	}
}

// checkpointAfterAck persists the ack cursor after an Ack moved it: at
// once, with one pwrite in the caller's goroutine, if the last write is
// CheckpointInterval old; otherwise the flusher writes it when it is (a
// wake-up only while acknowledgements come faster than that). The first
// write of a life creates the file and syncs it, which the flusher does
// too, so that Ack never waits for the disk.
func (s *Spool) checkpointAfterAck() {
	s.ckptMu.Lock()
	s.mu.Lock()
	if s.mu.ckptArmed {
		s.mu.Unlock()
		s.ckptMu.Unlock()
		return
	}
	if s.cur.f == nil || time.Since(s.mu.ckptAt) < s.cfg.CheckpointInterval {
		s.mu.ckptArmed = true
		s.mu.Unlock()
		s.ckptMu.Unlock()
		select {
		case s.ckptKick <- struct{}{}:
		default:
		}
		return
	}
	s.mu.Unlock()
	_ = s.checkpointLocked() // errors are logged and counted
	s.ckptMu.Unlock()
}

// checkpointArmed writes the cursor for an Ack that left it to the
// flusher.
func (s *Spool) checkpointArmed() {
	s.mu.Lock()
	s.mu.ckptArmed = false
	s.mu.Unlock()
	s.checkpointNoSync()
}

// flush syncs and closes sealed segment files, closes deleted ones, syncs
// the directory if files came or went and, if head is set, fdatasyncs the
// head segment. Nothing is synced with NoSync. Only the flusher calls it,
// or Close after the flusher stopped.
func (s *Spool) flush(head bool) error {
	syncing := s.cfg.SyncInterval > 0
	s.mu.Lock()
	retired := s.mu.retired
	s.mu.retired = nil
	var sealed []*segment
	for _, g := range s.mu.segs {
		if g.sealed && g.f != nil {
			sealed = append(sealed, g)
		}
	}
	h := s.head
	hsize := h.size
	dir := s.mu.dirDirty
	s.mu.dirDirty = false
	s.mu.Unlock()

	var errs []error
	for _, g := range retired {
		if g.f != nil {
			g.f.Close()
			g.f = nil
		}
	}
	for _, g := range sealed {
		if syncing {
			if err := fdatasync(g.f); err != nil {
				errs = append(errs, err)
			}
		}
		g.f.Close()
		g.f = nil
	}
	if head && syncing && hsize > h.synced {
		if err := fdatasync(h.f); err != nil {
			errs = append(errs, err)
		} else {
			h.synced = hsize
		}
	}
	if dir && syncing {
		if err := s.syncDir(); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.syncFailed(err)
	}
	return err
}

// checkpoint persists the ack cursor if it moved since the last
// checkpoint, and makes it durable (unless NoSync). Close uses it.
func (s *Spool) checkpoint() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if err := s.checkpointLocked(); err != nil {
		return err
	}
	return s.syncCursorLocked()
}

// checkpointNoSync writes the ack cursor if it moved, without waiting for
// the disk: the write survives a crash of the process at once, and a
// power loss once the next SyncInterval synced it. Losing it only means
// more records delivered twice, so it is written often (the agent: at
// most every 200 ms while acknowledgements come) and synced with the head.
func (s *Spool) checkpointNoSync() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	return s.checkpointLocked()
}

// syncCursor fdatasyncs the cursor file if it was written since its last
// sync.
func (s *Spool) syncCursor() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	return s.syncCursorLocked()
}

func (s *Spool) checkpointLocked() error {
	s.mu.Lock()
	ack, last := s.mu.ack, s.mu.ckpt
	s.mu.Unlock()
	if ack == last {
		return nil
	}
	if err := s.writeCursor(ack); err != nil {
		s.syncFailed(err)
		return err
	}
	s.mu.Lock()
	s.mu.ckpt = ack
	s.mu.ckptAt = time.Now()
	s.mu.Unlock()
	return nil
}

func (s *Spool) syncCursorLocked() error {
	if !s.cur.dirty || s.cfg.SyncInterval <= 0 {
		return nil
	}
	if err := fdatasync(s.cur.f); err != nil {
		s.syncFailed(err)
		return err
	}
	s.cur.dirty = false
	return nil
}

// writeCursor persists p in the cursor file. The first write of a life
// creates the file whole (write cursor.tmp, fdatasync it unless NoSync,
// rename it over cursor) and keeps it open; later writes overwrite its
// 24 bytes in place with one pwrite, which is cheap enough to do several
// times a second. The file never changes size, so a power loss leaves the
// old or the new cursor, or, if the sector was torn, one that fails its
// checksum, which Open treats as no cursor: delivery from the oldest
// segment, more duplicates but nothing lost. The caller holds ckptMu.
func (s *Spool) writeCursor(p Pos) error {
	h := encodeHeader(cursorMagic, p.Offset, p.Seq)
	if s.cur.f != nil {
		if _, err := s.cur.f.WriteAt(h, 0); err != nil {
			return fmt.Errorf("cannot write spool cursor %q: %w", s.cur.f.Name(), err)
		}
		s.cur.dirty = true
		return nil
	}
	sync := s.cfg.SyncInterval > 0
	tmp := filepath.Join(s.dir, cursorName+tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("cannot create spool cursor %q: %w", tmp, err)
	}
	_, err = f.Write(h)
	if err == nil && sync {
		err = fdatasync(f)
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.dir, cursorName))
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("cannot write spool cursor in %q: %w", s.dir, err)
	}
	// The open file is now the cursor (rename keeps the inode).
	s.cur.f = f
	return nil
}

// closeCursor closes the cursor file, if open. The caller holds ckptMu or
// runs after the flusher stopped.
func (s *Spool) closeCursor() error {
	if s.cur.f == nil {
		return nil
	}
	err := s.cur.f.Close()
	s.cur.f = nil
	if err != nil {
		return fmt.Errorf("cannot close spool cursor: %w", err)
	}
	return nil
}

func (s *Spool) syncFailed(err error) {
	s.mu.Lock()
	s.mu.stats.SyncErrors++
	s.mu.Unlock()
	s.log.Error("spool sync failed", "err", err)
}

func (s *Spool) syncDir() error {
	d, err := os.Open(s.dir)
	if err != nil {
		return fmt.Errorf("cannot open spool directory %q: %w", s.dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cannot sync spool directory %q: %w", s.dir, err)
	}
	return nil
}

// fdatasync flushes f's data (not its timestamps) to the device.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("cannot sync %q: %w", f.Name(), err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return fmt.Errorf("cannot sync %q: %w", f.Name(), err)
	}
	if serr != nil {
		return fmt.Errorf("cannot sync %q: %w", f.Name(), serr)
	}
	return nil
}
