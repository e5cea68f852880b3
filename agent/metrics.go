package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/simtel/simtel/agent/producer"
)

type metrics struct {
	reg          *prometheus.Registry
	received     *prometheus.CounterVec
	parseErrors  *prometheus.CounterVec
	spooled      prometheus.Counter
	spoolErrors  prometheus.Counter
	sent         prometheus.Counter
	dropped      *prometheus.CounterVec
	batchLatency prometheus.Histogram
	httpRequests *prometheus.CounterVec
	runFromTag   *prometheus.CounterVec
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.received = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_agent_samples_received_total", Help: "Lines received, good and bad, by listener."}, []string{"listener"})
	m.parseErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_agent_parse_errors_total", Help: "Lines refused as malformed or too long, by listener."}, []string{"listener"})
	m.spooled = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_agent_samples_spooled_total", Help: "Samples accepted and written to the spool."})
	m.spoolErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_agent_spool_errors_total", Help: "Spool appends that failed (disk full, timeout waiting for space)."})
	m.sent = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_agent_samples_sent_total", Help: "Samples acknowledged by the broker."})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_agent_samples_dropped_total", Help: "Samples lost, by reason (spool_full_drop_oldest, spool_error, rejected_by_broker, field_type_conflict: lines refused because a field had another type before in the run)."}, []string{"reason"})
	m.batchLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "simtel_agent_broker_latency_seconds", Help: "Time from reading a spool batch to the broker acknowledging all of it.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_agent_http_requests_total", Help: "HTTP write requests by path and status code."}, []string{"path", "code"})
	m.runFromTag = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_agent_samples_run_from_tag_total", Help: "Samples accepted whose run came from the --run-from-tag tag (Slurm's profiler: job), by listener."}, []string{"listener"})
	for _, c := range []prometheus.Collector{m.received, m.parseErrors, m.spooled, m.spoolErrors, m.sent, m.dropped, m.batchLatency, m.httpRequests, m.runFromTag} {
		m.reg.MustRegister(c)
	}
	if a.types != nil {
		m.reg.MustRegister(&fieldTypesCollector{ft: a.types})
	}
	m.reg.MustRegister(&spoolCollector{a: a}, &policyCollector{a: a}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// delivered counts a spool read the broker has (producer.Config.OnDelivery).
func (m *metrics) delivered(d producer.Delivery) {
	m.sent.Add(float64(d.Sent))
	if d.Dropped > 0 {
		m.dropped.WithLabelValues("rejected_by_broker").Add(float64(d.Dropped))
	}
	m.batchLatency.Observe(d.Latency.Seconds())
}

var (
	descSpoolBytes   = prometheus.NewDesc("simtel_agent_spool_bytes", "Bytes of spool files on disk.", nil, nil)
	descSpoolPending = prometheus.NewDesc("simtel_agent_spool_pending_samples", "Samples spooled and not yet acknowledged by the broker.", nil, nil)
	descSpoolDropped = prometheus.NewDesc("simtel_agent_spool_dropped_samples_total", "Samples dropped by the drop-oldest policy.", nil, nil)
	descSpoolSyncs   = prometheus.NewDesc("simtel_agent_spool_syncs_total", "fdatasyncs of spool segments: ticks that found samples unacknowledged by the broker for a tick, and shutdown.", nil, nil)
	descSpoolSyncErr = prometheus.NewDesc("simtel_agent_spool_sync_errors_total", "Failed spool fdatasyncs and cursor writes.", nil, nil)
)

type spoolCollector struct{ a *Agent }

func (c *spoolCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, descSpoolBytes, descSpoolPending, descSpoolDropped, descSpoolSyncs, descSpoolSyncErr)
}

func (c *spoolCollector) Collect(ch chan<- prometheus.Metric) {
	if c.a.spool == nil {
		return
	}
	st := c.a.spool.Stats()
	ch <- prometheus.MustNewConstMetric(descSpoolBytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(descSpoolPending, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(descSpoolDropped, prometheus.CounterValue, float64(st.Dropped))
	ch <- prometheus.MustNewConstMetric(descSpoolSyncs, prometheus.CounterValue, float64(st.DataSyncs))
	ch <- prometheus.MustNewConstMetric(descSpoolSyncErr, prometheus.CounterValue, float64(st.SyncErrors))
}

// Gatherer exposes the agent's metrics to an embedding process (simtel
// dev's summary line) without going through HTTP.
func (a *Agent) Gatherer() prometheus.Gatherer { return a.metrics.reg }

var (
	descFieldTypes             = prometheus.NewDesc("simtel_agent_field_types", "Fields whose type the agent remembers (per run and measurement) to refuse type conflicts.", nil, nil)
	descFieldTypesBytes        = prometheus.NewDesc("simtel_agent_field_types_bytes", "Memory counted for the remembered field types, bounded by --field-types-memory.", nil, nil)
	descFieldTypesForgotten    = prometheus.NewDesc("simtel_agent_field_types_forgotten_runs_total", "Runs whose field types were forgotten to make room for another run's.", nil, nil)
	descFieldTypesUnremembered = prometheus.NewDesc("simtel_agent_field_types_unremembered_total", "New fields not remembered because their run alone fills the memory (their lines are accepted unchecked).", nil, nil)
)

type fieldTypesCollector struct{ ft *fieldTypes }

func (c *fieldTypesCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, descFieldTypes, descFieldTypesBytes, descFieldTypesForgotten, descFieldTypesUnremembered)
}

// describe sends a collector's descriptions, the same ones its Collect
// uses, so that the registry can check them.
func describe(ch chan<- *prometheus.Desc, descs ...*prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

func (c *fieldTypesCollector) Collect(ch chan<- prometheus.Metric) {
	fields, bytes := c.ft.stats()
	ch <- prometheus.MustNewConstMetric(descFieldTypes, prometheus.GaugeValue, float64(fields))
	ch <- prometheus.MustNewConstMetric(descFieldTypesBytes, prometheus.GaugeValue, float64(bytes))
	ch <- prometheus.MustNewConstMetric(descFieldTypesForgotten, prometheus.CounterValue, float64(c.ft.forgottenRuns.Load()))
	ch <- prometheus.MustNewConstMetric(descFieldTypesUnremembered, prometheus.CounterValue, float64(c.ft.unremembered.Load()))
}
