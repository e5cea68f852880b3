package broker

// The broker's side of transactions. The coordinators (package txn) see
// the broker through txnBroker; a transactional produce is checked here,
// at the partition, against the coordinator; producer ids come from
// pidAllocator.

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/broker/storage"
	"github.com/simtel/simtel/broker/txn"
)

// txnStateTopic holds the transaction coordinators' state.
const txnStateTopic = txn.StateTopic

func (b *Broker) newTxnCoordinators() *txn.Coordinators {
	return txn.New(txn.Config{NodeID: b.cfg.NodeID, Clustered: b.cfg.clustered(), Logger: b.log,
		Registerer: b.metrics.reg, Broker: txnBroker{b}, PeerTLS: b.peerTLS, TxnIDExpiration: b.cfg.TransactionalIDExpiration})
}

// txnBroker is what the transaction coordinators use of the broker.
type txnBroker struct{ b *Broker }

func (t txnBroker) StatePartition(i int32) txn.StatePartition {
	if p := t.b.localPartition(txnStateTopic, i); p != nil {
		return p
	}
	return nil
}

func (t txnBroker) StatePartitions() []txn.StatePartition {
	var parts []*partition.Partition
	if tp := t.b.topic(txnStateTopic); tp != nil {
		parts = tp.parts
	}
	t.b.readyOffsetsLeaders(parts)
	out := make([]txn.StatePartition, len(parts))
	for i, p := range parts {
		if p != nil {
			out[i] = p
		}
	}
	return out
}

func (t txnBroker) CreateTopic(ctx context.Context, name string, partitions int32, configs map[string]string) error {
	b := t.b
	if b.cluster == nil {
		ptrs := make(map[string]*string, len(configs))
		for k, v := range configs {
			ptrs[k] = &v
		}
		_, err := b.createTopic(name, partitions, -1, ptrs, false)
		return err
	}
	return b.createInternalTopic(ctx, name, partitions, configs)
}

func (t txnBroker) Partition(topic string, i int32) txn.Partition {
	if p := t.b.partition(topic, i); p != nil {
		return p
	}
	return nil
}

func (t txnBroker) PartitionKnown(topic string, i int32) bool {
	if t.b.cluster == nil {
		return t.b.partition(topic, i) != nil
	}
	ti := t.b.cluster.Metadata().Topics[topic]
	return ti != nil && i >= 0 && int(i) < len(ti.Partitions)
}

func (t txnBroker) ClusterPartitions(topic string) int {
	if t.b.cluster == nil {
		return 0
	}
	if ti := t.b.cluster.Metadata().Topics[topic]; ti != nil {
		return len(ti.Partitions)
	}
	return 0
}

func (t txnBroker) LeaderOf(topic string, i int32) (int32, string, bool) {
	lb, ok := t.b.partitionLeaderBroker(topic, i)
	return lb.ID, lb.KafkaAddr, ok
}

func (t txnBroker) GroupCoordinator(g string) (*group.Coordinator, int16) {
	return t.b.coordinatorFor(g)
}

func (t txnBroker) GroupCoordinatorAddr(g string) (string, error) {
	b := t.b
	n := t.ClusterPartitions(offsetsTopic)
	if b.topic(offsetsTopic) == nil && n == 0 {
		return "", fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, offsetsTopic)
	}
	lb, ok := b.partitionLeaderBroker(offsetsTopic, groupPartition(g, n))
	if !ok || lb.ID == b.cfg.NodeID {
		return "", fmt.Errorf("%w: the coordinator of group %q is not ready", kerr.CoordinatorNotAvailable, g)
	}
	return lb.KafkaAddr, nil
}

func (t txnBroker) GroupCoordinatorSince(g string) (time.Time, bool) {
	tp := t.b.topic(offsetsTopic)
	if tp == nil || len(tp.parts) == 0 {
		return time.Time{}, false
	}
	t.b.coords.RLock()
	s := t.b.coords.slots[groupPartition(g, len(tp.parts))]
	t.b.coords.RUnlock()
	if s == nil {
		return time.Time{}, false
	}
	return s.since, true
}

func (t txnBroker) NewProducerID() (int64, error) { return t.b.pids.next() }

