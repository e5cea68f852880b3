package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/storage"
)

// Partition is one partition's log plus the state kept beside it:
// idempotent producers and fetch waiters.
//
// The write path is append (in request order, under mu, after the
// producer-sequence check) followed by commit (wait until the appended
// offsets are durable). On a single node commit is an fsync of the local
// log; a replicated partition replaces commit with "committed by a raft
// majority". The high watermark is the commit point: Fetch never serves
// offsets at or above it, so a consumer never sees a record that a crash
// could take back.
type Partition struct {
	cfg   Config
	topic string
	index int32
	log   *storage.Log
	// grp is the partition's raft group when it is replicated (cluster
	// mode, replication factor > 1); set by StartReplica before the
	// partition is published, nil otherwise. See replica.go.
	grp *cluster.Group
	// readyTerm is the raft term in which this replica, as leader, has
	// applied every entry committed before (a barrier went through); it
	// serves only then. See replica.go.
	readyTerm atomic.Uint64
	// lastApply is when this replica last handed raft an entry (Unix
	// ns); a leader idle for long may put its group to sleep (Sleep).
	lastApply atomic.Int64

	maxMessageBytes atomic.Int64
	compacted       atomic.Bool
	logAppendTime   atomic.Bool              // message.timestamp.type=LogAppendTime
	holdGroups      atomic.Pointer[[]string] // simtel.retention.hold.groups

	mu struct {
		sync.Mutex
		producers map[int64]*producerEntry
		// clock is the highest batch timestamp appended (Unix ms), the
		// time producer expiry is measured on; nextSweep is when the
		// expired producers are next removed. See producers.go.
		clock, nextSweep int64
	}
	expiredProducers atomic.Uint64

	hw atomic.Int64
	// snapsLive is set once a replicated partition's raft has started
	// (a snapshot restored after that was sent by the leader).
	snapsLive *atomic.Bool

	waitMu  sync.Mutex
	waiters map[chan struct{}]struct{}

	// flushCh asks the flusher to make everything appended so far durable
	// (acks=0/1 produce), so the high watermark advances without a
	// request waiting on it. Coalesces: one pending signal at most.
	flushCh   chan struct{}
	flushStop context.CancelFunc
	flushDone chan struct{}
}

// Config is what a partition needs besides its log.
type Config struct {
	Topic string
	Index int32
	// Settings are the topic's configs that the partition applies itself.
	Settings Settings
	// Logger gets the partition's warnings and the replica's events
	// (default: discarded).
	Logger *slog.Logger
	// SnapshotInstalled, if set, is called each time a lagging replica
	// installed the data of a leader's snapshot.
	SnapshotInstalled func()
	// ProducerIDExpiration is how long an idempotent producer's state is
	// kept after its last batch (producer.id.expiration.ms); 0 or less:
	// forever. See producers.go.
	ProducerIDExpiration time.Duration
	// ProducersExpired, if set, is called with the number of producers
	// each time some are forgotten as expired.
	ProducersExpired func(n int)
}

// Settings are the topic configs a partition applies on its write path
// and to its retention; the log's own (segments, retention, compaction)
// are in its storage.Config.
type Settings struct {
	// MaxMessageBytes bounds one record batch (max.message.bytes).
	MaxMessageBytes int64
	// Compacted: cleanup.policy includes compact.
	Compacted bool
	// LogAppendTime: message.timestamp.type=LogAppendTime.
	LogAppendTime bool
	// HoldGroups are the consumer groups whose committed offsets bound
	// retention (simtel.retention.hold.groups).
	HoldGroups []string
}

// Open makes the partition of log l, which it then owns: Close or Remove
// closes it. The log's recovered end is made durable first, the producer
// state is rebuilt from its batches, and a flusher goroutine is started.
func Open(l *storage.Log, cfg Config) (*Partition, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t, i := cfg.Topic, cfg.Index
	p := &Partition{cfg: cfg, topic: t, index: i, log: l, waiters: map[chan struct{}]struct{}{}, flushCh: make(chan struct{}, 1), flushDone: make(chan struct{})}
	p.SetSettings(cfg.Settings)
	// Whatever survived a restart is on disk, but maybe only in the page
	// cache (process crash, not power loss): make it durable before
	// treating it as committed.
	if end := l.EndOffset(); end > 0 {
		if err := l.Sync(context.Background(), end-1); err != nil {
			return nil, fmt.Errorf("cannot sync recovered partition %s-%d: %w", t, i, err)
		}
	}
	if err := p.rebuildProducers(); err != nil {
		return nil, fmt.Errorf("cannot rebuild producer state of %s-%d: %w", t, i, err)
	}
	p.hw.Store(l.SyncedOffset())
	ctx, cancel := context.WithCancel(context.Background())
	p.flushStop = cancel
	go p.flusher(ctx)
	return p, nil
}

