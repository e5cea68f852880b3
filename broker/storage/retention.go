package storage

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/simtel/simtel/internal/fsutil"
)

// EnforceRetention rolls the active segment if it is older than
// SegmentMs, then, if the cleanup policy includes delete, removes the
// oldest closed segments while either their newest timestamp is older than
// RetentionMs or the log would still hold at least RetentionBytes without
// them (Kafka's retention.bytes rule). Only a prefix of the log is ever
// deleted, never the active segment, and never a segment holding offsets
// at or above keepFrom (pass math.MaxInt64 for no floor). It also
// persists pending segment indexes, so callers should run it periodically
// whatever the policy. It returns the bytes deleted.
func (l *Log) EnforceRetention(keepFrom int64) (int64, error) {
	cfg := l.config()
	l.maint.Lock()
	defer l.maint.Unlock()
	if l.isClosed() {
		return 0, ErrClosed
	}
	now := l.now()
	if err := l.rollIfOld(now, cfg); err != nil {
		return 0, err
	}
	defer func() {
		if err := l.persistIndexesLocked(); err != nil {
			l.logger.Warn("cannot persist segment index", "err", err)
		}
	}()
	if !cfg.Delete {
		return 0, nil
	}
	nowMs := now.UnixMilli()
	l.mu.Lock()
	segs := l.mu.segs
	total := l.sizeLocked()
	n := 0
	for ; n < len(segs)-1; n++ {
		s := segs[n]
		if segs[n+1].base > keepFrom {
			break
		}
		byTime := cfg.RetentionMs >= 0 && s.idx.maxTs < nowMs-cfg.RetentionMs
		bySize := cfg.RetentionBytes >= 0 && total-s.size >= cfg.RetentionBytes
		if !byTime && !bySize {
			break
		}
		total -= s.size
	}
	l.mu.Unlock()
	if n == 0 {
		return 0, nil
	}
	deleted, err := l.deletePrefixLocked(n)
	if deleted > 0 {
		l.logger.Info("deleted segments by retention", "segments", n, "bytes", deleted)
	}
	return deleted, err
}

// rollIfOld rolls a non-empty active segment older than SegmentMs, so
// that time-based retention and compaction can reach its data even when
// no more appends arrive.
func (l *Log) rollIfOld(now time.Time, cfg *Config) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.mu.Lock()
	active := l.mu.segs[len(l.mu.segs)-1]
	old := active.size > 0 && now.Sub(active.rollBase) >= time.Duration(cfg.SegmentMs)*time.Millisecond
	l.mu.Unlock()
	if !old {
		return nil
	}
	_, err := l.rollLocked(active, now)
	return err
}

// deletePrefixLocked removes the first n segments (never the active one)
// from the log and deletes their files. Readers holding them keep their
// open descriptors. The log start offset moves to the new first segment.
// Requires maint.
func (l *Log) deletePrefixLocked(n int) (int64, error) {
	l.mu.Lock()
	n = min(n, len(l.mu.segs)-1)
	victims := append([]*segment(nil), l.mu.segs[:n]...)
	l.mu.segs = append([]*segment(nil), l.mu.segs[n:]...)
	l.mu.start = max(l.mu.start, l.mu.segs[0].base)
	l.pruneAbortedLocked()
	l.mu.Unlock()

	var bytes int64
	var errs []error
	for _, s := range victims {
		bytes += s.size
		delete(l.maint.cleaned, s.base)
		if err := removeSegmentFiles(s.path); err != nil {
			errs = append(errs, err)
		}
		s.file.release()
	}
	if err := errors.Join(errs...); err != nil {
		return bytes, fmt.Errorf("cannot delete segments: %w", err)
	}
	return bytes, nil
}

// DeleteRecords advances the log start offset to before (clamped to the
// end offset), records it durably in the log-start-offset checkpoint
// before answering, and deletes the segments that lie entirely below it.
// If that is every batch, the active segment is rolled so it can go too.
func (l *Log) DeleteRecords(before int64) (newStart int64, err error) {
	l.maint.Lock()
	defer l.maint.Unlock()
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	before = min(before, l.mu.end)
	start := l.mu.start
	l.mu.Unlock()
	if before <= start {
		return start, nil
	}
	if err := l.writeStartCheckpoint(before); err != nil {
		return start, err
	}
	l.mu.Lock()
	l.mu.start = max(l.mu.start, before)
	l.pruneAbortedLocked()
	l.mu.Unlock()

	l.appendMu.Lock()
	l.mu.Lock()
	active := l.mu.segs[len(l.mu.segs)-1]
	roll := active.size > 0 && active.next <= before
	l.mu.Unlock()
	if roll {
		if _, err := l.rollLocked(active, l.now()); err != nil {
			l.appendMu.Unlock()
			return before, err
		}
	}
	l.appendMu.Unlock()

	l.mu.Lock()
	n := 0
	for n < len(l.mu.segs)-1 && l.mu.segs[n+1].base <= before {
		n++
	}
	l.mu.Unlock()
	if n > 0 {
		if _, err := l.deletePrefixLocked(n); err != nil {
			return before, err
		}
	}
	l.logger.Info("deleted records", "log_start_offset", before)
	return before, nil
}

