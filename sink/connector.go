package sink

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/schema"
	"github.com/simtel/simtel/lake/store"
)

type tp struct {
	topic     string
	partition int32
}

// partState is one assigned partition: its buffer and position.
type partState struct {
	topic     string
	partition int32
	buf       *buffer
	next      int64 // offset after the last record consumed; -1 unknown
	hwm       int64 // high watermark seen in the last fetch; -1 unknown
	// redo is the intent of a flush that a previous owner started and did
	// not commit: the partition consumes exactly up to redo.LastOffset and
	// flushes that range again, whatever the size and age triggers say.
	redo *catalog.Intent
}

// sinker is the state of one Run. The poll loop and the group callbacks
// share mu (kgo's BlockRebalanceOnPoll already keeps them apart; the lock
// makes the jobs reactions and shutdown safe too).
type sinker struct {
	cfg       Config
	log       *slog.Logger
	store     store.Store
	cat       *catalog.Catalog
	ice       *iceberg.Lake // nil: no Iceberg tables
	m         *metrics
	id        string
	telemetry []string
	cl        *kgo.Client
	runs      chan runDone
	closing   atomic.Bool
	types     *fieldTypeBook // the lake's fixed field types

	mu struct {
		sync.Mutex
		parts   map[tp]*partState
		batch   icebergBatch // flushes waiting for their Iceberg commit
		pending []*runDone   // completed runs waiting for their rows
		sc      encodeScratch
	}
}

func (s *sinker) isTelemetry(topic string) bool { return slices.Contains(s.telemetry, topic) }

// sortedPartsLocked-style accessor: callers hold mu.
func (s *sinker) sortedParts() []*partState {
	out := make([]*partState, 0, len(s.mu.parts))
	for _, ps := range s.mu.parts {
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b *partState) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	return out
}

// loop polls until ctx ends or a fatal error.
func (s *sinker) loop(ctx context.Context) error {
	// Only the loop's goroutine reads it (add).
	s.types = newFieldTypeBook(ctx, s.cat, s.id, func(ctx context.Context, what, key string, op func() error) error {
		bo := backoff{log: s.log, m: s.m}
		return bo.retry(ctx, what, key, op)
	})
	tick := min(s.cfg.FlushAge/4, time.Second)
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, tick)
		fetches := s.cl.PollRecords(pctx, 20000)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		s.mu.Lock()
		err := s.handle(ctx, fetches)
		if err == nil {
			err = s.checkTriggers(ctx)
		}
		if err == nil && s.batchDue(time.Now()) {
			err = s.commitBatch(ctx)
		}
		s.mu.Unlock()
		s.cl.AllowRebalance()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// handle buffers the records of one poll, flushing partitions that reach
// their size or row limit (or the end of a redo range) on the way.
func (s *sinker) handle(ctx context.Context, fetches kgo.Fetches) error {
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
	})
	var ferr error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if ferr != nil {
			return
		}
		ps := s.mu.parts[tp{fp.Topic, fp.Partition}]
		if ps == nil {
			return // revoked after the fetch: the next owner reads them
		}
		ps.hwm = fp.HighWatermark
		for _, r := range fp.Records {
			if ps.next >= 0 && r.Offset < ps.next {
				continue // already consumed (a fetch from before a seek)
			}
			if ps.redo != nil && r.Offset > ps.redo.LastOffset {
				if ferr = s.flush(ctx, ps, "redo"); ferr != nil {
					return
				}
			}
			if ferr = s.add(ps, r); ferr != nil {
				return
			}
			switch {
			case ps.redo != nil:
				if r.Offset >= ps.redo.LastOffset {
					ferr = s.flush(ctx, ps, "redo")
				}
			case ps.buf.bytes >= s.cfg.FlushBytes:
				ferr = s.flush(ctx, ps, "size")
			case s.cfg.FlushRows > 0 && ps.buf.records >= int64(s.cfg.FlushRows):
				ferr = s.flush(ctx, ps, "rows")
			}
			if ferr != nil {
				return
			}
		}
		if ps.next >= 0 && ps.hwm >= 0 {
			s.m.lag.WithLabelValues(ps.topic, strconv.Itoa(int(ps.partition))).Set(float64(max(ps.hwm-ps.next, 0)))
		}
	})
	return ferr
}

