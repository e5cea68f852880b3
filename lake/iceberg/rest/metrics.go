package rest

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the server's Prometheus metrics.
type Metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	authFailures *prometheus.CounterVec
}

// NewMetrics makes the metrics; Register exposes them.
func NewMetrics() *Metrics {
	const ns, sub = "simtel", "lake_iceberg"
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Iceberg REST catalog requests answered, by route (the spec's operation, e.g. loadTable; other: no route) and HTTP status code."},
			[]string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "request_duration_seconds",
			Help:    "Time to answer an Iceberg REST catalog request, by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9)}, []string{"route"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "auth_failures_total",
			Help: "Iceberg REST catalog requests refused for their credentials, by reason (missing, malformed, wrong)."},
			[]string{"reason"}),
	}
	for _, r := range []string{authMissing, authMalformed, authWrong} {
		m.authFailures.WithLabelValues(r)
	}
	return m
}

// Register adds the metrics to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.authFailures} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
