package storage

// Installing a copy of another replica's log (a replicated partition that
// catches up from its leader's snapshot): Reset empties the log at the
// copy's first offset, AppendRaw writes the copied batches with the offsets
// and leader epochs they already carry, SkipTo moves the end offset past
// batches the source no longer has (compacted away at its tail), and Sync
// makes the result durable. The source is read with Read like a Fetch.

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"time"
)

// Reset removes every segment and restarts the log empty at offset (which
// may lie beyond the current end). The change is durable on return.
func (l *Log) Reset(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("cannot reset log to negative offset %d", offset)
	}
	defer l.lockExclusive()()
	if l.isClosed() {
		return ErrClosed
	}
	return l.truncateFullyLocked(offset)
}

// AppendRaw writes batches whose base offsets are already set (a copy of
// another log): they must be in increasing order and start at or after
// EndOffset; gaps are allowed (compacted logs have them). Leader epochs
// are kept. Like Append, nothing is fsynced.
func (l *Log) AppendRaw(b []byte, batches []BatchHeader) (lastOffset int64, err error) {
	if _, err := checkAppend(b, batches); err != nil {
		return 0, err
	}
	for i := 1; i < len(batches); i++ {
		if batches[i].BaseOffset <= batches[i-1].LastOffset() {
			return 0, fmt.Errorf("copied batch at offset %d follows one ending at %d: %w", batches[i].BaseOffset, batches[i-1].LastOffset(), ErrCorruptBatch)
		}
	}
	cfg := l.config()
	l.appendMu.Lock()
	defer l.appendMu.Unlock()

	active, end, err := l.appendTarget()
	if err != nil {
		return 0, err
	}
	first, last := batches[0].BaseOffset, batches[len(batches)-1].LastOffset()
	if first < end {
		return 0, fmt.Errorf("copied batch at offset %d is below the log end %d: %w", first, end, ErrOffsetOutOfRange)
	}
	now := l.now()
	if active.size > 0 && (active.size+int64(len(b)) > cfg.SegmentBytes || last-active.base > math.MaxUint32) {
		if active, err = l.rollAtLocked(active, first, now); err != nil {
			return 0, err
		}
	}
	if last-active.base > math.MaxUint32 {
		return 0, fmt.Errorf("copied batches span offsets %d..%d, too far from segment base %d: %w", first, last, active.base, ErrBatchTooLarge)
	}
	writePos := active.size
	if err := l.writeActive(active, b); err != nil {
		return 0, err
	}
	interval := int64(cfg.IndexIntervalBytes)
	l.mu.Lock()
	if active.size == 0 {
		active.rollBase = now
	}
	pos := writePos
	for i := range batches {
		h := &batches[i]
		active.idx.add(active.base, h.BaseOffset, pos, h.Length, h.MaxTimestamp, interval)
		pos += int64(h.Length)
	}
	active.size = pos
	active.next = last + 1
	l.mu.end = last + 1
	l.mu.Unlock()
	return last, nil
}

// SkipTo moves the end offset forward to offset without writing a batch:
// the next Append gets offset. A copy whose source dropped its last
// batches (compaction) needs this so both assign the same next offsets.
func (l *Log) SkipTo(offset int64) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	active := l.mu.segs[len(l.mu.segs)-1]
	end := l.mu.end
	l.mu.Unlock()
	if offset <= end {
		return nil
	}
	if active.size == 0 {
		// An empty active segment can simply be replaced by one whose
		// base is the new end.
		if err := removeSegmentFiles(active.path); err != nil {
			return fmt.Errorf("cannot replace empty segment: %w", err)
		}
		seg, err := createSegment(segmentPath(l.dir, offset), offset, l.now())
		if err != nil {
			return err
		}
		l.mu.Lock()
		l.mu.segs = append(l.mu.segs[:len(l.mu.segs)-1:len(l.mu.segs)-1], seg)
		l.mu.end = offset
		if len(l.mu.segs) == 1 {
			l.mu.start = max(l.mu.start, offset)
		}
		l.mu.dirDirty = true
		l.mu.Unlock()
		active.file.release()
	} else if _, err := l.rollAtLocked(active, offset, l.now()); err != nil {
		return err
	}
	l.mu.Lock()
	l.mu.end = offset
	l.mu.Unlock()
	l.kickFlusher()
	return nil
}

// rollAtLocked is rollLocked with the new segment's base given (at or
// after the old segment's next offset). Requires appendMu.
func (l *Log) rollAtLocked(old *segment, base int64, now time.Time) (*segment, error) {
	if base < old.next {
		return nil, fmt.Errorf("cannot start a segment at %d before the end %d of %q", base, old.next, filepath.Base(old.path))
	}
	seg, err := createSegment(segmentPath(l.dir, base), base, now)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.mu.segs = append(l.mu.segs, seg)
	l.mu.dirDirty = true
	l.mu.Unlock()
	l.kickFlusher()
	return seg, nil
}

// ReadBatchPrefix returns the base offset and total size of the batch
// whose first bytes (at least 12) are in p; a reader of a stream of
// batches uses it to frame them.
func ReadBatchPrefix(p []byte) (base int64, size int, err error) {
	if len(p) < batchPrefixSize {
		return 0, 0, fmt.Errorf("batch prefix needs %d bytes, have %d: %w", batchPrefixSize, len(p), ErrCorruptBatch)
	}
	bl := int32(binary.BigEndian.Uint32(p[8:12]))
	if bl < minBatchLength || bl > math.MaxInt32-batchPrefixSize {
		return 0, 0, fmt.Errorf("batch length %d out of range: %w", bl, ErrCorruptBatch)
	}
	return int64(binary.BigEndian.Uint64(p[:8])), int(bl) + batchPrefixSize, nil
}

// ParseStoredBatches is ParseBatches for batches copied from a log: it
// accepts batches rewritten by compaction (fewer records than their
// offset span), which a producer may not send.
func ParseStoredBatches(b []byte) ([]BatchHeader, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("no record batches: %w", ErrCorruptBatch)
	}
	var hs []BatchHeader
	for pos := 0; pos < len(b); {
		h, err := validateBatch(b[pos:], 0, false)
		if err != nil {
			return nil, fmt.Errorf("batch %d at byte %d: %w", len(hs), pos, err)
		}
		hs = append(hs, h)
		pos += int(h.Length)
	}
	return hs, nil
}
