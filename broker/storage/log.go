package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simtel/simtel/internal/fsutil"
)

// Config configures a partition log. Zero values select the defaults noted
// on each field, so a caller only sets what the topic overrides.
type Config struct {
	// Dir is the partition directory; it is created if missing.
	Dir string
	// Durable: the caller made every file in Dir durable (fsutil.SyncFS)
	// since it was last written, so Open fsyncs only what it changes
	// itself (a truncated segment, removed or created files) instead of
	// the tail segment and the directory of every log. Only Open reads it.
	Durable bool
	// SegmentBytes rolls the active segment once it would grow past this
	// size. Default 1 GiB; at most 4 GiB because index positions are
	// uint32.
	SegmentBytes int64
	// SegmentMs rolls a non-empty active segment once it is this old (ms,
	// counted from its first append, or from Open for the tail segment).
	// Default 7 days.
	SegmentMs int64
	// IndexIntervalBytes is the number of bytes between sparse offset and
	// time index entries. Default 4096.
	IndexIntervalBytes int
	// RetentionBytes is the size the log may keep; 0 selects the default,
	// -1 (unlimited).
	RetentionBytes int64
	// RetentionMs deletes closed segments whose newest timestamp is older
	// than this; 0 selects the default (7 days), -1 is unlimited.
	RetentionMs int64
	// Compact is set when cleanup.policy contains "compact".
	Compact bool
	// Delete is set when cleanup.policy contains "delete". When neither
	// Compact nor Delete is set, Delete is assumed (Kafka's default).
	Delete bool
	// DeleteRetentionMs is how long tombstones survive after the segment
	// holding them was first compacted; 0 selects the default (1 day) and
	// a negative value removes them at the next compaction after the first.
	DeleteRetentionMs int64
	// MinCompactionLagMs keeps segments whose newest timestamp is younger
	// than this out of compaction.
	MinCompactionLagMs int64
	// MaxBatchBytes is the largest batch accepted; default 1048588.
	MaxBatchBytes int
	// Logger receives the log's events and should carry the partition
	// (topic, partition or directory) as attributes; default discards.
	Logger *slog.Logger
	// Now is the clock, replaceable in tests; default time.Now.
	Now func() time.Time
}

const (
	defaultSegmentBytes      = 1 << 30
	defaultSegmentMs         = 7 * 24 * 60 * 60 * 1000
	defaultIndexInterval     = 4096
	defaultRetentionMs       = 7 * 24 * 60 * 60 * 1000
	defaultDeleteRetentionMs = 24 * 60 * 60 * 1000
	defaultMaxBatchBytes     = 1048588
	maxSegmentBytes          = math.MaxUint32
)

// withDefaults fills in zero fields.
func (c Config) withDefaults() Config {
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = defaultSegmentBytes
	}
	c.SegmentBytes = min(c.SegmentBytes, maxSegmentBytes)
	if c.SegmentMs <= 0 {
		c.SegmentMs = defaultSegmentMs
	}
	if c.IndexIntervalBytes <= 0 {
		c.IndexIntervalBytes = defaultIndexInterval
	}
	if c.RetentionBytes == 0 || c.RetentionBytes < -1 {
		c.RetentionBytes = -1
	}
	if c.RetentionMs == 0 {
		c.RetentionMs = defaultRetentionMs
	}
	if c.RetentionMs < -1 {
		c.RetentionMs = -1
	}
	if !c.Compact && !c.Delete {
		c.Delete = true
	}
	if c.DeleteRetentionMs == 0 {
		c.DeleteRetentionMs = defaultDeleteRetentionMs
	}
	if c.DeleteRetentionMs < 0 {
		c.DeleteRetentionMs = 0
	}
	if c.MinCompactionLagMs < 0 {
		c.MinCompactionLagMs = 0
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = defaultMaxBatchBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Stats is a snapshot of counters, mostly for tests and metrics.
type Stats struct {
	// Fsyncs counts fdatasync/fsync calls on segment files and the
	// directory made for Sync, rolls and Close.
	Fsyncs       int64
	Segments     int
	Size         int64
	StartOffset  int64
	EndOffset    int64
	SyncedOffset int64
}

// Log is one partition's log. All methods are safe for concurrent use.
// See doc.go for the data path, goroutines and lock order.
type Log struct {
	dir    string
	logger *slog.Logger
	now    func() time.Time
	cfg    atomic.Pointer[Config]

	// syncFile makes a file's data durable; tests replace it to inject
	// failures.
	syncFile func(*os.File) error
	fsyncs   atomic.Int64
	// hasTxn is set once the log holds (or may hold) transactional
	// batches; see txn.go.
	hasTxn atomic.Bool
	// hdrBufs recycles header read windows so Read does not allocate one
	// per call.
	hdrBufs sync.Pool

	// maint serializes the operations that restructure segment files:
	// retention, DeleteRecords, Truncate, compaction, index persistence
	// and Close. It also guards compaction bookkeeping.
	maint struct {
		sync.Mutex
		// cleaned records, per segment base offset, when the segment was
		// first compacted and whether it still holds tombstones.
		cleaned map[int64]cleanState
	}

	// appendMu serializes writers of the active segment (Append, roll,
	// Truncate, Close) so that the write syscall runs without mu held and
	// readers never wait for it.
	appendMu sync.Mutex

	mu struct {
		sync.Mutex
		// segs is ordered by base offset; the last one is active.
		segs []*segment
		// start is the log start offset.
		start int64
		// end is the next offset to assign.
		end int64
		// synced: every offset below it is durable.
		synced int64
		// syncErr is the first fsync error; it is sticky.
		syncErr error
		closed  bool
		// flushed is closed and replaced after every flush round, waking
		// Sync callers.
		flushed chan struct{}
		// dirDirty is set when a segment file was created and the
		// directory needs an fsync before data in it counts as durable.
		dirDirty bool
		// truncGen changes on every Truncate so a flush round that started
		// before it does not mark re-written offsets durable.
		truncGen uint64
		// txn is the transaction index (see txn.go).
		txn txnIndex
	}

	kick chan struct{} // wakes the flusher; buffered 1
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the flusher exits
}

func (l *Log) config() *Config { return l.cfg.Load() }

// Config returns the effective configuration, defaults filled in. The
// broker passes its MaxBatchBytes to ParseBatches.
func (l *Log) Config() Config { return *l.cfg.Load() }

// UpdateConfig applies changed retention, compaction and segment settings
// (AlterConfigs). Dir, Logger and Now cannot change.
func (l *Log) UpdateConfig(cfg Config) {
	old := l.cfg.Load()
	cfg.Dir, cfg.Logger, cfg.Now = old.Dir, old.Logger, old.Now
	c := cfg.withDefaults()
	l.cfg.Store(&c)
}

// StartOffset returns the log start offset.
func (l *Log) StartOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.start
}

