package broker

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/broker/storage"
)

// produce appends a transactional producer's records to part after
// checking them against the transaction: same producer id, current epoch
// (an older one was fenced: INVALID_PRODUCER_EPOCH, which a KIP-588 client
// recovers from by re-initializing), transaction ongoing with the
// partition added.
func (c *txnCoordinator) produce(txnID string, part *partition.Partition, records []byte) partition.AppendResult {
	if part.Replicated() {
		return partition.AppendResult{Err: fmt.Errorf("%w: transactions on replicated partitions are not supported yet", kerr.InvalidTxnState)}
	}
	e := c.lookup(txnID)
	if e == nil {
		return partition.AppendResult{Err: fmt.Errorf("%w: transactional id %q is not initialized", kerr.InvalidProducerIDMapping, txnID)}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m := &e.meta
	tp := txnTP{part.Topic(), part.Index()}
	return part.AppendChecked(records, true, func(hdrs []storage.BatchHeader) error {
		for _, h := range hdrs {
			switch {
			case m.ProducerID < 0 || h.ProducerID != m.ProducerID:
				return fmt.Errorf("%w: producer id %d is not the one of transactional id %q", kerr.InvalidProducerIDMapping, h.ProducerID, txnID)
			case h.ProducerEpoch != m.Epoch:
				return fmt.Errorf("%w: producer %d epoch %d, current epoch is %d", kerr.InvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, m.Epoch)
			}
		}
		if m.Status != txnOngoing || !m.hasPartition(tp) {
			return fmt.Errorf("%w: %s is not part of an ongoing transaction of %q (AddPartitionsToTxn first)", kerr.InvalidTxnState, part, txnID)
		}
		return nil
	})
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
	return b.verifyTxnPartition(ctx, txnID, pid, epoch, txnTP{part.Topic(), part.Index()})
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