// Truncate removes every batch containing an offset at or above offset;
// a batch straddling offset is removed whole, so the new end offset is
// the first offset after the last remaining batch. An offset below the
// log start offset empties the log and restarts it at offset. The change
// is fsynced before returning so removed data cannot reappear after a
// crash.
func (l *Log) Truncate(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("cannot truncate to negative offset %d", offset)
	}
	defer l.lockExclusive()()
	// Transactions whose markers are cut off are open again, and the
	// aborted list loses the markers removed: rebuild from what is left.
	defer func() {
		if err := l.rebuildTxnIndex(); err != nil {
			l.logger.Warn("cannot rebuild transaction index after truncation", "err", err)
		}
	}()

	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if offset >= l.mu.end {
		l.mu.Unlock()
		return nil
	}
	if offset < l.mu.start || offset < l.mu.segs[0].base {
		l.mu.Unlock()
		return l.truncateFullyLocked(offset)
	}
	i := l.segmentIndexLocked(offset)
	segs := append([]*segment(nil), l.mu.segs...)
	seg := segs[i]
	v := l.viewLocked(seg, seg.idx.lookup(offset-seg.base))
	l.mu.Unlock()

	// Find the first batch reaching offset; everything from it goes.
	cut := seg.size
	buf := make([]byte, headerWindow)
	err := scanView(v, buf, func(h BatchHeader, pos int64) (bool, error) {
		if h.LastOffset() >= offset {
			cut = pos
			return false, nil
		}
		return true, nil
	})
	v.file.release()
	if err != nil {
		return err
	}

	// Remove later segments newest first, so a crash leaves a prefix.
	for j := len(segs) - 1; j > i; j-- {
		if err := removeSegmentFiles(segs[j].path); err != nil {
			return fmt.Errorf("cannot truncate log: %w", err)
		}
	}
	// The segment becomes active again: its index files go first.
	if err := removeIfExists(seg.indexPath()); err != nil {
		return err
	}
	if err := removeIfExists(seg.timeIndexPath()); err != nil {
		return err
	}
	if err := seg.file.f.Truncate(cut); err != nil {
		return fmt.Errorf("cannot truncate segment %q: %w", seg.path, err)
	}
	idx := seg.idx
	idx.offsets = append([]offsetEntry(nil), idx.offsets...)
	idx.times = append([]timeEntry(nil), idx.times...)
	idx.truncate(cut)
	next, err := resumeIndex(seg.file.f, seg.base, &idx, cut, buf)
	if err != nil {
		return fmt.Errorf("cannot reindex truncated segment %q: %w", seg.path, err)
	}
	l.fsyncs.Add(1)
	if err := l.syncFile(seg.file.f); err != nil {
		err = fmt.Errorf("cannot fsync segment %q: %w", seg.path, err)
		l.setSyncErr(err)
		return err
	}
	l.fsyncs.Add(1)
	if err := fsutil.SyncDir(l.dir); err != nil {
		return err
	}

	l.mu.Lock()
	removed := l.mu.segs[i+1:]
	l.mu.segs = append([]*segment(nil), l.mu.segs[:i+1]...)
	seg.idx = idx
	seg.size = cut
	seg.synced = cut
	seg.next = next
	seg.indexOnDisk = false
	seg.rollBase = l.now()
	l.mu.end = next
	l.mu.synced = min(l.mu.synced, next)
	l.mu.start = min(l.mu.start, next)
	l.mu.truncGen++
	l.mu.Unlock()
	for _, s := range removed {
		delete(l.maint.cleaned, s.base)
		s.file.release()
	}
	delete(l.maint.cleaned, seg.base)
	if err := l.writeCleanerCheckpointLocked(); err != nil {
		return err
	}
	l.logger.Info("truncated log", "offset", offset, "end_offset", next, "segments_removed", len(removed))
	return nil
}

// truncateFullyLocked drops every segment and restarts the log empty at
// offset. Requires maint and appendMu.
func (l *Log) truncateFullyLocked(offset int64) error {
	l.mu.Lock()
	old := l.mu.segs
	l.mu.Unlock()
	for j := len(old) - 1; j >= 0; j-- {
		if err := removeSegmentFiles(old[j].path); err != nil {
			return fmt.Errorf("cannot truncate log: %w", err)
		}
	}
	if err := l.writeStartCheckpoint(offset); err != nil {
		return err
	}
	path := segmentPath(l.dir, offset)
	seg, err := createSegment(path, offset, l.now())
	if err != nil {
		return err
	}
	l.fsyncs.Add(1)
	if err := fsutil.SyncDir(l.dir); err != nil {
		seg.file.release()
		return err
	}
	l.mu.Lock()
	l.mu.segs = []*segment{seg}
	l.mu.start, l.mu.end, l.mu.synced = offset, offset, offset
	l.mu.truncGen++
	l.mu.Unlock()
	for _, s := range old {
		s.file.release()
	}
	clear(l.maint.cleaned)
	if err := l.writeCleanerCheckpointLocked(); err != nil {
		return err
	}
	l.logger.Info("truncated log fully", "offset", offset, "segment", filepath.Base(path))
	return nil
}