// SetSettings applies changed topic configs.
func (p *Partition) SetSettings(s Settings) {
	p.maxMessageBytes.Store(s.MaxMessageBytes)
	p.compacted.Store(s.Compacted)
	p.logAppendTime.Store(s.LogAppendTime)
	groups := slices.Clone(s.HoldGroups)
	p.holdGroups.Store(&groups)
}

// Topic is the partition's topic name.
func (p *Partition) Topic() string { return p.topic }

// Index is the partition's number in its topic.
func (p *Partition) Index() int32 { return p.index }

// Log is the partition's log. Appends go through the partition (Append,
// raft), which keeps the producer state; reads, retention and compaction
// use the log directly.
func (p *Partition) Log() *storage.Log { return p.log }

// LogAppendTime reports whether produced batches are stamped with the
// broker's clock (message.timestamp.type=LogAppendTime).
func (p *Partition) LogAppendTime() bool { return p.logAppendTime.Load() }

// Compacted reports whether the topic's cleanup policy includes compact.
func (p *Partition) Compacted() bool { return p.compacted.Load() }

// RetentionFloor is the lowest offset retention must keep: the lowest
// offset committed for this partition by the groups named in the topic's
// simtel.retention.hold.groups (the sink's group, so that nothing is
// deleted before it is tiered to the lake), as committed reports them. A
// named group that has not committed an offset for the partition holds
// the whole log.
//
// A replicated partition's floor is at most its high watermark: above it
// lie entries raft may still need to apply or truncate.
func (p *Partition) RetentionFloor(committed func(group string) (int64, bool)) int64 {
	floor := int64(math.MaxInt64)
	if p.grp != nil {
		floor = p.hw.Load()
	}
	groups := p.holdGroups.Load()
	if groups == nil || len(*groups) == 0 {
		return floor
	}
	for _, g := range *groups {
		off, ok := committed(g)
		if !ok || off < 0 {
			return 0
		}
		floor = min(floor, off)
	}
	return floor
}

// Compact compacts the log (a compacted topic's maintenance), below the
// high watermark for a replicated partition (storage.Log.CompactBelow).
func (p *Partition) Compact() (storage.CompactStats, error) {
	if p.grp != nil {
		return p.log.CompactBelow(p.hw.Load())
	}
	return p.log.Compact()
}

// HighWatermark is the commit point: offsets below it are durable (a
// single replica) or applied after a raft majority had them.
func (p *Partition) HighWatermark() int64 { return p.hw.Load() }

// Close stops the partition's raft group and flusher and closes its log.
func (p *Partition) Close() error { return p.stop(false) }

// Remove is Close that also deletes the raft group's state and the log's
// files.
func (p *Partition) Remove() error { return p.stop(true) }

func (p *Partition) stop(remove bool) error {
	if p.grp != nil {
		stopGroup, msg := p.grp.Close, "cannot stop a partition's raft group"
		if remove {
			stopGroup, msg = p.grp.Remove, "cannot remove a partition's raft group"
		}
		if err := stopGroup(); err != nil {
			p.cfg.Logger.Warn(msg, "partition", p.String(), "err", err)
		}
	}
	p.flushStop()
	<-p.flushDone
	p.wakeWaiters()
	if remove {
		return p.log.Remove()
	}
	return p.log.Close()
}

func (p *Partition) flusher(ctx context.Context) {
	defer close(p.flushDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.flushCh:
		}
		end := p.log.EndOffset()
		if end == 0 {
			continue
		}
		if err := p.log.Sync(ctx, end-1); err != nil {
			if ctx.Err() == nil {
				p.cfg.Logger.Error("cannot flush partition", "topic", p.topic, "partition", p.index, "err", err)
			}
			continue
		}
		p.AdvanceHW()
	}
}

// AdvanceHW moves the high watermark to the durable end and wakes fetches.
// A writer that appends to the log directly (the group coordinator's
// store) calls it after each sync.
func (p *Partition) AdvanceHW() {
	if p.grp != nil {
		return // raft moves it (replicaFSM.Apply)
	}
	synced := p.log.SyncedOffset()
	for {
		cur := p.hw.Load()
		if synced <= cur {
			return
		}
		if p.hw.CompareAndSwap(cur, synced) {
			break
		}
	}
	p.wakeWaiters()
}

