package txn

// ListTransactions, versions 0-1.

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 66, Min: 0, Max: 1}, kapi.Typed(
	func(s *Coordinators, r *kapi.Request, req *kmsg.ListTransactionsRequest) kmsg.Response {
		resp := s.handleListTransactions(req)
		// Only the transactional ids the principal may describe, as
		// Kafka lists them.
		if r.Authz != nil {
			resp.TransactionStates = slices.DeleteFunc(resp.TransactionStates, func(st kmsg.ListTransactionsResponseTransactionState) bool {
				return !r.Allowed(kmsg.ACLOperationDescribe, auth.TransactionalID(st.TransactionalID))
			})
		}
		return resp
	}))

func (s *Coordinators) handleListTransactions(r *kmsg.ListTransactionsRequest) *kmsg.ListTransactionsResponse {
	resp := r.ResponseKind().(*kmsg.ListTransactionsResponse)
	resp.Version = r.Version
	coords := s.all()
	if !s.cfg.Clustered && len(coords) == 0 {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	known := map[string]bool{}
	for s := txnEmpty; s <= txnCompleteAbort; s++ {
		known[s.String()] = true
	}
	for _, f := range r.StateFilters {
		if !known[f] {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, f)
		}
	}
	// In cluster mode each broker lists the transactions it coordinates;
	// clients ask every broker.
	now := time.Now().UnixMilli()
	var entries []*txnEntry
	for _, c := range coords {
		now = c.now().UnixMilli()
		entries = append(entries, c.entries()...)
	}
	for _, e := range entries {
		e.mu.Lock()
		m := e.meta
		e.mu.Unlock()
		switch {
		case m.ProducerID < 0:
			continue
		case len(r.StateFilters) > 0 && !slices.Contains(r.StateFilters, m.Status.String()):
			continue
		case len(r.ProducerIDFilters) > 0 && !slices.Contains(r.ProducerIDFilters, m.ProducerID):
			continue
		case r.Version >= 1 && r.DurationFilterMillis >= 0 && (m.Status != txnOngoing || now-m.StartMs < r.DurationFilterMillis):
			continue
		}
		st := kmsg.NewListTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.TransactionState = e.id, m.ProducerID, m.Status.String()
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	slices.SortFunc(resp.TransactionStates, func(a, b kmsg.ListTransactionsResponseTransactionState) int {
		if a.TransactionalID < b.TransactionalID {
			return -1
		}
		if a.TransactionalID > b.TransactionalID {
			return 1
		}
		return 0
	})
	return resp
}
