package rollup

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type metrics struct {
	samples      prometheus.Counter
	late         prometheus.Counter
	overflow     prometheus.Counter
	decodeErrors prometheus.Counter
	nonfinite    prometheus.Counter
	windows      *prometheus.CounterVec
	// windowsAt are windows' counters by resolution, looked up once.
	windowsAt [levels]prometheus.Counter
	txns      *prometheus.CounterVec
	series    prometheus.Gauge
	loads     prometheus.Counter
	partials  prometheus.Counter
	summaries prometheus.Counter
	// Stage 2's merged run summaries (merger.go).
	summaryRuns      prometheus.Gauge
	summaryEvictions prometheus.Counter
	summaryRebuilds  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		samples: counter("simtel_rollup_samples_total",
			"Samples added to their windows (counted again when an aborted transaction is redone)."),
		late: counter("simtel_rollup_late_samples_total",
			"Samples dropped because their 10 s window had closed (later than --allowed-lateness)."),
		overflow: counter("simtel_rollup_series_overflow_samples_total",
			"Samples of new series dropped because the worker held --max-series series."),
		decodeErrors: counter("simtel_rollup_decode_errors_total",
			"Records that are not a canonical line-protocol line."),
		nonfinite: counter("simtel_rollup_nonfinite_values_total",
			"NaN and infinite field values, counted in <field>_nonfinite and kept out of the statistics."),
		windows: counterVec("simtel_rollup_windows_total", "resolution",
			"Windows emitted, by resolution (counted again when an aborted transaction is redone)."),
		txns: counterVec("simtel_rollup_transactions_total", "result",
			"Transactions ended, by result (committed or aborted)."),
		series: gauge("simtel_rollup_series",
			"Series with open windows held by the worker."),
		loads: counter("simtel_rollup_state_loads_total",
			"Partitions whose open windows were read back from the state topic (assignment, restart, abort)."),
		partials: counter("simtel_rollup_run_partials_total",
			"Aggregates of ended runs produced per input partition (counted again when an aborted transaction is redone)."),
		summaries: counter("simtel_rollup_run_summaries_total",
			"Run summaries produced, amendments included (counted again when an aborted transaction is redone)."),
		summaryRuns: gauge("simtel_rollup_summary_runs",
			"Run summaries held merged in memory (at most --max-summary-runs after each commit)."),
		summaryEvictions: counter("simtel_rollup_summary_evictions_total",
			"Run summaries forgotten from memory, least recently amended first, to stay within --max-summary-runs."),
		summaryRebuilds: counter("simtel_rollup_summary_rebuilds_total",
			"Reads of a partials partition for the earlier partials of runs not held (new, forgotten, or after a restart)."),
	}
	reg.MustRegister(m.samples, m.late, m.overflow, m.decodeErrors, m.nonfinite, m.windows, m.txns, m.series, m.loads, m.partials, m.summaries, m.summaryRuns, m.summaryEvictions, m.summaryRebuilds)
	for i, r := range Resolutions {
		m.windowsAt[i] = m.windows.WithLabelValues(r.Name)
	}
	m.txns.WithLabelValues("committed")
	m.txns.WithLabelValues("aborted")
	return m
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func counterVec(name, label, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}

// newRegistry is a registry with the Go and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
