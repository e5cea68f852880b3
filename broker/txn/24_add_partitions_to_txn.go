package txn

// AddPartitionsToTxn, versions 0-4: a transactional producer names the
// partitions it is about to write in its transaction. The first call
// after Empty or Complete* starts a new transaction (its timeout counts
// from here). v4 batches several transactional ids in one request (KIP-890
// part 1); a transaction marked VerifyOnly is only checked: each partition
// must already be in its ongoing transaction (INVALID_TXN_STATE if not).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 24, Min: 0, Max: 4, Blocking: true}, kapi.Typed(
	func(s *Coordinators, r *kapi.Request, req *kmsg.AddPartitionsToTxnRequest) kmsg.Response {
		if r.Authz != nil {
			if resp := addPartitionsDenied(r, req); resp != nil {
				return resp
			}
		}
		return s.handleAddPartitionsToTxn(r.Ctx, req)
	}))

// addPartitionsDenied is the answer to a request the authorizer refuses,
// nil if it allows it. v4 is sent by brokers (KIP-890): ClusterAction on
// the cluster. v0-v3 need Write on the transactional id, and on every
// topic: without it on some, those are answered
// TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED, as
// Kafka does.
func addPartitionsDenied(r *kapi.Request, req *kmsg.AddPartitionsToTxnRequest) *kmsg.AddPartitionsToTxnResponse {
	if req.Version >= 4 {
		if r.Allowed(kmsg.ACLOperationClusterAction, auth.Cluster) {
			return nil
		}
		resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		resp.Version, resp.ErrorCode = req.Version, kerr.ClusterAuthorizationFailed.Code
		return resp
	}
	if !r.Allowed(kmsg.ACLOperationWrite, auth.TransactionalID(req.TransactionalID)) {
		return verifyError(req, kerr.TransactionalIDAuthorizationFailed.Code)
	}
	denied := kapi.DeniedTopics(r, kmsg.ACLOperationWrite, req.Topics, func(t *kmsg.AddPartitionsToTxnRequestTopic) string { return t.Topic })
	if denied == nil {
		return nil
	}
	resp := addPartitionsResponse(req, func(i, _ int) int16 {
		if denied[req.Topics[i].Topic] {
			return kerr.TopicAuthorizationFailed.Code
		}
		return kerr.OperationNotAttempted.Code
	})
	resp.Version = req.Version
	return resp
}

func (s *Coordinators) handleAddPartitionsToTxn(ctx context.Context, r *kmsg.AddPartitionsToTxnRequest) *kmsg.AddPartitionsToTxnResponse {
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	resp.Version = r.Version
	if r.Version >= 4 {
		for _, tx := range r.Transactions {
			one := kmsg.NewPtrAddPartitionsToTxnRequest()
			one.Version = 3 // the single-transaction form, same error codes
			one.TransactionalID, one.ProducerID, one.ProducerEpoch = tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch
			for _, t := range tx.Topics {
				rt := kmsg.NewAddPartitionsToTxnRequestTopic()
				rt.Topic, rt.Partitions = t.Topic, t.Partitions
				one.Topics = append(one.Topics, rt)
			}
			var sub *kmsg.AddPartitionsToTxnResponse
			if c, code := s.coordinatorFor(tx.TransactionalID); tx.VerifyOnly && code != 0 {
				sub = verifyError(one, code)
			} else if tx.VerifyOnly {
				sub = c.verifyPartitions(one)
			} else {
				sub = s.handleAddPartitionsToTxn(ctx, one)
			}
			rtx := kmsg.NewAddPartitionsToTxnResponseTransaction()
			rtx.TransactionalID = tx.TransactionalID
			for _, st := range sub.Topics {
				tt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
				tt.Topic = st.Topic
				for _, sp := range st.Partitions {
					tp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
					tp.Partition, tp.ErrorCode = sp.Partition, sp.ErrorCode
					tt.Partitions = append(tt.Partitions, tp)
				}
				rtx.Topics = append(rtx.Topics, tt)
			}
			resp.Transactions = append(resp.Transactions, rtx)
		}
		return resp
	}
	codes := newCodes(r.Topics, func(t kmsg.AddPartitionsToTxnRequestTopic) int { return len(t.Partitions) })
	if c, code := s.coordinatorFor(r.TransactionalID); code != 0 {
		setCodes(codes, code)
	} else if code := c.addPartitions(ctx, r, codes); code != 0 {
		setCodes(codes, code)
	}
	return addPartitionsResponse(r, func(i, j int) int16 { return codes[i][j] })
}