// add buffers r. It fails only when a field type cannot be learnt from
// the catalog before ctx ends; r is then not consumed.
func (s *sinker) add(ps *partState, r *kgo.Record) error {
	rec := Record{Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
	if !ps.buf.telemetry && len(r.Headers) > 0 {
		rec.Headers = make([]schema.Header, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = schema.Header{Key: h.Key, Value: clone(h.Value)}
		}
	}
	dead := len(ps.buf.dead)
	ps.buf.types = s.types
	if err := ps.buf.add(&rec, time.Now); err != nil {
		return fmt.Errorf("sink: cannot buffer %s/%d offset %d: %w", ps.topic, ps.partition, r.Offset, err)
	}
	if len(ps.buf.dead) > dead {
		s.m.deadLetters.WithLabelValues(ps.topic).Inc()
	}
	ps.next = r.Offset + 1
	s.m.consumed.WithLabelValues(ps.topic).Inc()
	s.m.buffered.Inc()
	return nil
}

// checkTriggers flushes partitions whose oldest record is FlushAge old
// and reacts to completed runs.
func (s *sinker) checkTriggers(ctx context.Context) error {
	now := time.Now()
	for _, ps := range s.sortedParts() {
		if ps.redo == nil && !ps.buf.empty() && now.Sub(ps.buf.since) >= s.cfg.FlushAge {
			if err := s.flush(ctx, ps, "age"); err != nil {
				return err
			}
		}
	}
	for {
		select {
		case rd := <-s.runs:
			s.mu.pending = append(s.mu.pending, &rd)
			continue
		default:
		}
		break
	}
	return s.checkRuns(ctx)
}

// errNotOwner ends a flush whose partition another sink has taken over.
var errNotOwner = errors.New("partition taken over by another sink")

// flush writes everything ps buffers as one flush and commits it (see
// doc.go for the protocol). It retries store errors with backoff until
// they stop or ctx ends; then ps's buffer is kept, so a later flush (or
// the next owner) writes the same range.
func (s *sinker) flush(ctx context.Context, ps *partState, reason string) error {
	b := ps.buf
	if b.empty() && ps.redo == nil {
		return nil
	}
	if ps.redo != nil && reason != "redo" {
		// A redo flushes only once its whole range is consumed (handle
		// sees to that); a partial one would commit a range it lacks.
		return nil
	}
	start := time.Now()
	if ps.redo != nil {
		// The range in the names is the intent's, even if records at its
		// edges have since been compacted away.
		reason = "redo"
		b.first, b.last = ps.redo.FirstOffset, ps.redo.LastOffset
		if b.records == 0 {
			b.since = start
		}
	}
	objs, err := b.encode(&s.mu.sc)
	if err != nil {
		return fmt.Errorf("sink: cannot encode flush of %s/%d offsets %d-%d: %w", ps.topic, ps.partition, b.first, b.last, err)
	}
	intent := catalog.Intent{Topic: ps.topic, Partition: ps.partition, FirstOffset: b.first, LastOffset: b.last}
	entry := catalog.Entry{
		Topic: ps.topic, Partition: ps.partition, FirstOffset: b.first, LastOffset: b.last,
		Records: b.records, Written: time.Now().UTC(), Sink: s.id,
	}
	for _, o := range objs {
		entry.Objects = append(entry.Objects, o.obj)
	}
	bo := backoff{log: s.log, m: s.m}
	ikey := catalog.IntentKey(ps.topic, ps.partition)
	if err := bo.retry(ctx, "record flush intent", ikey, func() error { return s.cat.PutIntent(ctx, intent) }); err != nil {
		return err
	}
	for _, o := range objs {
		if err := bo.retry(ctx, "upload object", o.key, func() error {
			return s.store.Put(ctx, o.key, bytes.NewReader(o.data), int64(len(o.data)))
		}); err != nil {
			return err
		}
	}
	fkey := catalog.FlushKey(ps.topic, ps.partition, b.first, b.last)
	err = bo.retry(ctx, "commit flush to catalog", fkey, func() error {
		// A sink that lost the partition while this flush was retrying
		// must not commit over the new owner's range.
		cur, ok, err := s.cat.Intent(ctx, ps.topic, ps.partition)
		if err != nil {
			return err
		}
		if !ok || cur != intent {
			return errNotOwner
		}
		return s.cat.Commit(ctx, entry)
	})
	if errors.Is(err, errNotOwner) {
		// Another sink recorded its own intent for this partition while
		// this flush was retrying: it owns the range now. Committing would
		// duplicate rows; dropping the buffer leaves them to it.
		s.log.Error("partition taken over during a flush; dropping this sink's copy of the range",
			"topic", ps.topic, "partition", ps.partition, "first", b.first, "last", b.last)
		s.m.buffered.Sub(float64(b.records))
		b.reset()
		ps.redo = nil
		return nil
	}
	if err != nil {
		return err
	}
	if err := bo.retry(ctx, "clear flush intent", ikey, func() error { return s.cat.ClearIntent(ctx, ps.topic, ps.partition) }); err != nil {
		return err
	}
	if s.ice != nil {
		// The flush waits for the other partitions' flushes of the
		// interval; its Kafka offset waits for the Iceberg commit.
		s.mu.batch.add(entry, time.Now())
	} else {
		s.commitOffsets(ctx, map[tp]int64{{ps.topic, ps.partition}: b.last + 1})
	}

	s.m.flushes.WithLabelValues(reason).Inc()
	s.m.flushTime.Observe(time.Since(start).Seconds())
	s.m.lastFlush.SetToCurrentTime()
	var bytesOut int64
	for _, o := range objs {
		s.m.rowsWritten.WithLabelValues(o.obj.Kind).Add(float64(o.obj.Rows))
		s.m.objsWritten.WithLabelValues(o.obj.Kind).Inc()
		bytesOut += int64(len(o.data))
	}
	s.m.bytesWritten.Add(float64(bytesOut))
	s.m.buffered.Sub(float64(b.records))
	s.log.Info("flushed", "topic", ps.topic, "partition", ps.partition, "first", b.first, "last", b.last,
		"records", b.records, "objects", len(objs), "bytes", bytesOut, "reason", reason, "took", time.Since(start).Round(time.Millisecond))
	b.reset()
	ps.redo = nil
	return nil
}

// commitOffsets commits Kafka offsets. It only speeds up the next start:
// the catalog already moved each resume point there.
func (s *sinker) commitOffsets(ctx context.Context, offsets map[tp]int64) {
	if len(offsets) == 0 {
		return
	}
	commit := map[string]map[int32]kgo.EpochOffset{}
	for k, off := range offsets {
		if commit[k.topic] == nil {
			commit[k.topic] = map[int32]kgo.EpochOffset{}
		}
		commit[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: off}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s.cl.CommitOffsetsSync(cctx, commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			s.log.Warn("kafka offset commit failed; the catalog holds the position", "offsets", len(offsets), "err", err)
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
					s.log.Warn("kafka offset commit failed; the catalog holds the position", "topic", t.Topic, "partition", p.Partition, "offset", offsets[tp{t.Topic, p.Partition}], "err", e)
				}
			}
		}
	})
}

