package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/simtel/simtel/internal/fsutil"
)

// flushLoop is the flusher goroutine, started by Open and stopped by
// Close. It owns every fsync, the closing of sealed and deleted segment
// files and the cursor checkpoints, so that neither Append nor the reader
// ever waits for the disk:
//
//   - on a kick (segment sealed or deleted): close the files of deleted
//     segments and of sealed ones acknowledged whole;
//   - every SyncInterval: fdatasync the segments (sealed or head) whose
//     records were appended a tick ago and are still unacknowledged, and
//     then the directory, and close those sealed files; fdatasync the
//     cursor file if it was written since its last sync and records were
//     synced or cursorSyncTicks passed (see flush);
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
	cursorAge := 0 // ticks since the cursor file was last synced
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			s.flush(flushKick)
		case <-syncC:
			synced, _ := s.flush(flushTick)
			// A stale cursor after a power loss only means samples
			// delivered twice, so it is synced along with samples, or
			// every cursorSyncTicks: an fdatasync every tick shows in
			// the profile of PROFILE=1 RATES=10000 bench/agent-cost.sh.
			if cursorAge++; synced || cursorAge >= cursorSyncTicks {
				s.syncCursor()
				cursorAge = 0
			}
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

// cursorSyncTicks bounds the ticks between syncs of a written cursor
// file while no samples need a sync (flushLoop).
const cursorSyncTicks = 10

// flushMode says how much a flush makes durable.
type flushMode int

const (
	// flushKick closes the files of deleted segments and of sealed ones
	// the broker has acknowledged whole; it syncs nothing.
	flushKick flushMode = iota
	// flushTick also syncs what the broker has still not acknowledged a
	// whole SyncInterval after it was appended (see flush).
	flushTick
	// flushAll syncs everything not acknowledged (Close).
	flushAll
)

// flush closes the write descriptors of deleted segments and syncs and
// closes sealed ones, fdatasyncs the head and syncs the directory as mode
// asks. Nothing is synced with NoSync. Only the flusher calls it, or Close
// after the flusher stopped.
//
// A sync makes records survive a power loss; records the broker has
// acknowledged need not survive one, so only unacknowledged records are
// worth a sync. A tick syncs a segment only if it holds records that were
// appended before the previous tick and are still unacknowledged: while
// the broker keeps up (it acknowledges within the shipper's linger, a
// second or less), nothing is synced at all, and segments that are
// acknowledged and deleted before the kernel's own writeback (about 30 s)
// never reach the disk. While the broker is away every tick syncs, as
// before. The price: a power loss can take unacknowledged records of the
// last two SyncIntervals instead of one. It reports whether it synced
// records.
func (s *Spool) flush(mode flushMode) (bool, error) {
	syncing := s.cfg.SyncInterval > 0
	s.mu.Lock()
	retired := s.mu.retired
	s.mu.retired = nil
	ack := s.mu.ack.Offset
	// Unacknowledged records before due must be synced now.
	var due uint64
	switch mode {
	case flushTick:
		due = s.syncMark
		s.syncMark = s.mu.end.Offset
	case flushAll:
		due = s.mu.end.Offset
	}
	type open struct {
		g   *segment
		end uint64 // stream offset after the segment's last record
	}
	var sealed []open
	for _, g := range s.mu.segs {
		if g.sealed && g.f != nil {
			sealed = append(sealed, open{g, g.base + g.payload()})
		}
	}
	h := s.head
	hsize := h.size
	hend := h.base + h.payload()
	s.mu.Unlock()

	// needs reports whether a segment holding the records of [base, end)
	// has unacknowledged ones that are due.
	needs := func(base, end uint64) bool {
		from := max(base, ack)
		return syncing && from < end && from < due
	}
	var errs []error
	for _, g := range retired {
		if g.f != nil {
			g.f.Close()
			g.f = nil
		}
	}
	synced := false
	for _, o := range sealed {
		switch {
		case needs(o.g.base, o.end):
			if err := s.syncData(o.g.f); err != nil {
				errs = append(errs, err)
				continue // kept open: the next tick tries again
			}
			synced = true
		case syncing && ack < o.end && mode != flushAll:
			continue // not acknowledged, not due yet: kept open for a later tick
		}
		o.g.f.Close()
		o.g.f = nil
	}
	if hsize > h.synced && needs(h.base, hend) {
		if err := s.syncData(h.f); err != nil {
			errs = append(errs, err)
		} else {
			h.synced = hsize
			synced = true
		}
	}
	s.mu.Lock()
	dir := s.mu.dirDirty && syncing && (synced || mode == flushAll)
	if dir {
		s.mu.dirDirty = false
	}
	s.mu.Unlock()
	if dir {
		// New segment files must be found after a power loss along with
		// their synced records.
		if err := s.syncDir(); err != nil {
			errs = append(errs, err)
			s.mu.Lock()
			s.mu.dirDirty = true
			s.mu.Unlock()
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.syncFailed(err)
	}
	return synced, err
}

// syncData fdatasyncs a segment file and counts it.
func (s *Spool) syncData(f *os.File) error {
	err := fdatasync(f)
	if err == nil {
		s.mu.Lock()
		s.mu.stats.DataSyncs++
		s.mu.Unlock()
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
// power loss once a tick synced it. Losing it only means more records
// delivered twice, so it is written often (the agent: at most every
// 200 ms while acknowledgements come) and synced rarely (flushLoop).
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

func (s *Spool) syncDir() error { return fsutil.SyncDir(s.dir) }

// fdatasync flushes f's data to the device.
func fdatasync(f *os.File) error {
	if err := fsutil.Fdatasync(f); err != nil {
		return fmt.Errorf("cannot sync %q: %w", f.Name(), err)
	}
	return nil
}