// produceTxn appends a transactional producer's records to a partition of
// a single node, after the coordinator checked them against the
// transaction (txn.Coordinators.Produce).
func (b *Broker) produceTxn(txnID string, part *partition.Partition, records []byte) partition.AppendResult {
	if part.Replicated() {
		return partition.AppendResult{Err: fmt.Errorf("%w: transactions on replicated partitions are not supported yet", kerr.InvalidTxnState)}
	}
	var res partition.AppendResult
	if err := b.txn.Produce(txnID, part.Topic(), part.Index(), func(check func([]storage.BatchHeader) error) error {
		res = part.AppendChecked(records, true, check)
		return res.Err
	}); err != nil {
		res.Err = err
	}
	return res
}

// checkTxnProduce is the cluster-mode check of a transactional produce
// at a partition's leader, where the coordinator may be another broker:
// the batches carry one producer id and epoch, the epoch is not older
// than the partition's replicated producer state (a coordinator's marker
// with a bumped epoch fenced it), and the partition is in the producer's
// ongoing transaction. The last is asked of the coordinator only for the
// first batch of a transaction in the partition: once it has an open
// transaction here, a marker must end it before the producer may write
// outside a transaction again. The replica state machine checks the
// epoch again when it applies the entry, so a marker committed in
// between still fences the batch.
func (b *Broker) checkTxnProduce(ctx context.Context, txnID string, part *partition.Partition, records []byte) error {
	hdrs, err := part.ParseProduce(records, true)
	if err != nil {
		return err
	}
	pid, epoch := hdrs[0].ProducerID, hdrs[0].ProducerEpoch
	for _, h := range hdrs[1:] {
		if h.ProducerID != pid || h.ProducerEpoch != epoch {
			return fmt.Errorf("%w: one produce request mixes producer ids or epochs", kerr.InvalidRecord)
		}
	}
	curEpoch, known := part.ProducerEpoch(pid)
	if known && epoch < curEpoch {
		return fmt.Errorf("%w: producer %d epoch %d, current epoch is %d", kerr.InvalidProducerEpoch, pid, epoch, curEpoch)
	}
	if _, open := part.Log().OngoingTxn(pid); open && known && epoch == curEpoch {
		return nil
	}
	return b.txn.VerifyPartition(ctx, txnID, pid, epoch, part.Topic(), part.Index())
}

// replicateTxn is Partition.Replicate for a transactional producer.
func (b *Broker) replicateTxn(ctx context.Context, txnID string, part *partition.Partition, records []byte) (raft.ApplyFuture, error) {
	if !part.IsLeader() {
		return nil, fmt.Errorf("%w: this broker is not the raft leader of %s; refresh metadata", kerr.NotLeaderForPartition, part)
	}
	if err := b.checkTxnProduce(ctx, txnID, part, records); err != nil {
		return nil, err
	}
	return part.RaftApply(records), nil
}

// produceTxnUnreplicated appends a transactional producer's records to a
// partition with a single replica in cluster mode.
func (b *Broker) produceTxnUnreplicated(ctx context.Context, txnID string, part *partition.Partition, records []byte) partition.AppendResult {
	if err := b.checkTxnProduce(ctx, txnID, part, records); err != nil {
		return partition.AppendResult{Err: err}
	}
	return part.AppendChecked(records, true, nil)
}

// pidAllocator hands out producer ids that are never reused, even across
// crashes: it reserves blocks of ids by durably writing the block's end
// before handing out any id of it.
type pidAllocator struct {
	path string
	mu   struct {
		sync.Mutex
		next, limit int64
	}
}

const pidBlock = 1000

func openPIDAllocator(path string) (*pidAllocator, error) {
	a := &pidAllocator{path: path}
	data, err := os.ReadFile(path)
	switch {
	case err == nil && len(data) == 8:
		a.mu.next = int64(binary.BigEndian.Uint64(data))
		a.mu.limit = a.mu.next
	case err == nil:
		return nil, fmt.Errorf("producer id file %s is %d bytes, want 8: remove it only if no idempotent producer is running", path, len(data))
	case os.IsNotExist(err):
	default:
		return nil, fmt.Errorf("cannot read producer id file: %w", err)
	}
	return a, nil
}

func (a *pidAllocator) next() (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.next >= a.mu.limit {
		limit := a.mu.limit + pidBlock
		if err := writeFileAtomic(a.path, binary.BigEndian.AppendUint64(nil, uint64(limit))); err != nil {
			return 0, err
		}
		a.mu.next, a.mu.limit = a.mu.limit, limit
	}
	id := a.mu.next
	a.mu.next++
	return id, nil
}
