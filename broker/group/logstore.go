package group

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/storage"
)

// LogStore is a Store kept as Kafka records in a partition log: the log of
// partition 0 of the internal, compacted topic __consumer_offsets, as in
// Kafka. See codec.go for the record format.
//
// Every Store call becomes one record batch, appended with Log.Append and
// made durable with Log.Sync before the call returns. Keys are chosen so
// that compaction keeps exactly the live state: one key per (group, topic,
// partition) for offsets and one per group for its metadata; deletions
// are tombstones. Because the group state is nothing but records of a
// partition, replicating the partition replicates it.
//
// The store keeps in memory only which keys are live (per group: whether
// its metadata record is, and which offset keys are), to know what
// DeleteGroup must tombstone. Load re-reads the log.
//
// Concurrency: LogStore.mu serializes the step that turns a call into a
// batch and appends it (so the key index follows the log order), but it
// is released before Log.Sync, so concurrent callers share fsyncs through
// the log's group commit.
//
// Invariant that keeps compaction exact: every group with a live offset
// key also has a live metadata key (Commit writes an empty metadata record
// for a group that has none), and DeleteGroup tombstones both. Whether a
// group exists therefore never depends on records that compaction may have
// removed.
type LogStore struct {
	log       *storage.Log
	logger    *slog.Logger
	afterSync func(lastOffset int64)
	// propose, when set (OpenReplicatedLogStore), replaces the append and
	// sync: batches go through the partition's raft group, whose state
	// machine appends them to log on every replica.
	propose Propose
	// failed is set when a proposal failed: whether it reached the log
	// is unknown, so the key index can no longer be trusted and every
	// later write fails (the broker replaces the store). Atomic, so that
	// Failed never waits behind a write.
	failed atomic.Bool

	// inflight counts calls past the closed check; Close waits for them
	// so that nothing appends to the log once Close has returned.
	inflight sync.WaitGroup

	mu struct {
		sync.Mutex
		closed bool
		keys   keyIndex
		// fresh is the state replayed by OpenLogStore, handed to the
		// first Load if the log did not change in between.
		fresh                *storeState
		freshStart, freshEnd int64
	}
}

var _ Store = (*LogStore)(nil)

// keyIndex is the set of live keys of the log, per group.
type keyIndex map[string]*liveKeys

type liveKeys struct {
	meta    bool
	offsets map[TopicPartition]struct{}
}

func (ix keyIndex) group(name string) *liveKeys {
	g := ix[name]
	if g == nil {
		g = &liveKeys{offsets: make(map[TopicPartition]struct{})}
		ix[name] = g
	}
	return g
}

// OpenLogStore opens the group store kept in l, which must be the log of
// partition 0 of __consumer_offsets, and reads it once to learn its live
// keys. Records it cannot decode are skipped with a warning.
//
// afterSync, if not nil, is called with the last offset of a batch once
// it is durable, so the broker can advance the partition's high
// watermark.
//
// The store does not own l: Close does not close it, and the caller (the
// broker) must keep it open until Close has returned and close it
// afterwards.
func OpenLogStore(l *storage.Log, logger *slog.Logger, afterSync func(lastOffset int64)) (*LogStore, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &LogStore{log: l, logger: logger, afterSync: afterSync}
	st, keys, stats, err := s.replay()
	if err != nil {
		return nil, fmt.Errorf("cannot read group store log: %w", err)
	}
	s.mu.keys = keys
	s.mu.fresh, s.mu.freshStart, s.mu.freshEnd = st, stats.start, stats.end
	nOffsets := 0
	for _, g := range st.groups {
		nOffsets += len(g.offsets)
	}
	logger.Info("group store opened", "start_offset", stats.start, "end_offset", stats.end,
		"batches", stats.batches, "records", stats.records, "skipped", stats.skipped,
		"groups", len(st.groups), "offsets", nOffsets)
	return s, nil
}

