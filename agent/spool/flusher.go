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
//   - every SyncInterval: the same, plus fdatasync of the head;
//   - every CheckpointInterval: persist the ack cursor if it moved.
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
	ck := time.NewTicker(s.cfg.CheckpointInterval)
	defer ck.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			s.flush(false)
		case <-syncC:
			s.flush(true)
		case <-ck.C:
			s.checkpoint()
		}
	}
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
// checkpoint: write cursor.tmp, fdatasync it (unless NoSync), rename it
// over cursor.
func (s *Spool) checkpoint() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	s.mu.Lock()
	ack, last := s.mu.ack, s.mu.ckpt
	s.mu.Unlock()
	if ack == last {
		return nil
	}
	if err := s.writeCursor(ack, s.cfg.SyncInterval > 0); err != nil {
		s.syncFailed(err)
		return err
	}
	s.mu.Lock()
	s.mu.ckpt = ack
	s.mu.Unlock()
	return nil
}

func (s *Spool) writeCursor(p Pos, sync bool) error {
	tmp := filepath.Join(s.dir, cursorName+tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("cannot create spool cursor %q: %w", tmp, err)
	}
	_, err = f.Write(encodeHeader(cursorMagic, p.Offset, p.Seq))
	if err == nil && sync {
		err = fdatasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.dir, cursorName))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cannot write spool cursor in %q: %w", s.dir, err)
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
