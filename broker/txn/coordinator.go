package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/storage"
	"github.com/simtel/simtel/internal/tick"
)

// stateTopicConfigs are the overrides StateTopic is created with.
var stateTopicConfigs = map[string]string{"cleanup.policy": "compact", "segment.bytes": "104857600"}

const (
	// maxTxnTimeout is transaction.max.timeout.ms: producers asking for
	// a longer transaction timeout get INVALID_TRANSACTION_TIMEOUT.
	maxTxnTimeout = 15 * time.Minute
	// txnCheckInterval is how often the coordinator looks for timed-out
	// transactions and retries unfinished completions.
	txnCheckInterval = time.Second
	// OpTimeout bounds the fsyncs of one coordinator operation (and the
	// marker writes a coordinator asks of another broker).
	OpTimeout = 30 * time.Second
	// txnIDExpiration is the default of Config.TxnIDExpiration
	// (transactional.id.expiration.ms): an id with no open transaction
	// and no change for this long is forgotten (its state record
	// tombstoned), so abandoned ids do not pile up.
	txnIDExpiration = 7 * 24 * time.Hour
)

type txnEntry struct {
	id string
	mu sync.Mutex
	// meta is guarded by mu. ProducerID < 0 marks an entry created by
	// a first InitProducerID whose state is not written yet.
	meta txnMeta
	// refusedLogged is when a refused completion of the decided
	// transaction was last logged (guarded by mu; zero: none since the
	// last completion), so the retry every txnCheckInterval logs it
	// once in refusedLogInterval.
	refusedLogged time.Time
}

type pendingKey struct {
	group, topic string
	partition    int32
}

// coordinator is the transaction coordinator of one partition of
// StateTopic: on a single node the only one (partition 0, created on
// first use), in a cluster one per state partition this broker leads.
type coordinator struct {
	s   *Coordinators
	log *slog.Logger
	now func() time.Time

	stateMu sync.Mutex     // creating the state partition
	state   StatePartition // guarded by stateMu; nil until first needed

	// clustered: a cluster-mode coordinator of one replicated state
	// partition (cluster.go), led by this broker in raft term term.
	clustered bool
	term      uint64

	mu struct {
		sync.Mutex
		txns map[string]*txnEntry
	}

	// pending maps a group partition to the transactional ids holding
	// an offset for it that awaits the end of their transaction; while
	// one does, OffsetFetch with RequireStable answers
	// UNSTABLE_OFFSET_COMMIT so a new member does not start from the
	// older offset.
	pendingMu sync.Mutex
	pending   map[pendingKey]map[string]struct{}

	*metrics
}

// load replays __transaction_state and finishes the transactions that
// were being completed when the broker stopped.
func (c *coordinator) load() error {
	n := 0
	err := readLogRecords(c.state.Log(), func(off int64, key, value []byte) {
		id := string(key)
		if value == nil {
			delete(c.mu.txns, id)
			return
		}
		m, err := decodeTxnMeta(value)
		if err != nil {
			c.log.Warn("skipping unreadable transaction state record", "offset", off, "transactional_id", id, "err", err)
			return
		}
		e := c.mu.txns[id]
		if e == nil {
			e = &txnEntry{id: id}
			c.mu.txns[id] = e
		}
		e.meta = m
		n++
	})
	if err != nil {
		return fmt.Errorf("cannot load transaction state from %s: %w", StateTopic, err)
	}
	for _, e := range c.mu.txns {
		c.setPending(e.id, nil, e.meta.Offsets)
	}
	c.log.Info("loaded transaction state", "records", n, "transactional_ids", len(c.mu.txns))
	if c.clustered {
		// Markers may need other brokers: the check loop completes
		// them, without holding up the caller.
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	defer cancel()
	for _, e := range c.mu.txns {
		e.mu.Lock()
		if s := e.meta.Status; s == txnPrepareCommit || s == txnPrepareAbort {
			c.log.Info("completing a transaction decided before the restart", "transactional_id", e.id, "state", s.String())
			_ = c.completeLocked(ctx, e) // logged; the loop retries it
		}
		e.mu.Unlock()
	}
	return nil
}

// run aborts timed-out transactions and retries unfinished completions
// until ctx ends.
func (c *coordinator) run(ctx context.Context) {
	tick.Every(ctx, txnCheckInterval, func() {
		for _, e := range c.entries() {
			e.mu.Lock()
			c.checkLocked(ctx, e)
			e.mu.Unlock()
		}
	})
}

func (c *coordinator) checkLocked(ctx context.Context, e *txnEntry) {
	m := &e.meta
	switch {
	case m.ProducerID < 0:
	case m.Status == txnPrepareCommit || m.Status == txnPrepareAbort:
		_ = c.completeLocked(ctx, e) // logged; retried on the next tick
	case m.Status != txnOngoing && c.s.idExpiration() > 0 && c.now().UnixMilli()-m.UpdateMs > c.s.idExpiration().Milliseconds():
		if err := c.expireLocked(ctx, e); err != nil && ctx.Err() == nil {
			c.log.Warn("cannot expire transactional id, will retry", "transactional_id", e.id, "err", err)
		}
	case m.Status == txnOngoing && c.now().UnixMilli()-m.StartMs > int64(m.TimeoutMs):
		c.log.Info("aborting a transaction past its timeout", "transactional_id", e.id, "producer_id", m.ProducerID, "epoch", m.Epoch, "timeout_ms", m.TimeoutMs)
		if err := c.abortLocked(ctx, e, true); err != nil {
			if ctx.Err() == nil {
				c.log.Warn("cannot abort timed-out transaction yet, will retry", "transactional_id", e.id, "err", err)
			}
			return
		}
		c.ended.WithLabelValues("timeout").Inc()
	}
}

func (c *coordinator) entries() []*txnEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Values(c.mu.txns))
}