// Propose hands one encoded record batch to a replicated log and returns
// a function that waits until the batch is committed (on a majority of
// the replicas) and appended to the local log. Propose is called under
// the store's lock, so batches are proposed in the order the store
// decided them; it must not block for long (enqueue, do not wait). The
// wait function runs without the lock.
type Propose func(batch []byte) (wait func() error)

// ErrStoreFailed is returned by a replicated LogStore after a proposal
// failed (typically: the raft leadership moved). The store must be
// replaced by one opened on the new leader.
var ErrStoreFailed = errors.New("group store failed: a replicated write did not complete; the coordinator must be reloaded")

// OpenReplicatedLogStore opens a group store kept in l, a replica of a
// partition of __consumer_offsets whose records are written by the
// partition's raft state machine: l must hold every committed entry when
// this is called (the caller is the raft leader and has applied its
// log), and writes go through propose instead of l.Append. The store
// does not own l.
func OpenReplicatedLogStore(l *storage.Log, logger *slog.Logger, propose Propose) (*LogStore, error) {
	if propose == nil {
		return nil, errors.New("replicated group store: propose is required")
	}
	s, err := OpenLogStore(l, logger, nil)
	if err != nil {
		return nil, err
	}
	s.propose = propose
	return s, nil
}

// Failed reports whether a replicated write failed; such a store refuses
// every later write with ErrStoreFailed.
func (s *LogStore) Failed() bool { return s.failed.Load() }

// Commit implements Store. It returns once the offsets are durable.
func (s *LogStore) Commit(group string, offsets []CommittedOffset) error {
	if err := checkKeyString("group id", group); err != nil {
		return err
	}
	// Encode outside the lock: it is the only per-offset work.
	recs := make([]kv, 1, len(offsets)+1)
	tps := make([]TopicPartition, len(offsets))
	for i := range offsets {
		o := &offsets[i]
		if err := checkKeyString("topic name", o.Topic); err != nil {
			return err
		}
		if err := checkKeyString("offset metadata", o.Metadata); err != nil {
			return err
		}
		tps[i] = TopicPartition{o.Topic, o.Partition}
		recs = append(recs, kv{Key: encodeOffsetKey(group, tps[i]), Value: encodeOffsetValue(o)})
	}
	return s.write(func(ix keyIndex, nowMillis int64) ([]kv, func()) {
		out := recs[1:]
		if g := ix[group]; g == nil || !g.meta {
			// Recording an offset creates the group; its metadata
			// record makes that survive compaction (see LogStore).
			recs[0] = kv{Key: encodeGroupKey(group), Value: encodeGroupValue(&GroupMeta{Group: group}, nowMillis)}
			out = recs
		}
		return out, func() {
			g := ix.group(group)
			g.meta = true
			for _, tp := range tps {
				g.offsets[tp] = struct{}{}
			}
		}
	})
}

// DeleteOffsets implements Store. It returns once the deletion is
// durable. Offsets the store does not hold need no record.
func (s *LogStore) DeleteOffsets(group string, tps []TopicPartition) error {
	return s.write(func(ix keyIndex, _ int64) ([]kv, func()) {
		g := ix[group]
		if g == nil {
			return nil, nil
		}
		var recs []kv
		var del []TopicPartition
		for _, tp := range tps {
			if _, ok := g.offsets[tp]; ok && !slices.Contains(del, tp) {
				del = append(del, tp)
				recs = append(recs, kv{Key: encodeOffsetKey(group, tp)})
			}
		}
		return recs, func() {
			for _, tp := range del {
				delete(g.offsets, tp)
			}
		}
	})
}

