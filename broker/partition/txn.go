package partition

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/storage"
)

// Transactions as a partition sees them: a producer's transactional
// batches are appended like any other (AppendChecked, RaftApply), the
// coordinator ends them with a marker, a control batch (AppendMarker,
// WriteMarker), and the log's transaction index tells the open and aborted
// ones apart (LastStableOffset, storage.Log.AbortedTxns).

// AppendMarker appends a transaction marker for producer pid to the
// partition and returns its offset; the caller commits it. The partition
// must not be replicated (WriteMarker handles both).
func (p *Partition) AppendMarker(pid int64, epoch int16, ct storage.ControlType) (int64, error) {
	if p.Replicated() {
		return 0, fmt.Errorf("%w: transactions on replicated partitions are not supported yet", kerr.InvalidTxnState)
	}
	batch := storage.AppendControlBatch(nil, pid, epoch, ct, 0, time.Now().UnixMilli())
	hdrs, err := storage.ParseBatches(batch, 0)
	if err != nil {
		return 0, fmt.Errorf("cannot encode transaction marker: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	base, last, err := p.log.Append(batch, hdrs, 0)
	if err != nil {
		return 0, KafkaError(err)
	}
	p.observeBatchLocked(hdrs[0], base, batch)
	return last, nil
}

// WriteMarker ends producer pid's transaction in p with a marker of type
// ct and waits until it is durable: through raft on a replicated
// partition (this broker must be its ready leader), else appended and
// fsynced locally. coordEpoch is the coordinator's epoch (the raft term
// of its state partition); the replicas refuse the marker if one from a
// newer coordinator of the producer is already there.
func (p *Partition) WriteMarker(ctx context.Context, pid int64, epoch int16, ct storage.ControlType, coordEpoch int32) error {
	if !p.Replicated() {
		last, err := p.AppendMarker(pid, epoch, ct)
		if err != nil {
			return err
		}
		return p.Commit(ctx, last)
	}
	if !p.IsLeader() {
		return fmt.Errorf("%w: this broker is not the raft leader of %s; the coordinator retries at the current leader", kerr.NotLeaderForPartition, p)
	}
	batch := storage.AppendControlBatch(nil, pid, epoch, ct, coordEpoch, time.Now().UnixMilli())
	res := ApplyResult(p.RaftApply(batch))
	if res.Err != nil {
		return fmt.Errorf("cannot replicate the transaction marker of producer %d to %s: %w", pid, p, res.Err)
	}
	return nil
}

// LastStableOffset is the offset below which every transaction has ended:
// the first offset of the earliest open transaction, capped by the high
// watermark hw. read_committed consumers are served only below it.
func (p *Partition) LastStableOffset(hw int64) int64 {
	if first, ok := p.log.FirstUnstableOffsetAt(hw); ok && first < hw {
		return first
	}
	return hw
}

// ProducerEpoch is the current epoch of producer pid here (from its
// batches or a coordinator's marker); known is false for a producer the
// partition has no state of.
func (p *Partition) ProducerEpoch(pid int64) (epoch int16, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.liveProducerLocked(pid, p.mu.clock); e != nil {
		return e.epoch, true
	}
	return 0, false
}