// lockEntry returns the entry of a transactional id locked, with ctx
// bounded by OpTimeout for what is done under the lock; unlock releases
// both. A nil coordinator (this broker does not run the id's) is
// COORDINATOR_NOT_AVAILABLE, an unknown id INVALID_PRODUCER_ID_MAPPING.
func (c *coordinator) lockEntry(ctx context.Context, id string) (context.Context, *txnEntry, func(), int16) {
	if c == nil {
		return ctx, nil, nil, kerr.CoordinatorNotAvailable.Code
	}
	e := c.lookup(id)
	if e == nil {
		return ctx, nil, nil, kerr.InvalidProducerIDMapping.Code
	}
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	e.mu.Lock()
	return ctx, e, func() {
		e.mu.Unlock()
		cancel()
	}, 0
}

// lockGroupEntry is lockEntry for the APIs that name a consumer group
// (AddOffsetsToTxn, TxnOffsetCommit): an empty group is INVALID_GROUP_ID,
// checked before the transactional id.
func (c *coordinator) lockGroupEntry(ctx context.Context, id, group string) (context.Context, *txnEntry, func(), int16) {
	if c != nil && group == "" {
		return ctx, nil, nil, kerr.InvalidGroupID.Code
	}
	return c.lockEntry(ctx, id)
}

// ongoingLocked checks the producer id and epoch and finishes a pending
// completion, then returns the next state of e's transaction: the ongoing
// one, or a new one starting now. The caller persists it if it changes.
func (c *coordinator) ongoingLocked(ctx context.Context, e *txnEntry, pid int64, epoch, version int16) (txnMeta, int16) {
	if err := checkProducerLocked(e, pid, epoch, version, 2); err != nil {
		return txnMeta{}, err.Code
	}
	if err := c.finishPendingLocked(ctx, e); err != nil {
		return txnMeta{}, err.Code
	}
	next := e.meta.clone()
	if next.Status != txnOngoing {
		next.Status = txnOngoing
		next.StartMs = c.now().UnixMilli()
		next.Partitions, next.Groups, next.Offsets = nil, nil, nil
	}
	return next, 0
}

// newCodes is an error code (0) per partition of a request's topics.
func newCodes[T any](topics []T, partitions func(T) int) [][]int16 {
	codes := make([][]int16, len(topics))
	for i, t := range topics {
		codes[i] = make([]int16, partitions(t))
	}
	return codes
}

// setCodes sets every partition's code to code.
func setCodes(codes [][]int16, code int16) {
	for _, tc := range codes {
		for j := range tc {
			tc[j] = code
		}
	}
}

func (c *coordinator) lookup(id string) *txnEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.txns[id]
}