func (p *Partition) wakeWaiters() {
	p.waitMu.Lock()
	for ch := range p.waiters {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	p.waitMu.Unlock()
}

// AddWaiter registers ch to get a signal (without blocking) each time the
// high watermark advances or the partition closes.
func (p *Partition) AddWaiter(ch chan struct{}) {
	p.waitMu.Lock()
	p.waiters[ch] = struct{}{}
	p.waitMu.Unlock()
}

// RemoveWaiter undoes AddWaiter.
func (p *Partition) RemoveWaiter(ch chan struct{}) {
	p.waitMu.Lock()
	delete(p.waiters, ch)
	p.waitMu.Unlock()
}

// AppendResult is the outcome of appending one partition's records.
type AppendResult struct {
	// Base and Last are the offsets of the first and last record
	// written; for a duplicate, Base is the original batch's base offset.
	Base, Last int64
	Duplicate  bool // an idempotent retry of records already written
	// Err is a kerr error for the produce response.
	Err error
}

// Append validates and appends the records of one produce partition. The
// caller then commits (waits for durability) as acks asks.
func (p *Partition) Append(records []byte) AppendResult {
	return p.AppendChecked(records, false, nil)
}

// AppendChecked is Append for a producer that may write transactional
// batches (txn) after check accepted their headers; the transaction
// coordinator calls it with the transaction's lock held.
func (p *Partition) AppendChecked(records []byte, txn bool, check func([]storage.BatchHeader) error) AppendResult {
	hdrs, err := p.ParseProduce(records, txn)
	if err != nil {
		return AppendResult{Err: err}
	}
	if check != nil {
		if err := check(hdrs); err != nil {
			return AppendResult{Err: err}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	dupOffset, err := p.checkSequencesLocked(hdrs)
	if err != nil {
		return AppendResult{Err: err}
	}
	if dupOffset >= 0 {
		return AppendResult{Base: dupOffset, Duplicate: true}
	}
	base, last, err := p.log.Append(records, hdrs, 0)
	if err != nil {
		return AppendResult{Err: KafkaError(err)}
	}
	p.recordSequencesLocked(records, hdrs, base)
	return AppendResult{Base: base, Last: last}
}

// ParseProduce validates a produce partition's records (CRC, size; no
// control batches, and transactional ones only when txn) and returns
// their batch headers.
func (p *Partition) ParseProduce(records []byte, txn bool) ([]storage.BatchHeader, error) {
	hdrs, err := storage.ParseBatches(records, int(p.maxMessageBytes.Load()))
	if err != nil {
		return nil, KafkaError(err)
	}
	if len(hdrs) == 0 {
		return nil, fmt.Errorf("%w: produce request has no record batch", kerr.CorruptMessage)
	}
	for _, h := range hdrs {
		switch {
		case h.IsControl():
			return nil, fmt.Errorf("%w: producers cannot write control batches", kerr.InvalidRecord)
		case h.IsTransactional() && !txn:
			return nil, fmt.Errorf("%w: a transactional batch needs a produce request with a transactional id", kerr.InvalidTxnState)
		case !h.IsTransactional() && txn:
			return nil, fmt.Errorf("%w: a produce request with a transactional id must hold transactional batches only", kerr.InvalidRecord)
		}
	}
	return hdrs, nil
}

// validateProduce checks the records of a replicated partition's produce
// (transactions are not replicated yet).
func (p *Partition) validateProduce(records []byte) error {
	_, err := p.ParseProduce(records, false)
	return err
}

// Commit waits until offsets up to last are durable.
func (p *Partition) Commit(ctx context.Context, last int64) error {
	if err := p.log.Sync(ctx, last); err != nil {
		return KafkaError(err)
	}
	p.AdvanceHW()
	return nil
}

// CommitLater makes appended data durable in the background.
func (p *Partition) CommitLater() {
	select {
	case p.flushCh <- struct{}{}:
	default:
	}
}

// KafkaError maps a log error to the Kafka error the client sees.
func KafkaError(err error) error {
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke):
		return err
	case errors.Is(err, storage.ErrCorruptBatch):
		return fmt.Errorf("%w: %v", kerr.CorruptMessage, err)
	case errors.Is(err, storage.ErrBatchTooLarge):
		return fmt.Errorf("%w: %v", kerr.MessageTooLarge, err)
	case errors.Is(err, storage.ErrUnsupportedMagic):
		return fmt.Errorf("%w: %v", kerr.UnsupportedForMessageFormat, err)
	case errors.Is(err, storage.ErrOffsetOutOfRange):
		return fmt.Errorf("%w: %v", kerr.OffsetOutOfRange, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %v", kerr.RequestTimedOut, err)
	default:
		return fmt.Errorf("%w: %v", kerr.KafkaStorageError, err)
	}
}

func (p *Partition) String() string { return p.topic + "-" + strconv.Itoa(int(p.index)) }
