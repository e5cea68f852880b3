package broker

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/internal/metricsrv"
)

// metrics are the broker's Prometheus series, on a registry of its own so
// several brokers in one process (tests, simtel dev) do not collide.
// The connection server (package server) registers the request, byte,
// connection and authentication series on the same registry.
type metrics struct {
	reg             *prometheus.Registry
	producedBytes   prometheus.Counter
	producedRecords prometheus.Counter
	produceErrors   *prometheus.CounterVec
	fetchedBytes    prometheus.Counter
	expiredPIDs     prometheus.Counter
	// placement: see reassign.go.
	snapshotInstalls prometheus.Counter
	reassignments    *prometheus.CounterVec
	// dormant groups: see dormant.go.
	dormantSleeps, dormantWakes prometheus.Counter
}

func newMetrics(b *Broker) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.producedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_produced_bytes_total", Help: "Record batch bytes appended."})
	m.producedRecords = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_produced_records_total", Help: "Records appended."})
	m.produceErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_produce_errors_total", Help: "Partition produces refused, by error."}, []string{"error"})
	m.fetchedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_fetched_bytes_total", Help: "Record batch bytes served to fetches."})
	m.expiredPIDs = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_producers_expired_total",
		Help: "Idempotent producers whose state a partition here forgot after --producer-id-expiration without a batch (per partition; including those a partition's rebuild from its log at startup left out)."})
	for _, c := range []prometheus.Collector{m.producedBytes, m.producedRecords, m.produceErrors, m.fetchedBytes, m.expiredPIDs} {
		f(c)
	}
	m.registerPlacement(b)
	m.dormantSleeps = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_dormant_sleeps_total",
		Help: "Idle replicated partitions this broker, as their leader, put to sleep (--replica-dormant-after)."})
	m.dormantWakes = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_dormant_wakes_total",
		Help: "Dormant partitions this broker woke to lead again for a write, a transaction marker or a reassignment."})
	f(m.dormantSleeps)
	f(m.dormantWakes)
	f(&stateCollector{b: b})
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// stateCollector reports partition offsets and sizes and group lag at
// scrape time, so nothing is kept up to date between scrapes.
type stateCollector struct{ b *Broker }

var (
	descLogStart = prometheus.NewDesc("simtel_broker_partition_log_start_offset", "First offset still in the log.", []string{"topic", "partition"}, nil)
	descHW       = prometheus.NewDesc("simtel_broker_partition_high_watermark", "Committed (durable) end offset.", []string{"topic", "partition"}, nil)
	descSize     = prometheus.NewDesc("simtel_broker_partition_size_bytes", "Bytes of all segments.", []string{"topic", "partition"}, nil)
	descInSync   = prometheus.NewDesc("simtel_broker_partition_in_sync", "Replicated partitions: 1 while this broker's replica is a raft voter that has applied all its leader last said was committed (the leader's once it has applied what earlier leaders committed), else 0.", []string{"topic", "partition"}, nil)
	descLag      = prometheus.NewDesc("simtel_broker_group_lag", "High watermark minus committed offset.", []string{"group", "topic", "partition"}, nil)
	descCommit   = prometheus.NewDesc("simtel_broker_group_committed_offset", "Committed offset.", []string{"group", "topic", "partition"}, nil)
	descTopics   = prometheus.NewDesc("simtel_broker_topics", "Topics.", nil, nil)
	descPIDs     = prometheus.NewDesc("simtel_broker_producers", "Idempotent producer states held by the partitions this broker serves, summed over them (a producer writing to 3 partitions counts 3).", nil, nil)
	descDormant  = prometheus.NewDesc("simtel_broker_partitions_dormant", "Replicas of replicated partitions here whose raft group sleeps (--replica-dormant-after).", nil, nil)
	descCoords   = prometheus.NewDesc("simtel_broker_group_coordinators", "Group coordinators this broker runs: 1 on a single node; in cluster mode one per partition of __consumer_offsets it leads and has loaded.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLogStart, descHW, descSize, descInSync, descLag, descCommit, descTopics, descCoords, descPIDs, descDormant} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	topics := c.b.allTopics()
	ch <- prometheus.MustNewConstMetric(descTopics, prometheus.GaugeValue, float64(len(topics)))
	pids, dormant := 0, 0
	for _, t := range topics {
		for _, p := range t.parts {
			if p == nil {
				continue // cluster mode: led by another broker
			}
			n, _ := p.Producers()
			pids += n
			idx := strconv.Itoa(int(p.Index()))
			// In sync is read before the high watermark and size, so a
			// scrape that says in sync shows them as of that moment or
			// later: read after, a replica catching up meanwhile showed
			// in sync beside its old high watermark.
			in := 0.0
			if p.Replicated() && p.InSync() {
				in = 1
			}
			ch <- prometheus.MustNewConstMetric(descLogStart, prometheus.GaugeValue, float64(p.Log().StartOffset()), t.name, idx)
			ch <- prometheus.MustNewConstMetric(descHW, prometheus.GaugeValue, float64(p.HighWatermark()), t.name, idx)
			ch <- prometheus.MustNewConstMetric(descSize, prometheus.GaugeValue, float64(p.Log().Size()), t.name, idx)
			if p.Replicated() {
				ch <- prometheus.MustNewConstMetric(descInSync, prometheus.GaugeValue, in, t.name, idx)
			}
			if p.Dormant() {
				dormant++
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(descPIDs, prometheus.GaugeValue, float64(pids))
	ch <- prometheus.MustNewConstMetric(descDormant, prometheus.GaugeValue, float64(dormant))
	coords := c.b.servedCoordinators()
	ch <- prometheus.MustNewConstMetric(descCoords, prometheus.GaugeValue, float64(len(coords)))
	for _, g := range coords {
		c.collectLags(ch, g)
	}
}

// producersExpired is partition.Config.ProducersExpired.
func (m *metrics) producersExpired(n int) { m.expiredPIDs.Add(float64(n)) }

func (c *stateCollector) collectLags(ch chan<- prometheus.Metric, g *group.Coordinator) {
	for _, l := range g.Lags() {
		idx := strconv.Itoa(int(l.Partition))
		ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(l.Committed), l.Group, l.Topic, idx)
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(l.Lag), l.Group, l.Topic, idx)
	}
}

func (b *Broker) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(b.metrics.reg, promhttp.HandlerOpts{}))
	metricsrv.Pprof(mux)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !b.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	return mux
}