// count is how many transactions here are in one of the states.
func (c *coordinator) count(states ...txnStatus) float64 {
	n := 0
	for _, e := range c.entries() {
		e.mu.Lock()
		if slices.Contains(states, e.meta.Status) {
			n++
		}
		e.mu.Unlock()
	}
	return float64(n)
}

// statePartition returns the partition of StateTopic, creating the
// topic on first use.
func (c *coordinator) statePartition() (StatePartition, error) {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.state != nil {
		return c.state, nil
	}
	if p := c.s.b.StatePartition(0); p != nil {
		c.state = p
		return c.state, nil
	}
	if err := c.s.b.CreateTopic(context.Background(), StateTopic, 1, stateTopicConfigs); err != nil {
		return nil, fmt.Errorf("cannot create %s: %w", StateTopic, err)
	}
	if c.state = c.s.b.StatePartition(0); c.state == nil {
		return nil, fmt.Errorf("cannot create %s: created, but its partition is not here", StateTopic)
	}
	return c.state, nil
}

// expireLocked forgets an idle transactional id: a tombstone in the state
// log, then the entry leaves the map. A request that found the entry
// before sees a producer id of -1 (INVALID_PRODUCER_ID_MAPPING, or a new
// producer id for InitProducerID, which puts the entry back).
func (c *coordinator) expireLocked(ctx context.Context, e *txnEntry) error {
	p, err := c.statePartition()
	if err != nil {
		return err
	}
	if err := c.appendState(ctx, p, []byte(e.id), nil, c.now().UnixMilli()); err != nil {
		return fmt.Errorf("cannot expire transactional id %q: %w", e.id, err)
	}
	c.log.Info("transactional id expired", "transactional_id", e.id, "producer_id", e.meta.ProducerID)
	c.setPending(e.id, e.meta.Offsets, nil)
	e.meta = txnMeta{ProducerID: -1}
	c.mu.Lock()
	if c.mu.txns[e.id] == e {
		delete(c.mu.txns, e.id)
	}
	c.mu.Unlock()
	return nil
}

// appendStateRecord appends one record (value nil: a tombstone) to the
// state partition and waits until it is durable.
func appendStateRecord(ctx context.Context, p StatePartition, key, value []byte, nowMillis int64) error {
	batch := storage.AppendBatch(nil, []storage.BatchRecord{{Key: key, Value: value}}, nowMillis)
	hdrs, err := storage.ParseBatches(batch, 0)
	if err != nil {
		return fmt.Errorf("cannot encode state record: %w", err)
	}
	_, last, err := p.Log().Append(batch, hdrs, 0)
	if err != nil {
		return err
	}
	return p.Commit(ctx, last)
}

// appendState writes one state record: through the state partition's
// raft group in cluster mode (refused once this coordinator's term is
// over), else appended and fsynced locally (also a cluster of one broker,
// whose internal topics have a single replica).
func (c *coordinator) appendState(ctx context.Context, p StatePartition, key, value []byte, nowMillis int64) error {
	if !c.clustered || !p.Replicated() {
		return appendStateRecord(ctx, p, key, value, nowMillis)
	}
	return p.Propose(c.term, storage.AppendBatch(nil, []storage.BatchRecord{{Key: key, Value: value}}, nowMillis))()
}

// persistLocked makes next the durable state of e, then adopts it.
func (c *coordinator) persistLocked(ctx context.Context, e *txnEntry, next txnMeta) error {
	p, err := c.statePartition()
	if err != nil {
		return err
	}
	next.UpdateMs = c.now().UnixMilli()
	if err := c.appendState(ctx, p, []byte(e.id), encodeTxnMeta(&next), next.UpdateMs); err != nil {
		return fmt.Errorf("cannot write transaction state of %q: %w", e.id, err)
	}
	c.setPending(e.id, e.meta.Offsets, next.Offsets)
	e.meta = next
	return nil
}

func (c *coordinator) setPending(id string, old, cur []txnOffset) {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	for _, o := range old {
		k := pendingKey{o.Group, o.Topic, o.Partition}
		delete(c.pending[k], id)
		if len(c.pending[k]) == 0 {
			delete(c.pending, k)
		}
	}
	for _, o := range cur {
		k := pendingKey{o.Group, o.Topic, o.Partition}
		if c.pending[k] == nil {
			c.pending[k] = map[string]struct{}{}
		}
		c.pending[k][id] = struct{}{}
	}
}

