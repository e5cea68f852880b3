package txn

// EndTxn, versions 0-3: commit or abort the producer's transaction. The
// decision is durable (Prepare* written) before markers go to the
// partitions; the answer comes after the markers and the group offsets
// are written, so a producer's next transaction never overlaps this one
// in a partition. A retried EndTxn of a transaction already completed
// the same way succeeds. When a marker cannot be written for a moment
// (no leader) the answer is still success, as Kafka's (the decision is
// durable; the coordinator retries); when another broker refuses it
// (authorization) it is CONCURRENT_TRANSACTIONS until it is written.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 26, Min: 0, Max: 3, Blocking: true}, kapi.Reply(
	func(s *Coordinators, r *kapi.Request, req *kmsg.EndTxnRequest, resp *kmsg.EndTxnResponse) {
		if !r.Allowed(kmsg.ACLOperationWrite, auth.TransactionalID(req.TransactionalID)) {
			resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			return
		}
		resp.ErrorCode = s.withCoordinator(req.TransactionalID, func(c *coordinator) int16 { return c.endTxn(r.Ctx, req) })
	}))

func (c *coordinator) endTxn(ctx context.Context, r *kmsg.EndTxnRequest) int16 {
	ctx, e, unlock, code := c.lockEntry(ctx, r.TransactionalID)
	if code != 0 {
		return code
	}
	defer unlock()
	m := &e.meta
	if m.ProducerID >= 0 && r.ProducerID == m.ProducerID && r.ProducerEpoch != m.Epoch &&
		r.ProducerEpoch == m.PrevEpoch && !r.Commit && (m.Status == txnPrepareAbort || m.Status == txnCompleteAbort) {
		// The coordinator aborted this producer's transaction on timeout
		// (bumping the epoch); its own abort agrees with that.
		if err := c.finishPendingLocked(ctx, e); err != nil {
			return err.Code
		}
		return 0
	}
	if err := checkProducerLocked(e, r.ProducerID, r.ProducerEpoch, r.Version, 2); err != nil {
		return err.Code
	}
	want := txnCompleteAbort
	if r.Commit {
		want = txnCompleteCommit
	}
	switch m.Status {
	case txnOngoing:
		next := m.clone()
		next.Status = txnPrepareAbort
		if r.Commit {
			next.Status = txnPrepareCommit
		}
		if err := c.persistLocked(ctx, e, next); err != nil {
			c.log.Error("cannot end transaction", "transactional_id", e.id, "err", err)
			return kerr.CoordinatorNotAvailable.Code
		}
		err := c.completeLocked(ctx, e)
		if r.Commit {
			c.ended.WithLabelValues("commit").Inc()
		} else {
			c.ended.WithLabelValues("abort").Inc()
		}
		if err != nil && refusedByPeer(err) {
			// Decided and durable, but another broker refused the
			// markers: until an operator grants this broker's
			// principal ClusterAction they are never written and the
			// records never readable, so the producer is not told it
			// is done. It retries CONCURRENT_TRANSACTIONS, and its
			// retry succeeds once the markers are written (by the
			// retry itself or the coordinator's loop).
			return kerr.ConcurrentTransactions.Code
		}
		// Done, or a failure that passes by itself (a partition
		// without a leader for a moment): the loop finishes it, and
		// the producer's next request waits for that.
		return 0
	case txnPrepareCommit, txnPrepareAbort:
		if (m.Status == txnPrepareCommit) != r.Commit {
			return kerr.InvalidTxnState.Code
		}
		if err := c.finishPendingLocked(ctx, e); err != nil {
			return err.Code
		}
		return 0
	case want:
		return 0 // a retry of an EndTxn that completed
	default:
		return kerr.InvalidTxnState.Code
	}
}
