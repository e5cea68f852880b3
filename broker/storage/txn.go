package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"

	"github.com/simtel/simtel/internal/fsutil"
)

// Transactions in the log.
//
// A transactional producer's batches carry the transactional attribute;
// its transaction ends with a control batch (attributes transactional |
// control) holding one control record whose key is (version int16 = 0,
// type int16: 0 abort, 1 commit) and whose value is (version int16 = 0,
// coordinator epoch int32), the record format Kafka clients decode.
//
// The log keeps, beside its segments, the transaction index that fetches
// with isolation level read_committed need:
//
//   - ongoing: per producer id, the offset of the first batch of its open
//     transaction. The earliest of them is the first unstable offset; the
//     broker's last stable offset is min(that, high watermark).
//   - aborted: every aborted transaction (producer id, first offset,
//     offset of its abort marker) whose marker is at or above the log
//     start offset, ordered by marker offset.
//
// The index lives in memory. Append maintains it (it sees every batch and
// its control record); Open rebuilds it by reading the batch headers of
// the whole log and the bodies of the control batches only, the same scan
// cost as rebuilding idempotent producer state; Truncate rebuilds it; the
// removal of segments by retention or DeleteRecords drops the aborted
// entries whose marker went with them.
//
// A log that never held a transactional batch skips those scans: before
// the first transactional batch is written, Append creates the file
// "transactions" in the log directory (atomically, fsynced), and Open
// scans only when it exists.

// txnMarkFile marks a log that has held transactional batches.
const txnMarkFile = "transactions"

// markTransactional records durably, once, that the log holds
// transactional batches, before the first one is written. Requires
// appendMu.
func (l *Log) markTransactional(batches []BatchHeader) error {
	if l.hasTxn.Load() {
		return nil
	}
	for _, h := range batches {
		if h.IsTransactional() {
			if err := fsutil.WriteFile(filepath.Join(l.dir, txnMarkFile), []byte("1\n"), fsutil.WriteOptions{SyncDir: true}); err != nil {
				return fmt.Errorf("cannot mark log as transactional: %w", err)
			}
			l.hasTxn.Store(true)
			return nil
		}
	}
	return nil
}

// ControlType is the type of a control record.
type ControlType int16

const (
	// ControlAbort ends a transaction whose batches must be skipped by
	// read_committed consumers.
	ControlAbort ControlType = 0
	// ControlCommit ends a transaction whose batches are visible.
	ControlCommit ControlType = 1
)

// AbortedTxn is one aborted transaction of a partition.
type AbortedTxn struct {
	ProducerID int64
	// FirstOffset is the offset of the transaction's first batch in the
	// partition; LastOffset the offset of its abort marker.
	FirstOffset, LastOffset int64
}

type txnIndex struct {
	ongoing map[int64]int64
	aborted []AbortedTxn // ordered by LastOffset
	// ended: transactions ended by a marker, ordered by the marker's
	// offset, until FirstUnstableOffsetAt sees the marker below the high
	// watermark (a replicated log holds markers raft may still remove).
	ended []AbortedTxn
}

func newTxnIndex() txnIndex { return txnIndex{ongoing: map[int64]int64{}} }

// observe updates the index with one batch at offset base; batch is the
// whole batch (needed for control batches only).
func (x *txnIndex) observe(h BatchHeader, base int64, batch []byte) {
	if !h.IsTransactional() || h.ProducerID < 0 {
		return
	}
	if !h.IsControl() {
		if _, ok := x.ongoing[h.ProducerID]; !ok {
			x.ongoing[h.ProducerID] = base
		}
		return
	}
	ct, ok := ParseControlBatch(batch)
	if !ok {
		// Only the broker writes control batches; an unreadable one
		// still ends whatever was open, conservatively as an abort.
		ct = ControlAbort
	}
	first, open := x.ongoing[h.ProducerID]
	if !open {
		return // a marker of a transaction with no data here
	}
	delete(x.ongoing, h.ProducerID)
	x.ended = append(x.ended, AbortedTxn{ProducerID: h.ProducerID, FirstOffset: first, LastOffset: base})
	if ct == ControlAbort {
		x.aborted = append(x.aborted, AbortedTxn{ProducerID: h.ProducerID, FirstOffset: first, LastOffset: base})
	}
}

// ParseControlBatch returns the control type of a whole control batch
// (header included), or false if its record cannot be read.
func ParseControlBatch(batch []byte) (ControlType, bool) {
	t, _, ok := ParseControlMarker(batch)
	return t, ok
}