// EndOffset returns the next offset to be assigned.
func (l *Log) EndOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.end
}

// SyncedOffset returns the first offset not known to be durable.
func (l *Log) SyncedOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.synced
}

// Size returns the bytes of all segments.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sizeLocked()
}

func (l *Log) sizeLocked() int64 {
	var n int64
	for _, s := range l.mu.segs {
		n += s.size
	}
	return n
}

// Stats returns a snapshot of the log's counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{
		Fsyncs:       l.fsyncs.Load(),
		Segments:     len(l.mu.segs),
		Size:         l.sizeLocked(),
		StartOffset:  l.mu.start,
		EndOffset:    l.mu.end,
		SyncedOffset: l.mu.synced,
	}
}

// Append writes batches that ParseBatches returned for the same b. It
// assigns offsets from EndOffset, rewrites each batch's baseOffset and
// partitionLeaderEpoch in place in b (both outside the CRC), and writes b
// with a single pwrite to the active segment. Nothing is fsynced; callers
// that need durability call Sync. Only O(1) index bookkeeping is done per
// batch and b is never copied.
func (l *Log) Append(b []byte, batches []BatchHeader, leaderEpoch int32) (firstOffset, lastOffset int64, err error) {
	span, err := checkAppend(b, batches)
	if err != nil {
		return 0, 0, err
	}
	cfg := l.config()

	l.appendMu.Lock()
	defer l.appendMu.Unlock()

	active, first, err := l.appendTarget()
	if err != nil {
		return 0, 0, err
	}

	now := l.now()
	if active.size > 0 && (active.size+int64(len(b)) > cfg.SegmentBytes ||
		now.Sub(active.rollBase) >= time.Duration(cfg.SegmentMs)*time.Millisecond ||
		first+span-1-active.base > math.MaxUint32) {
		if active, err = l.rollLocked(active, now); err != nil {
			return 0, 0, err
		}
	}

	if err := l.markTransactional(batches); err != nil {
		return 0, 0, err
	}

	off := first
	for i, pos := 0, 0; i < len(batches); i++ {
		binary.BigEndian.PutUint64(b[pos+offBaseOffset:], uint64(off))
		binary.BigEndian.PutUint32(b[pos+offLeaderEpoch:], uint32(leaderEpoch))
		off += int64(batches[i].LastOffsetDelta) + 1
		pos += int(batches[i].Length)
	}

	writePos := active.size
	if err := l.writeActive(active, b); err != nil {
		return 0, 0, err
	}

	interval := int64(cfg.IndexIntervalBytes)
	l.mu.Lock()
	if active.size == 0 {
		active.rollBase = now
	}
	off = first
	pos := writePos
	for i := range batches {
		h := &batches[i]
		active.idx.add(active.base, off, pos, h.Length, h.MaxTimestamp, interval)
		off += int64(h.LastOffsetDelta) + 1
		pos += int64(h.Length)
	}
	active.size = pos
	active.next = off
	l.mu.end = off
	l.observeAppendLocked(b, batches, first)
	l.mu.Unlock()
	return first, off - 1, nil
}

