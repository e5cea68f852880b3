package txn

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
)

// refusedLogInterval is how often a transaction whose markers another
// broker keeps refusing is logged again (the attempts are all counted).
const refusedLogInterval = time.Minute

// metrics are the transaction coordinators' metrics, shared by the
// coordinators of a broker.
type metrics struct {
	// ended counts transactions ended, by result.
	ended *prometheus.CounterVec
	// incomplete counts failed attempts at completing a decided
	// transaction, by reason (refusedReason or "error").
	incomplete *prometheus.CounterVec
}

const refusedReason = "refused"

// newMetrics registers the coordinators' metrics; count(states) is how
// many transactions the broker's coordinators hold in those states.
func newMetrics(reg prometheus.Registerer, count func(states ...txnStatus) float64) *metrics {
	m := &metrics{
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_txn_ended_total", Help: "Transactions ended by the coordinator, by result (commit, abort, timeout: aborted because the producer went quiet)."}, []string{"result"}),
		incomplete: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_txn_completion_failures_total",
			Help: "Failed attempts to write a decided transaction's markers and group offsets (retried every second), by reason: refused (another broker refused this broker's principal, which needs ClusterAction on the cluster: nothing is written until it has it), error (anything else, e.g. a partition without a leader)."},
			[]string{"reason"}),
	}
	reg.MustRegister(m.ended, m.incomplete,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_txn_ongoing", Help: "Transactions in progress on the coordinators of this broker."},
			func() float64 { return count(txnOngoing) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_txn_completing", Help: "Transactions decided (commit or abort) whose markers are not all written yet; one that stays is stuck (see simtel_broker_txn_completion_failures_total)."},
			func() float64 { return count(txnPrepareCommit, txnPrepareAbort) }))
	return m
}

// refusedByPeer reports whether a completion failed because another
// broker refused this one's request for want of authorization: no retry
// helps until an operator grants the brokers' principal ClusterAction
// (or makes it a superuser).
func refusedByPeer(err error) bool {
	return errors.Is(err, kerr.ClusterAuthorizationFailed)
}

// noteIncomplete counts a failed completion of e's decided transaction
// and logs it: a refusal at error level, once in refusedLogInterval per
// transaction (Kafka's coordinator, too, retries a marker forever and only
// logs); anything else as a warning each time. Requires e.mu.
func (c *coordinator) noteIncomplete(ctx context.Context, e *txnEntry, err error) {
	if errors.Is(ctx.Err(), context.Canceled) {
		return // stopping: the next coordinator finishes it
	}
	if !refusedByPeer(err) {
		c.incomplete.WithLabelValues("error").Inc()
		c.log.Warn("cannot complete transaction yet, will retry", "transactional_id", e.id, "err", err)
		return
	}
	c.incomplete.WithLabelValues(refusedReason).Inc()
	if now := c.now(); e.refusedLogged.IsZero() || now.Sub(e.refusedLogged) >= refusedLogInterval {
		e.refusedLogged = now
		c.log.Error("another broker refuses this transaction's markers: its records stay unreadable and the producer waits until the brokers' principal has ClusterAction on the cluster (or is a superuser); retrying",
			"transactional_id", e.id, "state", e.meta.Status.String(), "producer_id", e.meta.ProducerID, "err", err)
	}
}
