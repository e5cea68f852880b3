package pgwire

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the server's Prometheus metrics.
type Metrics struct {
	connections      prometheus.Gauge
	connectionsTotal prometheus.Counter
	authFailures     prometheus.Counter
	cancels          prometheus.Counter
	engines          prometheus.Counter
	queries          *prometheus.CounterVec
	errors           *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	rows             prometheus.Counter
	bytes            prometheus.Counter
}

// NewMetrics makes the metrics; Register exposes them.
func NewMetrics() *Metrics {
	const ns, sub = "simtel", "lake_pg"
	return &Metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "connections",
			Help: "Open PostgreSQL client connections (authenticated)."}),
		connectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "connections_total",
			Help: "PostgreSQL client connections accepted after authentication."}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "auth_failures_total",
			Help: "Connections refused at authentication."}),
		cancels: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "cancel_requests_total",
			Help: "Cancel requests that matched a connection."}),
		engines: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "engines_opened_total",
			Help: "DuckDB engines opened over pruned lake objects (a connection reuses its engine while its statements read the same objects)."}),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "queries_total",
			Help: "Statements run, by kind: lake (reads lake tables), catalog (schema and client catalog queries), session (SET, SHOW, BEGIN...)."}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "errors_total",
			Help: "Error responses sent, by SQLSTATE."}, []string{"sqlstate"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "query_duration_seconds",
			Help:    "Time to run a statement and send its rows, by kind (lake or catalog).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"kind"}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rows_total",
			Help: "Rows returned to clients."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "bytes_total",
			Help: "Bytes of row values returned to clients."}),
	}
}

// Register adds the metrics to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.connections, m.connectionsTotal, m.authFailures, m.cancels, m.engines,
		m.queries, m.errors, m.duration, m.rows, m.bytes} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
