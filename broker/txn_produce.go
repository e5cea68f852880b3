package broker

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/storage"
)

// produce appends a transactional producer's records to part after
// checking them against the transaction: same producer id, current epoch
// (an older one was fenced: INVALID_PRODUCER_EPOCH, which a KIP-588 client
// recovers from by re-initializing), transaction ongoing with the
// partition added.
func (c *txnCoordinator) produce(txnID string, part *Partition, records []byte) appendResult {
	if part.replicated() {
		return appendResult{err: fmt.Errorf("%w: transactions on replicated partitions are not supported yet", kerr.InvalidTxnState)}
	}
	e := c.lookup(txnID)
	if e == nil {
		return appendResult{err: fmt.Errorf("%w: transactional id %q is not initialized", kerr.InvalidProducerIDMapping, txnID)}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m := &e.meta
	tp := txnTP{part.topic, part.index}
	return part.appendChecked(records, true, func(hdrs []storage.BatchHeader) error {
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
