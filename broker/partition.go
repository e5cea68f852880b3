package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/storage"
)

// Partition is one partition's log plus the state the broker keeps beside
// it: idempotent producers and fetch waiters.
//
// The write path is append (in request order, under mu, after the
// producer-sequence check) followed by commit (wait until the appended
// offsets are durable). On a single node commit is an fsync of the local
// log; a replicated partition replaces commit with "committed by a raft
// majority". The high watermark is the commit point: Fetch never serves
// offsets at or above it, so a consumer never sees a record that a crash
// could take back.
type Partition struct {
	b     *Broker
	topic string
	index int32
	log   *storage.Log
	// grp is the partition's raft group when it is replicated (cluster
	// mode, replication factor > 1); set before the partition is
	// published, nil otherwise. See replica.go.
	grp *cluster.Group
	// readyTerm is the raft term in which this replica, as leader, has
	// applied every entry committed before (a barrier went through); it
	// serves only then. See replica.go.
	readyTerm atomic.Uint64

	maxMessageBytes atomic.Int64
	compacted       atomic.Bool
	logAppendTime   atomic.Bool              // message.timestamp.type=LogAppendTime
	holdGroups      atomic.Pointer[[]string] // simtel.retention.hold.groups

	mu struct {
		sync.Mutex
		producers map[int64]*producerEntry
	}

	hw atomic.Int64

	waitMu  sync.Mutex
	waiters map[chan struct{}]struct{}

	// flushCh asks the flusher to make everything appended so far durable
	// (acks=0/1 produce), so the high watermark advances without a
	// request waiting on it. Coalesces: one pending signal at most.
	flushCh   chan struct{}
	flushStop context.CancelFunc
	flushDone chan struct{}
}

func newPartition(b *Broker, t string, i int32, l *storage.Log, configs map[string]string) (*Partition, error) {
	p := &Partition{b: b, topic: t, index: i, log: l, waiters: map[chan struct{}]struct{}{}, flushCh: make(chan struct{}, 1), flushDone: make(chan struct{})}
	p.mu.producers = map[int64]*producerEntry{}
	p.setConfigs(configs)
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

func (p *Partition) setConfigs(overrides map[string]string) {
	p.maxMessageBytes.Store(p.b.configInt(overrides, "max.message.bytes"))
	policy, _ := p.b.effectiveTopicConfig(overrides, "cleanup.policy")
	p.compacted.Store(strings.Contains(policy, "compact"))
	tsType, _ := p.b.effectiveTopicConfig(overrides, "message.timestamp.type")
	p.logAppendTime.Store(tsType == "LogAppendTime")
	hold, _ := p.b.effectiveTopicConfig(overrides, holdGroupsConfig)
	var groups []string
	for _, g := range strings.Split(hold, ",") {
		if g = strings.TrimSpace(g); g != "" {
			groups = append(groups, g)
		}
	}
	p.holdGroups.Store(&groups)
}

func (p *Partition) compact() bool { return p.compacted.Load() }

// retentionFloor is the lowest offset retention must keep: the lowest
// offset committed for this partition by the groups named in the topic's
// simtel.retention.hold.groups (the sink's group, so that nothing is
// deleted before it is tiered to the lake). A named group that has not
// committed an offset for the partition holds the whole log.
func (p *Partition) retentionFloor() int64 {
	groups := p.holdGroups.Load()
	if groups == nil || len(*groups) == 0 {
		return math.MaxInt64
	}
	floor := int64(math.MaxInt64)
	for _, g := range *groups {
		off, ok := p.b.committedOffset(g, p.topic, p.index)
		if !ok || off < 0 {
			return 0
		}
		floor = min(floor, off)
	}
	return floor
}

func (p *Partition) highWatermark() int64 { return p.hw.Load() }

func (p *Partition) close() error {
	if p.grp != nil {
		if err := p.grp.Close(); err != nil {
			p.b.log.Warn("cannot stop a partition's raft group", "partition", p.String(), "err", err)
		}
	}
	p.flushStop()
	<-p.flushDone
	p.wakeWaiters()
	return p.log.Close()
}

func (p *Partition) remove() error {
	if p.grp != nil {
		if err := p.grp.Remove(); err != nil {
			p.b.log.Warn("cannot remove a partition's raft group", "partition", p.String(), "err", err)
		}
	}
	p.flushStop()
	<-p.flushDone
	p.wakeWaiters()
	return p.log.Remove()
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
				p.b.log.Error("cannot flush partition", "topic", p.topic, "partition", p.index, "err", err)
			}
			continue
		}
		p.advanceHW()
	}
}

// advanceHW moves the high watermark to the durable end and wakes fetches.
func (p *Partition) advanceHW() {
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

func (p *Partition) addWaiter(ch chan struct{}) {
	p.waitMu.Lock()
	p.waiters[ch] = struct{}{}
	p.waitMu.Unlock()
}

func (p *Partition) removeWaiter(ch chan struct{}) {
	p.waitMu.Lock()
	delete(p.waiters, ch)
	p.waitMu.Unlock()
}

// appendResult is the outcome of appending one partition's records.
type appendResult struct {
	base, last int64
	duplicate  bool // an idempotent retry of records already written
	err        error
}

// appendRecords validates and appends the records of one produce
// partition. The caller then commits (waits for durability) as acks asks.
func (p *Partition) appendRecords(records []byte) appendResult {
	return p.appendChecked(records, false, nil)
}

// appendChecked is appendRecords for a producer that may write
// transactional batches (txn) after check accepted their headers; the
// transaction coordinator calls it with the transaction's lock held.
func (p *Partition) appendChecked(records []byte, txn bool, check func([]storage.BatchHeader) error) appendResult {
	hdrs, err := p.parseProduce(records, txn)
	if err != nil {
		return appendResult{err: err}
	}
	if check != nil {
		if err := check(hdrs); err != nil {
			return appendResult{err: err}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	dupOffset, err := p.checkSequencesLocked(hdrs)
	if err != nil {
		return appendResult{err: err}
	}
	if dupOffset >= 0 {
		return appendResult{base: dupOffset, duplicate: true}
	}
	base, last, err := p.log.Append(records, hdrs, 0)
	if err != nil {
		return appendResult{err: storageToKerr(err)}
	}
	p.recordSequencesLocked(records, hdrs, base)
	return appendResult{base: base, last: last}
}

// parseProduce validates a produce partition's records (CRC, size; no
// control batches, and transactional ones only when txn) and returns
// their batch headers.
func (p *Partition) parseProduce(records []byte, txn bool) ([]storage.BatchHeader, error) {
	hdrs, err := storage.ParseBatches(records, int(p.maxMessageBytes.Load()))
	if err != nil {
		return nil, storageToKerr(err)
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
	_, err := p.parseProduce(records, false)
	return err
}

// commit waits until offsets up to last are durable.
func (p *Partition) commit(ctx context.Context, last int64) error {
	if err := p.log.Sync(ctx, last); err != nil {
		return storageToKerr(err)
	}
	p.advanceHW()
	return nil
}

// commitLater makes appended data durable in the background.
func (p *Partition) commitLater() {
	select {
	case p.flushCh <- struct{}{}:
	default:
	}
}

// storageToKerr maps a log error to the Kafka error code the client sees.
func storageToKerr(err error) error {
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

// kerrCode extracts the Kafka error code of err (0 for nil).
func kerrCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}

func (p *Partition) String() string { return p.topic + "-" + strconv.Itoa(int(p.index)) }
