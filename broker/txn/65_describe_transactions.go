package txn

// DescribeTransactions, version 0, and ListTransactions, versions 0-1
// (KIP-664): what operators see of the coordinator's transactions
// (kadm's DescribeTransactions/ListTransactions, kafka-transactions.sh).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 65, Min: 0, Max: 0}, kapi.Typed(
	func(s *Coordinators, r *kapi.Request, req *kmsg.DescribeTransactionsRequest) kmsg.Response {
		if r.Authz == nil {
			return s.handleDescribeTransactions(req)
		}
		// Describe on each transactional id, as Kafka.
		var allowed []string
		var denied []kmsg.DescribeTransactionsResponseTransactionState
		for _, id := range req.TransactionalIDs {
			if r.Allowed(kmsg.ACLOperationDescribe, auth.TransactionalID(id)) {
				allowed = append(allowed, id)
				continue
			}
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.ErrorCode = id, kerr.TransactionalIDAuthorizationFailed.Code
			st.ProducerID, st.ProducerEpoch, st.StartTimestamp = -1, -1, -1
			denied = append(denied, st)
		}
		sub := *req
		sub.TransactionalIDs = allowed
		resp := s.handleDescribeTransactions(&sub)
		resp.TransactionStates = append(resp.TransactionStates, denied...)
		return resp
	}))

func (s *Coordinators) handleDescribeTransactions(r *kmsg.DescribeTransactionsRequest) *kmsg.DescribeTransactionsResponse {
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	resp.Version = r.Version
	for _, id := range r.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		st.ProducerID, st.ProducerEpoch, st.StartTimestamp = -1, -1, -1
		var e *txnEntry
		c, code := s.coordinatorFor(id)
		if c != nil {
			e = c.lookup(id)
		}
		if code != 0 {
			st.ErrorCode = code
		} else if e == nil {
			st.ErrorCode = kerr.TransactionalIDNotFound.Code
		} else {
			e.mu.Lock()
			m := e.meta.clone()
			e.mu.Unlock()
			if m.ProducerID < 0 {
				st.ErrorCode = kerr.TransactionalIDNotFound.Code
			} else {
				st.State = m.Status.String()
				st.TimeoutMillis = m.TimeoutMs
				st.ProducerID, st.ProducerEpoch = m.ProducerID, m.Epoch
				if m.Status != txnEmpty {
					st.StartTimestamp = m.StartMs
				}
				for _, tp := range sortedTPs(m.Partitions) {
					if n := len(st.Topics); n == 0 || st.Topics[n-1].Topic != tp.Topic {
						t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
						t.Topic = tp.Topic
						st.Topics = append(st.Topics, t)
					}
					last := &st.Topics[len(st.Topics)-1]
					last.Partitions = append(last.Partitions, tp.Partition)
				}
			}
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp
}
