package broker

import "github.com/prometheus/client_golang/prometheus"

// registerPlacement adds the series of replica placement and catch-up.
func (m *metrics) registerPlacement(b *Broker) {
	m.snapshotInstalls = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_replica_snapshot_installs_total",
		Help: "Replicated partitions that caught up by installing the data of their leader's snapshot."})
	m.reassignments = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_replica_membership_changes_total",
		Help: "Raft membership changes this broker made as partition leader, by kind (add, promote, remove, transfer) and result."}, []string{"kind", "result"})
	m.reg.MustRegister(m.snapshotInstalls, m.reassignments)
}
