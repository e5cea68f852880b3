package txn

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/storage"
)

// Produce runs write, which appends a transactional producer's batches to
// a partition of a single node, holding the transaction's lock, so no
// batch of a transaction lands after its marker. write passes check the
// headers of the batches before it appends them: same producer id,
// current epoch (an older one was fenced: INVALID_PRODUCER_EPOCH, which a
// KIP-588 client recovers from by re-initializing), transaction ongoing
// with the partition added.
func (s *Coordinators) Produce(txnID, topic string, partition int32, write func(check func([]storage.BatchHeader) error) error) error {
	c := s.single
	if c == nil {
		return fmt.Errorf("%w: no transaction coordinator", kerr.CoordinatorNotAvailable)
	}
	e := c.lookup(txnID)
	if e == nil {
		return fmt.Errorf("%w: transactional id %q is not initialized", kerr.InvalidProducerIDMapping, txnID)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m := &e.meta
	tp := txnTP{topic, partition}
	return write(func(hdrs []storage.BatchHeader) error {
		for _, h := range hdrs {
			switch {
			case m.ProducerID < 0 || h.ProducerID != m.ProducerID:
				return fmt.Errorf("%w: producer id %d is not the one of transactional id %q", kerr.InvalidProducerIDMapping, h.ProducerID, txnID)
			case h.ProducerEpoch != m.Epoch:
				return fmt.Errorf("%w: producer %d epoch %d, current epoch is %d", kerr.InvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, m.Epoch)
			}
		}
		if m.Status != txnOngoing || !m.hasPartition(tp) {
			return fmt.Errorf("%w: %s-%d is not part of an ongoing transaction of %q (AddPartitionsToTxn first)", kerr.InvalidTxnState, topic, partition, txnID)
		}
		return nil
	})
}

// VerifyPartition checks, for a transactional produce on a partition of a
// cluster, that the partition is in the producer's ongoing transaction:
// at the local coordinator, or with a verify-only AddPartitionsToTxn (v4)
// at the coordinator broker.
func (s *Coordinators) VerifyPartition(ctx context.Context, txnID string, pid int64, epoch int16, topic string, partition int32) error {
	tp := txnTP{topic, partition}
	one := kmsg.NewPtrAddPartitionsToTxnRequest()
	one.Version = 3
	one.TransactionalID, one.ProducerID, one.ProducerEpoch = txnID, pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = tp.Topic, []int32{tp.Partition}
	one.Topics = append(one.Topics, rt)
	code := int16(0)
	if c, cc := s.coordinatorFor(txnID); c != nil {
		for _, st := range c.verifyPartitions(one).Topics {
			for _, sp := range st.Partitions {
				code = sp.ErrorCode
			}
		}
	} else if cc != kerr.NotCoordinator.Code {
		code = cc
	} else {
		n := s.statePartitions()
		_, addr, ok := s.b.LeaderOf(StateTopic, partitionOf(txnID, n))
		if n == 0 || !ok {
			return fmt.Errorf("%w: the coordinator of transactional id %q is not known yet", kerr.NotEnoughReplicas, txnID)
		}
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.Version = 4
		tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
		tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = txnID, pid, epoch, true
		tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		tt.Topic, tt.Partitions = tp.Topic, []int32{tp.Partition}
		tx.Topics = append(tx.Topics, tt)
		req.Transactions = append(req.Transactions, tx)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		kr, err := s.peerRequest(rctx, addr, req)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: cannot ask the transaction coordinator %s: %v", kerr.NotEnoughReplicas, addr, err)
		}
		resp := kr.(*kmsg.AddPartitionsToTxnResponse)
		if resp.ErrorCode != 0 {
			code = resp.ErrorCode
		}
		for _, t := range resp.Transactions {
			for _, st := range t.Topics {
				for _, sp := range st.Partitions {
					if sp.ErrorCode != 0 {
						code = sp.ErrorCode
					}
				}
			}
		}
	}
	switch code {
	case 0:
		return nil
	case kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code, kerr.ConcurrentTransactions.Code:
		// The coordinator is moving: the producer retries.
		return fmt.Errorf("%w: the transaction coordinator of %q is not ready (%v)", kerr.NotEnoughReplicas, txnID, kerr.ErrorForCode(code))
	}
	return fmt.Errorf("%w: %s-%d is not in the ongoing transaction of %q", kerr.ErrorForCode(code), tp.Topic, tp.Partition, txnID)
}