// DeleteGroup implements Store: one batch of tombstones for the group's
// metadata and every offset it holds. It returns once they are durable.
func (s *LogStore) DeleteGroup(group string) error {
	return s.write(func(ix keyIndex, _ int64) ([]kv, func()) {
		g := ix[group]
		if g == nil {
			return nil, nil
		}
		recs := []kv{{Key: encodeGroupKey(group)}}
		tps := slices.SortedFunc(maps.Keys(g.offsets), func(a, b TopicPartition) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		for _, tp := range tps {
			recs = append(recs, kv{Key: encodeOffsetKey(group, tp)})
		}
		return recs, func() { delete(ix, group) }
	})
}

// SaveGroup implements Store. The interface does not require it, but it
// returns only once the metadata is durable: the sync is shared with
// concurrent calls, and only synced records let the high watermark of
// __consumer_offsets move past them.
func (s *LogStore) SaveGroup(meta GroupMeta) error {
	if err := checkKeyString("group id", meta.Group); err != nil {
		return err
	}
	return s.write(func(ix keyIndex, nowMillis int64) ([]kv, func()) {
		recs := []kv{{Key: encodeGroupKey(meta.Group), Value: encodeGroupValue(&meta, nowMillis)}}
		return recs, func() { ix.group(meta.Group).meta = true }
	})
}

// write turns one Store call into a batch and makes it durable. plan runs
// under mu with the key index: it returns the records to write (none: the
// call changes nothing) and a function applying them to the index, which
// runs under mu once the batch is appended. The sync happens without mu.
func (s *LogStore) write(plan func(ix keyIndex, nowMillis int64) ([]kv, func())) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrStoreClosed
	}
	if s.failed.Load() {
		s.mu.Unlock()
		return ErrStoreFailed
	}
	s.inflight.Add(1)
	defer s.inflight.Done()
	now := time.Now().UnixMilli()
	recs, apply := plan(s.mu.keys, now)
	if len(recs) == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.propose != nil {
		return s.replicateLocked(recs, apply, now)
	}
	last, err := s.appendLocked(recs, now)
	if err == nil {
		apply()
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.log.Sync(context.Background(), last); err != nil {
		return fmt.Errorf("cannot sync group store record: %w", err)
	}
	if s.afterSync != nil {
		s.afterSync(last)
	}
	return nil
}

// replicateLocked proposes recs as one batch and, once it is queued,
// applies it to the key index and releases mu; it then waits for the
// commit. The index is updated before the outcome is known so that the
// next call, planned right after under mu, sees the keys of every batch
// queued before its own (raft keeps the proposal order). If the proposal
// fails the store is marked failed: the batch may or may not be in the
// log, so the index is no longer known to match it.
func (s *LogStore) replicateLocked(recs []kv, apply func(), nowMillis int64) error {
	b := storage.AppendBatch(nil, recs, nowMillis)
	wait := s.propose(b)
	apply()
	s.mu.fresh = nil
	s.mu.Unlock()
	if err := wait(); err != nil {
		s.failed.Store(true)
		return fmt.Errorf("cannot replicate group store record: %w", err)
	}
	return nil
}

// appendLocked encodes recs as one batch, validates it as a produced batch
// would be and appends it, returning the batch's last offset.
func (s *LogStore) appendLocked(recs []kv, nowMillis int64) (int64, error) {
	b := storage.AppendBatch(nil, recs, nowMillis)
	hdrs, err := storage.ParseBatches(b, 0)
	if err != nil {
		return 0, fmt.Errorf("cannot encode group store record: %w", err)
	}
	_, last, err := s.log.Append(b, hdrs, 0)
	if err != nil {
		return 0, fmt.Errorf("cannot append group store record: %w", err)
	}
	// The state this store had read is no longer the log's.
	s.mu.fresh = nil
	return last, nil
}

// recoverWait bounds how long Recover waits for writes in flight.
const recoverWait = 5 * time.Second

