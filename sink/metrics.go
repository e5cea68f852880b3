package sink

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the sink's Prometheus series (names are a contract with the
// dashboards; see docs/sink-operations.md).
type metrics struct {
	consumed          *prometheus.CounterVec
	rowsWritten       *prometheus.CounterVec
	objsWritten       *prometheus.CounterVec
	bytesWritten      prometheus.Counter
	deadLetters       *prometheus.CounterVec
	flushes           *prometheus.CounterVec
	flushTime         prometheus.Histogram
	icebergCommitTime prometheus.Histogram // empty without an Iceberg catalog
	storeErrors       prometheus.Counter
	buffered          prometheus.Gauge
	lag               *prometheus.GaugeVec
	lastFlush         prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		consumed:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_sink_records_consumed_total", Help: "Kafka records consumed, by topic."}, []string{"topic"}),
		rowsWritten:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_sink_rows_written_total", Help: "Rows in committed objects, by kind (telemetry, raw, deadletter)."}, []string{"kind"}),
		objsWritten:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_sink_objects_written_total", Help: "Objects in committed flushes, by kind."}, []string{"kind"}),
		bytesWritten: prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_sink_bytes_written_total", Help: "Parquet bytes in committed flushes."}),
		deadLetters:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_sink_deadletter_records_total", Help: "Records that went to dead-letter objects, by topic."}, []string{"topic"}),
		flushes:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_sink_flushes_total", Help: "Committed flushes, by trigger (size, rows, age, run, revoke, shutdown, redo)."}, []string{"reason"}),
		flushTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "simtel_sink_flush_duration_seconds", Help: "Time from the start of a flush to its Kafka commit (with Iceberg: to its catalog commit; the batch's Iceberg and Kafka commits follow), retries included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		icebergCommitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "simtel_sink_iceberg_commit_duration_seconds", Help: "Time to commit a batch of flushes to the Iceberg tables (one snapshot per table), retries included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_sink_store_errors_total", Help: "Failed object store or catalog operations (each is retried)."}),
		buffered:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "simtel_sink_buffered_rows", Help: "Records consumed and not yet flushed."}),
		lag:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "simtel_sink_lag_records", Help: "Records between the partition's high watermark and the sink's position."}, []string{"topic", "partition"}),
		lastFlush:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "simtel_sink_last_flush_timestamp_seconds", Help: "Unix time of the last committed flush."}),
	}
	for _, c := range []prometheus.Collector{m.consumed, m.rowsWritten, m.objsWritten, m.bytesWritten, m.deadLetters, m.flushes, m.flushTime, m.icebergCommitTime, m.storeErrors, m.buffered, m.lag, m.lastFlush} {
		reg.MustRegister(c)
	}
	return m
}

// registerProcessCollectors adds the Go and process collectors to a
// registry the sink created itself.
func registerProcessCollectors(reg *prometheus.Registry) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// passMetrics makes the metrics of one kind of background pass
// (compaction, retention, Iceberg expiry), named
// simtel_sink_<prefix>_<name>, each registered on reg as it is made.
type passMetrics struct {
	prefix string
	reg    prometheus.Registerer
}

func (p passMetrics) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_sink_" + p.prefix + "_" + name, Help: help})
	p.reg.MustRegister(c)
	return c
}

func (p passMetrics) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "simtel_sink_" + p.prefix + "_" + name, Help: help})
	p.reg.MustRegister(g)
	return g
}

// duration is the histogram of the time of one pass.
func (p passMetrics) duration(help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "simtel_sink_" + p.prefix + "_duration_seconds", Help: help,
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
	p.reg.MustRegister(h)
	return h
}