// icebergBatch is the flushes the catalog holds and the Iceberg tables do
// not yet: one interval's flushes of every partition the sink holds,
// committed together (commitBatch), one snapshot per table whose summary
// lists every flush it adds.
type icebergBatch struct {
	entries []catalog.Entry
	offsets map[tp]int64 // the Kafka offset of each partition once the batch is in the tables
	since   time.Time    // when the first flush joined
}

func (b *icebergBatch) add(e catalog.Entry, now time.Time) {
	if len(b.entries) == 0 {
		b.since = now
		b.offsets = map[tp]int64{}
	}
	b.entries = append(b.entries, e)
	b.offsets[tp{e.Topic, e.Partition}] = e.LastOffset + 1
}

// batchDue reports whether the batch is complete: every partition holding
// records that were buffered before the batch's first flush has flushed
// them into it, or the batch is FlushAge old (a partition whose flush is
// that far off joins the next one). Callers hold mu.
func (s *sinker) batchDue(now time.Time) bool {
	b := &s.mu.batch
	if len(b.entries) == 0 {
		return false
	}
	if now.Sub(b.since) >= s.cfg.FlushAge {
		return true
	}
	for _, ps := range s.mu.parts {
		if !ps.buf.empty() && ps.buf.since.Before(b.since) {
			return false
		}
	}
	return true
}