// pendingOffset reports whether a transaction holds an uncommitted offset
// for the group partition (the group coordinator's RequireStable check).
func (c *coordinator) pendingOffset(grp, topic string, partition int32) bool {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	return len(c.pending[pendingKey{grp, topic, partition}]) > 0
}

// coordEpoch is the epoch this coordinator writes into its markers: the
// raft term of its state partition in a cluster (a later coordinator of
// the same transactional ids has a higher one), 0 on a single node.
func (c *coordinator) coordEpoch() int32 {
	return int32(min(c.term, math.MaxInt32))
}

// pendingOf lists the group partitions for which a transaction here holds
// offsets of grp.
func (c *coordinator) pendingOf(grp string) []pendingKey {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	var out []pendingKey
	for k, ids := range c.pending {
		if k.group == grp && len(ids) > 0 {
			out = append(out, k)
		}
	}
	return out
}

// completeLocked finishes a transaction in Prepare*: markers, group
// offsets on commit, then Complete*. A failure is counted and logged here
// (noteIncomplete) and leaves Prepare*, which the coordinator's loop
// retries.
func (c *coordinator) completeLocked(ctx context.Context, e *txnEntry) error {
	err := c.tryCompleteLocked(ctx, e)
	if err != nil {
		c.noteIncomplete(ctx, e, err)
	} else if !e.refusedLogged.IsZero() {
		c.log.Info("transaction completed: its markers are written now", "transactional_id", e.id, "state", e.meta.Status.String())
		e.refusedLogged = time.Time{}
	}
	return err
}

func (c *coordinator) tryCompleteLocked(ctx context.Context, e *txnEntry) error {
	m := e.meta
	commit := m.Status == txnPrepareCommit
	ct := storage.ControlAbort
	if commit {
		ct = storage.ControlCommit
	}
	if c.clustered {
		if err := c.s.writeMarkers(ctx, c.coordEpoch(), m.ProducerID, m.Epoch, ct, m.Partitions); err != nil {
			return err
		}
		return c.finishCompleteLocked(ctx, e, m, commit)
	}
	// Append every marker first and start their fsyncs together (each
	// partition has its own flusher), then wait for each.
	type written struct {
		p    Partition
		last int64
	}
	var ws []written
	for _, tp := range m.Partitions {
		p := c.s.b.Partition(tp.Topic, tp.Partition)
		if p == nil {
			c.log.Warn("partition of a transaction is gone; no marker written", "transactional_id", e.id, "topic", tp.Topic, "partition", tp.Partition)
			continue
		}
		last, err := p.AppendMarker(m.ProducerID, m.Epoch, ct)
		if err != nil {
			return fmt.Errorf("cannot write the transaction marker to %s: %w", p, err)
		}
		p.CommitLater()
		ws = append(ws, written{p, last})
	}
	for _, w := range ws {
		if err := w.p.Commit(ctx, w.last); err != nil {
			return fmt.Errorf("cannot sync the transaction marker of %s: %w", w.p, err)
		}
	}
	return c.finishCompleteLocked(ctx, e, m, commit)
}

// finishCompleteLocked applies a committed transaction's group offsets
// once its markers are written, then writes Complete*.
func (c *coordinator) finishCompleteLocked(ctx context.Context, e *txnEntry, m txnMeta, commit bool) error {
	if c.clustered && !commit {
		// Tell the groups' coordinators to forget the offsets they
		// passed on for this transaction (RequireStable).
		byGroup := map[string][]group.CommittedOffset{}
		for _, g := range m.Groups {
			byGroup[g] = nil
		}
		if err := c.s.commitGroupOffsets(ctx, e.id, m.ProducerID, m.Epoch, byGroup); err != nil {
			return err
		}
	}
	if commit && len(m.Offsets) > 0 {
		byGroup := map[string][]group.CommittedOffset{}
		now := c.now().UnixMilli()
		for _, o := range m.Offsets {
			byGroup[o.Group] = append(byGroup[o.Group], group.CommittedOffset{
				Topic: o.Topic, Partition: o.Partition, Offset: o.Offset,
				LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata, CommitTimeMillis: now,
			})
		}
		if err := c.s.commitGroupOffsets(ctx, e.id, m.ProducerID, m.Epoch, byGroup); err != nil {
			return err
		}
	}
	next := m.clone()
	next.Status = txnCompleteAbort
	if commit {
		next.Status = txnCompleteCommit
	}
	next.Partitions, next.Groups, next.Offsets = nil, nil, nil
	if err := c.persistLocked(ctx, e, next); err != nil {
		return err
	}
	return nil
}