// ParseControlMarker returns the control type of a whole control batch
// (header included) and the coordinator epoch its marker carries (-1 if
// the value is too short to hold one), or false if its record cannot be
// read.
func ParseControlMarker(batch []byte) (ControlType, int32, bool) {
	if len(batch) < batchHeaderSize {
		return 0, -1, false
	}
	h := decodeHeader(batch, int32(binary.BigEndian.Uint32(batch[offBatchLength:])))
	if !h.IsControl() || h.Compression() != CompressionNone || h.NumRecords < 1 {
		return 0, -1, false
	}
	end := min(int(h.Length), len(batch))
	r, _, err := nextRecord(batch[batchHeaderSize:end])
	if err != nil || len(r.key) < 4 {
		return 0, -1, false
	}
	t := ControlType(binary.BigEndian.Uint16(r.key[2:4]))
	if t != ControlAbort && t != ControlCommit {
		return 0, -1, false
	}
	epoch := int32(-1)
	if len(r.value) >= 6 {
		epoch = int32(binary.BigEndian.Uint32(r.value[2:6]))
	}
	return t, epoch, true
}

// AppendControlBatch appends to dst a control batch ending producerID's
// transaction with a marker of type t. The log assigns its offset.
func AppendControlBatch(dst []byte, producerID int64, epoch int16, t ControlType, coordinatorEpoch int32, nowMillis int64) []byte {
	key := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0), uint16(t))
	value := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, 0), uint32(coordinatorEpoch))
	return appendBatch(dst, []BatchRecord{{Key: key, Value: value}}, attrTransactional|attrControl, producerID, epoch, nowMillis)
}

// FirstUnstableOffset returns the offset of the first batch of the
// earliest open transaction, or ok=false when none is open.
func (l *Log) FirstUnstableOffset() (offset int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, first := range l.mu.txn.ongoing {
		if !ok || first < offset {
			offset, ok = first, true
		}
	}
	return offset, ok
}

// FirstUnstableOffsetAt is FirstUnstableOffset for a log whose high
// watermark is hw: a transaction whose marker is at or above hw is still
// open, as raft may yet remove the marker. hw must not decrease between
// calls (Truncate rebuilds the index).
func (l *Log) FirstUnstableOffsetAt(hw int64) (offset int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	x := &l.mu.txn
	i := sort.Search(len(x.ended), func(i int) bool { return x.ended[i].LastOffset >= hw })
	if i > 0 {
		x.ended = slices.Delete(x.ended, 0, i)
	}
	for _, e := range x.ended {
		if !ok || e.FirstOffset < offset {
			offset, ok = e.FirstOffset, true
		}
	}
	for _, first := range x.ongoing {
		if !ok || first < offset {
			offset, ok = first, true
		}
	}
	return offset, ok
}

// OngoingTxn returns the first offset of producerID's open transaction.
func (l *Log) OngoingTxn(producerID int64) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first, ok := l.mu.txn.ongoing[producerID]
	return first, ok
}

// AbortedTxns returns the aborted transactions that overlap the offsets
// [from, to]: their abort marker is at or after from and their first
// batch at or before to. Fetch sends them with read_committed data so the
// client drops the aborted batches.
func (l *Log) AbortedTxns(from, to int64) []AbortedTxn {
	l.mu.Lock()
	defer l.mu.Unlock()
	ab := l.mu.txn.aborted
	i := sort.Search(len(ab), func(i int) bool { return ab[i].LastOffset >= from })
	var out []AbortedTxn
	for _, a := range ab[i:] {
		if a.FirstOffset <= to {
			out = append(out, a)
		}
	}
	return out
}

// observeAppendLocked updates the transaction index for batches just
// written at first; b holds them back to back. Requires mu.
func (l *Log) observeAppendLocked(b []byte, batches []BatchHeader, first int64) {
	off, pos := first, 0
	for i := range batches {
		h := batches[i]
		if h.IsTransactional() {
			l.mu.txn.observe(h, off, b[pos:pos+int(h.Length)])
		}
		off += int64(h.LastOffsetDelta) + 1
		pos += int(h.Length)
	}
}

// pruneAbortedLocked forgets aborted transactions whose marker is below
// the log start offset. Requires mu.
func (l *Log) pruneAbortedLocked() {
	ab := l.mu.txn.aborted
	i := sort.Search(len(ab), func(i int) bool { return ab[i].LastOffset >= l.mu.start })
	if i > 0 {
		l.mu.txn.aborted = slices.Clone(ab[i:])
	}
}

// rebuildTxnIndex scans the whole log and replaces the transaction index.
// The caller keeps appends out (Open before the log is shared, or
// appendMu held).
func (l *Log) rebuildTxnIndex() error {
	if !l.hasTxn.Load() {
		return nil
	}
	x := newTxnIndex()
	l.mu.Lock()
	empty := l.mu.closed || len(l.mu.segs) == 0
	start := l.mu.start
	l.mu.Unlock()
	if empty {
		return nil
	}
	err := l.scanBatches(start, true, func(h BatchHeader, control []byte) error {
		x.observe(h, h.BaseOffset, control)
		return nil
	})
	if errors.Is(err, ErrClosed) {
		return nil // closed since: the index is of no use any more
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.mu.txn = x
	l.pruneAbortedLocked()
	l.mu.Unlock()
	return nil
}