// commitBatch adds the batch's flushes to the Iceberg tables in one commit
// per table, then commits their Kafka offsets. It retries until the commit
// succeeds or ctx ends, holding the partitions: the broker keeps the
// records meanwhile. A sink that dies first leaves the flushes to the
// partitions' next owners' reconcile (see lake/iceberg); a commit that
// loses a race with another sink's is rebuilt on the new snapshot there.
// Callers hold mu.
func (s *sinker) commitBatch(ctx context.Context) error {
	b := &s.mu.batch
	if s.ice == nil || len(b.entries) == 0 {
		return nil
	}
	if d := s.cfg.IcebergPause; d > 0 {
		s.log.Info("iceberg commit paused", "flushes", len(b.entries), "partitions", len(b.offsets), "pause", d)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	start := time.Now()
	bo := backoff{log: s.log, m: s.m}
	err := bo.retry(ctx, "commit flushes to iceberg", fmt.Sprintf("%d flushes of %d partitions", len(b.entries), len(b.offsets)), func() error {
		return s.ice.Commit(ctx, b.entries, s.types.catalogTypes, nil)
	})
	if err != nil {
		return err
	}
	s.m.icebergCommitTime.Observe(time.Since(start).Seconds())
	s.log.Debug("iceberg commit", "flushes", len(b.entries), "partitions", len(b.offsets), "took", time.Since(start).Round(time.Millisecond))
	s.commitOffsets(ctx, b.offsets)
	*b = icebergBatch{}
	return nil
}

// reconcileIceberg adds to the Iceberg tables the flushes of newly
// assigned partitions that the catalog holds and the tables lack (a
// previous owner died between the two commits). Callers hold mu.
func (s *sinker) reconcileIceberg(ctx context.Context, parts map[string][]int32) error {
	if s.ice == nil || len(parts) == 0 {
		return nil
	}
	bo := backoff{log: s.log, m: s.m}
	var snap *catalog.Snapshot
	if err := bo.retry(ctx, "load catalog", "_catalog/", func() error {
		var err error
		snap, err = s.cat.Load(ctx)
		return err
	}); err != nil {
		return err
	}
	for _, topic := range slices.Sorted(maps.Keys(parts)) {
		if err := bo.retry(ctx, "reconcile iceberg tables", topic, func() error {
			return s.ice.Reconcile(ctx, snap, topic, parts[topic])
		}); err != nil {
			return err
		}
	}
	return nil
}

// backoff retries store operations: 100 ms doubling to 30 s.
type backoff struct {
	log   *slog.Logger
	m     *metrics
	delay time.Duration
}

func (bo *backoff) retry(ctx context.Context, what, key string, op func() error) error {
	for {
		err := op()
		if err == nil {
			if bo.delay > 0 {
				bo.log.Info("store is back; continuing", "op", what, "key", key)
				bo.delay = 0
			}
			return nil
		}
		if errors.Is(err, errNotOwner) {
			return fmt.Errorf("sink: %s %s: %w", what, key, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("sink: %s %s: %w (stopped retrying: %w)", what, key, err, ctx.Err())
		}
		bo.m.storeErrors.Inc()
		if bo.delay == 0 {
			bo.delay = 100 * time.Millisecond
		} else {
			bo.delay = min(bo.delay*2, 30*time.Second)
		}
		bo.log.Warn("store error; retrying, consuming is paused until it succeeds",
			"op", what, "key", key, "retry_in", bo.delay, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("sink: %s %s: %w (stopped retrying: %w)", what, key, err, ctx.Err())
		case <-time.After(bo.delay):
		}
	}
}

// onAssigned only makes the assign phase wait for the poll loop (see
// kgo.BlockRebalanceOnPoll); adjustOffsets does the work.
func (s *sinker) onAssigned(context.Context, *kgo.Client, map[string][]int32) {}

// adjustOffsets decides where each newly assigned partition resumes:
// after the later of the Kafka commit and the catalog's last flush, and
// whether a previous owner's flush must be redone.
func (s *sinker) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, parts := range offsets {
		for p, off := range parts {
			committed := off.EpochOffset().Offset // < 0: no commit
			var last catalog.Entry
			var hasLast, hasIntent bool
			var in catalog.Intent
			bo := backoff{log: s.log, m: s.m}
			err := bo.retry(ctx, "read catalog", catalog.IntentKey(topic, p), func() error {
				var err error
				if last, hasLast, err = s.cat.Last(ctx, topic, p); err != nil {
					return err
				}
				in, hasIntent, err = s.cat.Intent(ctx, topic, p)
				return err
			})
			if err != nil {
				return nil, err
			}
			resume := committed
			if hasLast && last.LastOffset+1 > resume {
				resume = last.LastOffset + 1
			}
			ps := &partState{topic: topic, partition: p, buf: newBuffer(topic, p, s.isTelemetry(topic)), next: -1, hwm: -1}
			if hasIntent {
				switch {
				case resume < 0 || in.FirstOffset == resume:
					resume = in.FirstOffset
					ps.redo = &in
					s.log.Info("redoing an unfinished flush", "topic", topic, "partition", p, "first", in.FirstOffset, "last", in.LastOffset)
				default:
					s.log.Info("clearing a stale flush intent", "topic", topic, "partition", p, "first", in.FirstOffset, "last", in.LastOffset, "resume", resume)
					if err := bo.retry(ctx, "clear stale intent", catalog.IntentKey(topic, p), func() error { return s.cat.ClearIntent(ctx, topic, p) }); err != nil {
						return nil, err
					}
				}
			}
			if resume >= 0 {
				parts[p] = kgo.NewOffset().At(resume).WithEpoch(-1)
				ps.next = resume
			}
			s.mu.parts[tp{topic, p}] = ps
			s.log.Info("partition assigned", "topic", topic, "partition", p, "resume", resume, "kafka_commit", committed)
		}
	}
	assigned := map[string][]int32{}
	for topic, parts := range offsets {
		for p := range parts {
			assigned[topic] = append(assigned[topic], p)
		}
	}
	if err := s.reconcileIceberg(ctx, assigned); err != nil {
		return nil, err
	}
	return offsets, nil
}

// onRevoked flushes and commits revoked partitions before they move.
func (s *sinker) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	var gone []*partState
	for topic, parts := range revoked {
		for _, p := range parts {
			ps := s.mu.parts[tp{topic, p}]
			if ps == nil {
				continue
			}
			gone = append(gone, ps)
			if s.closing.Load() {
				// Leaving the group at shutdown: Run already tried the
				// final flush; what it could not write is left to the
				// next owner.
				continue
			}
			if err := s.flush(fctx, ps, "revoke"); err != nil {
				s.log.Warn("flush on revoke not done; the next owner reads the records again", "topic", topic, "partition", p, "err", err)
			}
		}
	}
	if !s.closing.Load() {
		if err := s.commitBatch(fctx); err != nil {
			s.log.Warn("iceberg commit on revoke not done; the next owners reconcile the flushes", "err", err)
		}
	}
	for _, ps := range gone {
		s.drop(ps)
	}
}

// onLost forgets partitions the group took away without a revoke.
func (s *sinker) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, parts := range lost {
		for _, p := range parts {
			if ps := s.mu.parts[tp{topic, p}]; ps != nil {
				s.log.Warn("partition lost; its buffered records are left to the next owner", "topic", topic, "partition", p, "records", ps.buf.records)
				s.drop(ps)
			}
		}
	}
}

func (s *sinker) drop(ps *partState) {
	s.m.buffered.Sub(float64(ps.buf.records))
	s.m.lag.DeleteLabelValues(ps.topic, strconv.Itoa(int(ps.partition)))
	delete(s.mu.parts, tp{ps.topic, ps.partition})
	// The partition's next owner commits its offsets; its flushes still
	// waiting for Iceberg stay in the batch (the commit skips what the
	// next owner's reconcile has added by then).
	delete(s.mu.batch.offsets, tp{ps.topic, ps.partition})
}