// Recover makes a failed replicated store usable again. The caller must
// know that the log now holds exactly the committed writes, including
// every write this store proposed that may have been committed: the
// proposals failed because this broker lost the raft leadership of the
// partition, and it has become leader again with nobody else having led
// in between and its barrier applied (raft then commits this leader's own
// uncommitted entries; those it never appended are not in the log). The
// key index is rebuilt from the log. It returns the state the log holds.
func (s *LogStore) Recover() (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return State{}, ErrStoreClosed
	}
	// Calls past the lock wait for their proposals, which raft ended
	// when the leadership was lost; new ones wait for mu. Bounded, so
	// that a proposal raft never answered cannot stall the caller (the
	// broker then reloads the coordinator instead).
	done := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(recoverWait):
		return State{}, fmt.Errorf("group store writes still in flight after %v", recoverWait)
	}
	st, keys, _, err := s.replay()
	if err != nil {
		return State{}, fmt.Errorf("cannot read group store log: %w", err)
	}
	s.mu.keys = keys
	s.mu.fresh = nil
	s.failed.Store(false)
	return st.snapshot(), nil
}

// Load implements Store: it reads the whole log and applies its records
// in order (last write wins, tombstones delete).
func (s *LogStore) Load() (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return State{}, ErrStoreClosed
	}
	if st := s.mu.fresh; st != nil {
		s.mu.fresh = nil
		if s.log.StartOffset() == s.mu.freshStart && s.log.EndOffset() == s.mu.freshEnd {
			return st.snapshot(), nil
		}
	}
	// Holding mu keeps appends out, so the index rebuilt here is the
	// log's.
	st, keys, _, err := s.replay()
	if err != nil {
		return State{}, fmt.Errorf("cannot read group store log: %w", err)
	}
	s.mu.keys = keys
	return st.snapshot(), nil
}

// Close implements Store. It waits for calls in progress and makes later
// ones fail with ErrStoreClosed. It does not close the log, which belongs
// to the caller of OpenLogStore.
func (s *LogStore) Close() error {
	s.mu.Lock()
	s.mu.closed = true
	s.mu.fresh = nil
	s.mu.Unlock()
	s.inflight.Wait()
	return nil
}

// readChunkBytes is how much of the log replay asks Log.Read for at once
// (a larger batch comes whole anyway).
const readChunkBytes = 4 << 20

// maxSkipWarnings bounds the warnings of one replay; the rest are counted.
const maxSkipWarnings = 20

type replayStats struct {
	start, end                int64
	batches, records, skipped int
}

// replay reads the log from its start to its end offset and returns the
// state its records build and their live keys.
func (s *LogStore) replay() (*storeState, keyIndex, replayStats, error) {
	r := replayer{logger: s.logger, state: newStoreState(), keys: keyIndex{}}
	r.stats.start, r.stats.end = s.log.StartOffset(), s.log.EndOffset()
	var buf []byte
	for off := r.stats.start; off < r.stats.end; {
		res, err := s.log.Read(off, readChunkBytes, r.stats.end)
		if err != nil {
			return nil, nil, r.stats, err
		}
		for _, c := range res.Chunks {
			if int64(cap(buf)) < c.Size {
				buf = make([]byte, c.Size)
			}
			data := buf[:c.Size]
			if _, err := c.File.ReadAt(data, c.Pos); err != nil {
				res.Release()
				return nil, nil, r.stats, fmt.Errorf("cannot read log at position %d: %w", c.Pos, err)
			}
			r.batches(data)
		}
		res.Release()
		if len(res.Chunks) == 0 || res.LastOffset < off {
			break
		}
		off = res.LastOffset + 1
	}
	if r.stats.skipped > maxSkipWarnings {
		s.logger.Warn("skipped undecodable group store records", "count", r.stats.skipped)
	}
	return r.state, r.keys, r.stats, nil
}

// replayer applies batches of the log, in order, to a state and a key
// index. It never panics, whatever the bytes.
type replayer struct {
	logger  *slog.Logger
	state   *storeState
	keys    keyIndex
	stats   replayStats
	scratch []byte
}

func (r *replayer) skip(msg string, args ...any) {
	r.stats.skipped++
	if r.stats.skipped <= maxSkipWarnings {
		r.logger.Warn(msg, args...)
	}
}