// appendTarget returns the active segment and the end offset for an
// append, or why the log takes none. Called with appendMu held.
func (l *Log) appendTarget() (active *segment, end int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil, 0, ErrClosed
	}
	if err := l.mu.syncErr; err != nil {
		return nil, 0, fmt.Errorf("log unusable after failed fsync: %w", err)
	}
	return l.mu.segs[len(l.mu.segs)-1], l.mu.end, nil
}

// writeActive writes b at the end of the active segment. Called with
// appendMu held.
func (l *Log) writeActive(active *segment, b []byte) error {
	writePos := active.size
	if _, err := active.file.f.WriteAt(b, writePos); err != nil {
		// Drop any partial write so the file still ends on a batch
		// boundary; if even that fails the file can no longer be trusted.
		if terr := active.file.f.Truncate(writePos); terr != nil {
			l.setSyncErr(fmt.Errorf("cannot truncate segment %q after failed write: %w", active.path, terr))
		}
		return fmt.Errorf("cannot write segment %q: %w", active.path, err)
	}
	return nil
}

// checkAppend verifies that batches tile b exactly and returns how many
// offsets they cover. It is O(batches) and protects the log from a caller
// passing headers that do not belong to b.
func checkAppend(b []byte, batches []BatchHeader) (int64, error) {
	if len(batches) == 0 {
		return 0, fmt.Errorf("cannot append without batches: %w", ErrCorruptBatch)
	}
	if len(b) > math.MaxInt32 {
		return 0, fmt.Errorf("cannot append %d bytes at once: %w", len(b), ErrBatchTooLarge)
	}
	var span int64
	pos := 0
	for i := range batches {
		h := &batches[i]
		if h.Length < batchHeaderSize || h.LastOffsetDelta < 0 || pos+int(h.Length) > len(b) ||
			int32(binary.BigEndian.Uint32(b[pos+offBatchLength:])) != h.Length-batchPrefixSize {
			return 0, fmt.Errorf("batch %d does not match the appended bytes: %w", i, ErrCorruptBatch)
		}
		span += int64(h.LastOffsetDelta) + 1
		pos += int(h.Length)
	}
	if pos != len(b) {
		return 0, fmt.Errorf("batches cover %d of %d bytes: %w", pos, len(b), ErrCorruptBatch)
	}
	if span > math.MaxUint32 {
		return 0, fmt.Errorf("batches span %d offsets: %w", span, ErrBatchTooLarge)
	}
	return span, nil
}

// rollLocked closes the active segment and starts a new one at the end
// offset. It must be called with appendMu held. The old segment is not
// fsynced here: the flusher is woken to sync it and the directory, so a
// roll never stalls the append path behind a large fsync.
func (l *Log) rollLocked(old *segment, now time.Time) (*segment, error) {
	seg, err := l.rollAtLocked(old, old.next, now)
	if err == nil {
		l.logger.Debug("rolled segment", "base", old.next, "previous_bytes", old.size)
	}
	return seg, err
}

// createSegment creates a new, empty segment file. O_EXCL guards against
// ever overwriting data: no file with this base can legitimately exist.
func createSegment(path string, base int64, now time.Time) (*segment, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot create segment %q: %w", path, err)
	}
	return &segment{base: base, path: path, file: newSegFile(f), next: base, idx: newSegIndex(), rollBase: now}, nil
}

// lockExclusive takes maint and appendMu, in that order, for the
// operations that rewrite the log under both (Reset, Truncate, Close), and
// returns the func that releases them.
func (l *Log) lockExclusive() (unlock func()) {
	l.maint.Lock()
	l.appendMu.Lock()
	return func() {
		l.appendMu.Unlock()
		l.maint.Unlock()
	}
}

// Close syncs all data, persists the indexes of closed segments, stops the
// flusher and releases the log's file references. Readers still holding a
// ReadResult keep their files open until they release it.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.closed = true
	l.mu.Unlock()

	close(l.stop)
	<-l.done

	defer l.lockExclusive()()

	err := l.flushOnce()
	if err == nil {
		err = l.persistIndexesLocked()
	}

	l.mu.Lock()
	segs := l.mu.segs
	l.mu.segs = nil
	close(l.mu.flushed)
	l.mu.flushed = make(chan struct{})
	l.mu.Unlock()
	for _, s := range segs {
		s.file.release()
	}
	if err != nil {
		return fmt.Errorf("cannot close log %q: %w", l.dir, err)
	}
	return nil
}

// Remove closes the log and deletes its directory (DeleteTopics).
func (l *Log) Remove() error {
	cerr := l.Close()
	if err := fsutil.RemoveAll(l.dir); err != nil {
		return fmt.Errorf("cannot remove log directory %q: %w", l.dir, err)
	}
	if cerr != nil && !errors.Is(cerr, ErrClosed) {
		// The data is gone anyway; a failed final fsync does not matter.
		l.logger.Debug("close before remove failed", "err", cerr)
	}
	return nil
}

func (l *Log) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.closed
}