// abortLocked aborts e's ongoing transaction. bump raises the producer
// epoch first, so the markers fence the producer that owned it (timeouts
// and a new producer's InitProducerID).
func (c *coordinator) abortLocked(ctx context.Context, e *txnEntry, bump bool) error {
	next := e.meta.clone()
	if bump && next.Epoch < math.MaxInt16-1 {
		next.PrevEpoch = next.Epoch
		next.Epoch++
	}
	next.Status = txnPrepareAbort
	if err := c.persistLocked(ctx, e, next); err != nil {
		return err
	}
	return c.completeLocked(ctx, e)
}

// fenceCode is the error for a request carrying an epoch that is not the
// current one: PRODUCER_FENCED for clients that know it (KIP-588), else
// INVALID_PRODUCER_EPOCH.
func fenceCode(version, knowsFenced int16) *kerr.Error {
	if version >= knowsFenced {
		return kerr.ProducerFenced
	}
	return kerr.InvalidProducerEpoch
}

// checkProducerLocked validates the producer id and epoch of a
// coordinator request.
func checkProducerLocked(e *txnEntry, pid int64, epoch int16, version, knowsFenced int16) *kerr.Error {
	switch {
	case e.meta.ProducerID < 0 || pid != e.meta.ProducerID:
		return kerr.InvalidProducerIDMapping
	case epoch != e.meta.Epoch:
		return fenceCode(version, knowsFenced)
	}
	return nil
}

// finishPendingLocked completes a Prepare* left by a failed marker write
// before the id's next operation; the client sees a retriable error if it
// still fails.
func (c *coordinator) finishPendingLocked(ctx context.Context, e *txnEntry) *kerr.Error {
	if s := e.meta.Status; s != txnPrepareCommit && s != txnPrepareAbort {
		return nil
	}
	if err := c.completeLocked(ctx, e); err != nil {
		return kerr.ConcurrentTransactions
	}
	return nil
}

// readLogRecords calls fn with every record of an internal log written
// by storage.AppendBatch (uncompressed batches), in offset order. A null
// value is passed as nil.
func readLogRecords(l *storage.Log, fn func(offset int64, key, value []byte)) error {
	off, end := l.StartOffset(), l.EndOffset()
	for off < end {
		res, err := l.Read(off, 1<<20, end)
		if err != nil {
			return err
		}
		if res.Bytes == 0 {
			res.Release()
			return nil
		}
		buf := make([]byte, 0, res.Bytes)
		for _, ch := range res.Chunks {
			n := len(buf)
			buf = buf[:n+int(ch.Size)]
			if _, err := ch.File.ReadAt(buf[n:], ch.Pos); err != nil && !errors.Is(err, io.EOF) {
				res.Release()
				return err
			}
		}
		next := res.LastOffset + 1
		res.Release()
		for len(buf) >= 61 {
			n := int(binary.BigEndian.Uint32(buf[8:12])) + 12
			if n < 61 || n > len(buf) {
				return fmt.Errorf("batch at offset %d overruns the read", off)
			}
			var rb kmsg.RecordBatch
			if err := rb.ReadFrom(buf[:n]); err != nil {
				return fmt.Errorf("cannot decode batch: %w", err)
			}
			buf = buf[n:]
			if rb.Attributes&0x27 != 0 { // compressed or control: not ours
				continue
			}
			recs := rb.Records
			for i := int32(0); i < rb.NumRecords; i++ {
				l, k := binary.Varint(recs)
				if k <= 0 || l < 0 || l > int64(len(recs)-k) {
					break
				}
				var r kmsg.Record
				if err := r.ReadFrom(recs[:k+int(l)]); err != nil {
					break
				}
				recs = recs[k+int(l):]
				fn(rb.FirstOffset+int64(r.OffsetDelta), r.Key, r.Value)
			}
		}
		off = next
	}
	return nil
}

// sortedTPs returns the partitions ordered by topic and partition.
func sortedTPs(tps []txnTP) []txnTP {
	out := slices.Clone(tps)
	slices.SortFunc(out, func(a, b txnTP) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition - b.Partition)
	})
	return out
}
