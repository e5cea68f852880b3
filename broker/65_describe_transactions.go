package broker

// DescribeTransactions, version 0, and ListTransactions, versions 0-1
// (KIP-664): what operators see of the coordinator's transactions
// (kadm's DescribeTransactions/ListTransactions, kafka-transactions.sh).

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (b *Broker) handleDescribeTransactions(r *kmsg.DescribeTransactionsRequest) *kmsg.DescribeTransactionsResponse {
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	resp.Version = r.Version
	for _, id := range r.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		st.ProducerID, st.ProducerEpoch, st.StartTimestamp = -1, -1, -1
		var e *txnEntry
		c, code := b.txnCoordinatorFor(id)
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

func (b *Broker) handleListTransactions(r *kmsg.ListTransactionsRequest) *kmsg.ListTransactionsResponse {
	resp := r.ResponseKind().(*kmsg.ListTransactionsResponse)
	resp.Version = r.Version
	coords := b.txnCoordinators()
	if b.cluster == nil && len(coords) == 0 {
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