// addPartitionsResponse answers every partition of r (the single
// transaction form, v0-v3) with code(i, j) for partition j of topic i.
func addPartitionsResponse(r *kmsg.AddPartitionsToTxnRequest, code func(i, j int) int16) *kmsg.AddPartitionsToTxnResponse {
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	for i, t := range r.Topics {
		st := kmsg.NewAddPartitionsToTxnResponseTopic()
		st.Topic = t.Topic
		for j, p := range t.Partitions {
			sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			sp.Partition, sp.ErrorCode = p, code(i, j)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// addPartitions returns an error code for every partition, or fills codes
// per partition (unknown ones fail the request, the others are then not
// attempted, as in Kafka).
func (c *coordinator) addPartitions(ctx context.Context, r *kmsg.AddPartitionsToTxnRequest, codes [][]int16) int16 {
	if c == nil {
		return kerr.CoordinatorNotAvailable.Code
	}
	e := c.lookup(r.TransactionalID)
	if e == nil {
		return kerr.InvalidProducerIDMapping.Code
	}
	var add []txnTP
	bad := false
	for i, t := range r.Topics {
		for j, p := range t.Partitions {
			switch {
			case !c.s.b.PartitionKnown(t.Topic, p):
				codes[i][j] = kerr.UnknownTopicOrPartition.Code
				bad = true
			case t.Topic == offsetsTopic || t.Topic == StateTopic:
				codes[i][j] = kerr.InvalidTopicException.Code
				bad = true
			default:
				add = append(add, txnTP{t.Topic, p})
			}
		}
	}
	if bad {
		for _, tc := range codes {
			for j := range tc {
				if tc[j] == 0 {
					tc[j] = kerr.OperationNotAttempted.Code
				}
			}
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	next, code := c.ongoingLocked(ctx, e, r.ProducerID, r.ProducerEpoch, r.Version)
	if code != 0 {
		return code
	}
	changed := next.Status != e.meta.Status
	for _, tp := range add {
		if !next.hasPartition(tp) {
			next.Partitions = append(next.Partitions, tp)
			changed = true
		}
	}
	if !changed {
		return 0
	}
	if err := c.persistLocked(ctx, e, next); err != nil {
		c.log.Error("cannot add partitions to transaction", "transactional_id", e.id, "err", err)
		return kerr.CoordinatorNotAvailable.Code
	}
	return 0
}

// verifyError answers a VerifyOnly transaction with code for every
// partition (this broker does not coordinate its id).
func verifyError(r *kmsg.AddPartitionsToTxnRequest, code int16) *kmsg.AddPartitionsToTxnResponse {
	return addPartitionsResponse(r, func(int, int) int16 { return code })
}

// verifyPartitions answers a VerifyOnly transaction of a v4 request in the
// v3 response form: 0 for each partition already in the ongoing
// transaction of this producer id and epoch.
func (c *coordinator) verifyPartitions(r *kmsg.AddPartitionsToTxnRequest) *kmsg.AddPartitionsToTxnResponse {
	code := func(tp txnTP) int16 { return kerr.CoordinatorNotAvailable.Code }
	if c != nil {
		if e := c.lookup(r.TransactionalID); e == nil {
			code = func(txnTP) int16 { return kerr.InvalidProducerIDMapping.Code }
		} else {
			e.mu.Lock()
			err := checkProducerLocked(e, r.ProducerID, r.ProducerEpoch, r.Version, 2)
			m := e.meta.clone()
			e.mu.Unlock()
			code = func(tp txnTP) int16 {
				switch {
				case err != nil:
					return err.Code
				case m.Status != txnOngoing || !m.hasPartition(tp):
					return kerr.InvalidTxnState.Code
				}
				return 0
			}
		}
	}
	return addPartitionsResponse(r, func(i, j int) int16 {
		t := r.Topics[i]
		return code(txnTP{t.Topic, t.Partitions[j]})
	})
}
