package storage

import (
	"context"
	"fmt"
	"os"

	"github.com/simtel/simtel/internal/fsutil"
)

// Sync blocks until every offset up to and including upTo is durable.
// Offsets not yet appended are not waited for: upTo is clamped to the last
// assigned offset. Concurrent callers share fdatasync calls: the flusher
// goroutine syncs everything written when it starts a round, and every
// caller whose offset that covers is released by the same round.
//
// An fsync failure is sticky: the page cache may have dropped the dirty
// pages, so the data can never be acknowledged. Every later Sync and
// Append returns the error.
func (l *Log) Sync(ctx context.Context, upTo int64) error {
	for {
		l.mu.Lock()
		if err := l.mu.syncErr; err != nil {
			l.mu.Unlock()
			return fmt.Errorf("log unusable after failed fsync: %w", err)
		}
		if upTo >= l.mu.end {
			upTo = l.mu.end - 1
		}
		if upTo < l.mu.synced {
			l.mu.Unlock()
			return nil
		}
		if l.mu.closed {
			l.mu.Unlock()
			return ErrClosed
		}
		flushed := l.mu.flushed
		l.mu.Unlock()

		l.kickFlusher()
		select {
		case <-flushed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *Log) kickFlusher() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// flushLoop is the flusher goroutine, started by Open and stopped by
// Close. Each wake-up runs one flush round. Because the kick channel holds
// one pending wake-up, callers that arrive while a round is in progress
// are all served by the next round: that is the group commit.
func (l *Log) flushLoop() {
	defer close(l.done)
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
		}
		_ = l.flushOnce()
		if l.pendingIndexes() && l.maint.TryLock() {
			// Never wait for maint here: a long compaction must not
			// delay Sync callers. Whoever holds maint persists the
			// indexes before releasing it, or a later round does.
			if err := l.persistIndexesLocked(); err != nil {
				l.logger.Warn("cannot persist segment index", "err", err)
			}
			l.maint.Unlock()
		}
	}
}

type syncWork struct {
	seg  *segment
	size int64
}

// flushOnce fdatasyncs every segment with unsynced bytes, and the
// directory if segments were created, then publishes the new synced offset
// and wakes all Sync callers. It returns the sticky error, if any.
func (l *Log) flushOnce() error {
	l.mu.Lock()
	if err := l.mu.syncErr; err != nil {
		l.wakeLocked()
		l.mu.Unlock()
		return err
	}
	target := l.mu.end
	gen := l.mu.truncGen
	var work []syncWork
	for _, s := range l.mu.segs {
		if s.synced < s.size {
			s.file.acquire()
			work = append(work, syncWork{seg: s, size: s.size})
		}
	}
	dirDirty := l.mu.dirDirty
	l.mu.dirDirty = false
	l.mu.Unlock()

	var err error
	for _, w := range work {
		if err == nil {
			l.fsyncs.Add(1)
			if serr := l.syncFile(w.seg.file.f); serr != nil {
				err = fmt.Errorf("cannot fsync segment %q: %w", w.seg.path, serr)
			}
		}
		w.seg.file.release()
	}
	if err == nil && dirDirty {
		l.fsyncs.Add(1)
		err = fsutil.SyncDir(l.dir)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.mu.syncErr == nil {
			l.mu.syncErr = err
			l.logger.Error("fsync failed, log is read-only", "err", err)
		}
		l.mu.dirDirty = l.mu.dirDirty || dirDirty
		l.wakeLocked()
		return err
	}
	if gen == l.mu.truncGen {
		for _, w := range work {
			w.seg.synced = max(w.seg.synced, w.size)
		}
		l.mu.synced = max(l.mu.synced, target)
	}
	l.wakeLocked()
	return nil
}

func (l *Log) wakeLocked() {
	close(l.mu.flushed)
	l.mu.flushed = make(chan struct{})
}

func (l *Log) setSyncErr(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.syncErr == nil {
		l.mu.syncErr = err
		l.logger.Error("log write failed, log is read-only", "err", err)
	}
	l.wakeLocked()
}

// pendingIndexes reports whether a closed, fully synced segment has no
// index files on disk yet.
func (l *Log) pendingIndexes() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < len(l.mu.segs)-1; i++ {
		if s := l.mu.segs[i]; !s.indexOnDisk && s.synced >= s.size {
			return true
		}
	}
	return false
}

// persistIndexesLocked writes the index files of closed segments whose
// data is fully synced. Index files are only ever written for such
// segments, so at Open their presence (plus a consistency check) proves
// the segment needs no CRC scan. Requires maint.
func (l *Log) persistIndexesLocked() error {
	type job struct {
		seg         *segment
		offs, times []byte
	}
	var jobs []job
	l.mu.Lock()
	for i := 0; i < len(l.mu.segs)-1; i++ {
		s := l.mu.segs[i]
		if !s.indexOnDisk && s.synced >= s.size {
			jobs = append(jobs, job{seg: s, offs: s.idx.encodeOffsets(), times: s.idx.encodeTimes()})
		}
	}
	l.mu.Unlock()
	if len(jobs) == 0 {
		return nil
	}
	for _, j := range jobs {
		if err := fsutil.WriteFile(j.seg.timeIndexPath(), j.times, fsutil.WriteOptions{}); err != nil {
			return fmt.Errorf("cannot write time index of segment %q: %w", j.seg.path, err)
		}
		if err := fsutil.WriteFile(j.seg.indexPath(), j.offs, fsutil.WriteOptions{}); err != nil {
			return fmt.Errorf("cannot write offset index of segment %q: %w", j.seg.path, err)
		}
	}
	if err := fsutil.SyncDir(l.dir); err != nil {
		return err
	}
	l.mu.Lock()
	for _, j := range jobs {
		j.seg.indexOnDisk = true
	}
	l.mu.Unlock()
	return nil
}

// syncFileData is the default Log.syncFile.
func syncFileData(f *os.File) error { return fsutil.Fdatasync(f) }
