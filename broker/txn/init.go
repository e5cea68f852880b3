package txn

import (
	"context"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// initProducerID gives a transactional id its producer id and a new
// epoch. An open transaction of the previous producer is aborted first
// with the epoch bumped (so its markers fence that producer everywhere it
// wrote), and the new producer gets the epoch after that. v3+ callers that
// pass their current id and epoch (KIP-360) must match the stored ones (or
// the epoch before a timeout abort bumped it); anything else is fenced.
func (c *coordinator) initProducerID(ctx context.Context, r *kmsg.InitProducerIDRequest) (int64, int16, int16) {
	if c == nil {
		return -1, -1, kerr.CoordinatorNotAvailable.Code
	}
	id := *r.TransactionalID
	if id == "" {
		return -1, -1, kerr.InvalidRequest.Code
	}
	if r.TransactionTimeoutMillis <= 0 || time.Duration(r.TransactionTimeoutMillis)*time.Millisecond > maxTxnTimeout {
		return -1, -1, kerr.InvalidTransactionTimeout.Code
	}
	c.mu.Lock()
	e := c.mu.txns[id]
	if e == nil {
		e = &txnEntry{id: id, meta: txnMeta{ProducerID: -1}}
		c.mu.txns[id] = e
	}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	m := &e.meta
	if m.ProducerID < 0 {
		pid, err := c.s.newProducerID()
		if err != nil {
			c.log.Error("cannot allocate producer id", "err", err)
			c.dropIfUnwritten(e)
			return -1, -1, kerr.KafkaStorageError.Code
		}
		next := txnMeta{ProducerID: pid, Epoch: 0, PrevEpoch: -1, TimeoutMs: r.TransactionTimeoutMillis, Status: txnEmpty}
		if err := c.persistLocked(ctx, e, next); err != nil {
			c.log.Error("cannot initialize transactional id", "transactional_id", id, "err", err)
			c.dropIfUnwritten(e)
			return -1, -1, kerr.CoordinatorNotAvailable.Code
		}
		c.mu.Lock()
		c.mu.txns[id] = e // back in, if a failed attempt had dropped it meanwhile
		c.mu.Unlock()
		c.log.Debug("new transactional id", "transactional_id", id, "producer_id", pid)
		return pid, 0, 0
	}
	if r.Version >= 3 && r.ProducerID >= 0 {
		if r.ProducerID != m.ProducerID || (r.ProducerEpoch != m.Epoch && r.ProducerEpoch != m.PrevEpoch) {
			return -1, -1, fenceCode(r.Version, 4).Code
		}
	}
	if err := c.finishPendingLocked(ctx, e); err != nil {
		return -1, -1, err.Code
	}
	if m.Status == txnOngoing {
		if err := c.abortLocked(ctx, e, true); err != nil {
			c.log.Warn("cannot abort the previous producer's transaction", "transactional_id", id, "err", err)
			return -1, -1, kerr.ConcurrentTransactions.Code
		}
		c.ended.WithLabelValues("abort").Inc()
	}
	next := e.meta.clone()
	if next.Epoch >= math.MaxInt16-1 {
		pid, err := c.s.newProducerID()
		if err != nil {
			c.log.Error("cannot allocate producer id", "err", err)
			return -1, -1, kerr.KafkaStorageError.Code
		}
		next.ProducerID, next.Epoch = pid, 0
	} else {
		next.Epoch++
	}
	next.PrevEpoch = -1
	next.TimeoutMs = r.TransactionTimeoutMillis
	next.Status = txnEmpty
	next.Partitions, next.Groups, next.Offsets = nil, nil, nil
	if err := c.persistLocked(ctx, e, next); err != nil {
		c.log.Error("cannot bump the epoch of a transactional id", "transactional_id", id, "err", err)
		return -1, -1, kerr.CoordinatorNotAvailable.Code
	}
	return next.ProducerID, next.Epoch, 0
}

// dropIfUnwritten removes an entry whose first state never became
// durable, so the id does not look known. Requires e.mu.
func (c *coordinator) dropIfUnwritten(e *txnEntry) {
	if e.meta.ProducerID >= 0 {
		return
	}
	c.mu.Lock()
	if c.mu.txns[e.id] == e {
		delete(c.mu.txns, e.id)
	}
	c.mu.Unlock()
}