// batches applies the whole batches at the start of data.
func (r *replayer) batches(data []byte) {
	for len(data) > 0 {
		var b kmsg.RecordBatch
		if len(data) < batchHeaderLen || b.ReadFrom(data) != nil ||
			b.Length < batchHeaderLen-batchPrefixLen || int64(b.Length) > int64(len(data)-batchPrefixLen) {
			// Without a trustworthy length the next batch cannot be
			// found; the rest of this chunk is lost.
			r.skip("skipping undecodable group store data", "offset", b.FirstOffset, "bytes", len(data))
			return
		}
		raw := data[:batchPrefixLen+int(b.Length)]
		data = data[len(raw):]
		r.stats.batches++
		switch {
		case b.Magic != 2:
			r.skip("skipping group store batch", "offset", b.FirstOffset, "reason", fmt.Sprintf("magic %d", b.Magic))
		case crc32.Checksum(raw[batchCRCStart:], crcTable) != uint32(b.CRC):
			r.skip("skipping group store batch", "offset", b.FirstOffset, "reason", "crc mismatch")
		case b.Attributes&0x07 != 0:
			r.skip("skipping group store batch", "offset", b.FirstOffset, "reason", fmt.Sprintf("compressed (codec %d)", b.Attributes&0x07))
		case b.Attributes&0x30 != 0:
			r.skip("skipping group store batch", "offset", b.FirstOffset, "reason", "transactional or control batch")
		default:
			r.records(b.FirstOffset, b.Records)
		}
	}
}

// records applies the uncompressed records of one batch.
func (r *replayer) records(base int64, recs []byte) {
	for len(recs) > 0 {
		n, k := binary.Varint(recs)
		if k <= 0 || n < 0 || n > int64(len(recs)-k) {
			r.skip("skipping rest of group store batch", "offset", base, "reason", "malformed record length")
			return
		}
		raw := recs[:k+int(n)]
		recs = recs[len(raw):]
		var rec kmsg.Record
		if err := rec.ReadFrom(raw); err != nil {
			r.skip("skipping group store record", "batch_offset", base, "reason", err)
			continue
		}
		r.scratch = rec.AppendTo(r.scratch[:0])
		if string(r.scratch) != string(raw) {
			r.skip("skipping group store record", "offset", base+int64(rec.OffsetDelta), "reason", "record not in canonical encoding")
			continue
		}
		r.apply(base+int64(rec.OffsetDelta), rec.Key, rec.Value)
	}
}

// apply applies one record. A record whose key decodes but whose value
// does not still counts as a live key, so that deleting its group or
// offset tombstones it.
func (r *replayer) apply(offset int64, key, value []byte) {
	rec, err := decodeLogRecord(key, value)
	if err != nil {
		if value != nil {
			if kr, kerr := decodeLogRecord(key, nil); kerr == nil {
				r.markLive(&kr, true)
			}
		}
		r.skip("skipping group store record", "offset", offset, "reason", err)
		return
	}
	r.stats.records++
	r.markLive(&rec, value != nil)
	r.state.apply(&rec)
}

// markLive updates the key index for the key of rec (decoded as a
// tombstone or not): live tells whether the key now holds a value.
func (r *replayer) markLive(rec *record, live bool) {
	switch rec.kind {
	case recCommit, recDeleteOffsets:
		tp := TopicPartition{}
		if len(rec.offsets) > 0 {
			tp = TopicPartition{rec.offsets[0].Topic, rec.offsets[0].Partition}
		} else if len(rec.tps) > 0 {
			tp = rec.tps[0]
		}
		if live {
			r.keys.group(rec.group).offsets[tp] = struct{}{}
		} else if g := r.keys[rec.group]; g != nil {
			delete(g.offsets, tp)
			r.dropIfEmpty(rec.group, g)
		}
	case recSaveGroup, recDeleteGroup:
		if live {
			r.keys.group(rec.group).meta = true
		} else if g := r.keys[rec.group]; g != nil {
			g.meta = false
			r.dropIfEmpty(rec.group, g)
		}
	}
}

func (r *replayer) dropIfEmpty(name string, g *liveKeys) {
	if !g.meta && len(g.offsets) == 0 {
		delete(r.keys, name)
	}
}
