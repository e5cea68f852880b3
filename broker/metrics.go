package broker

import (
	"net/http"
	"net/http/pprof"
	"reflect"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/group"
)

// metrics are the broker's Prometheus series, on a registry of its own so
// several brokers in one process (tests, simtel dev) do not collide.
type metrics struct {
	reg             *prometheus.Registry
	requests        *prometheus.CounterVec
	requestErrors   *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	bytesIn         *prometheus.CounterVec
	bytesOut        *prometheus.CounterVec
	connections     prometheus.Gauge
	badFrames       prometheus.Counter
	producedBytes   prometheus.Counter
	producedRecords prometheus.Counter
	produceErrors   *prometheus.CounterVec
	fetchedBytes    prometheus.Counter
	// authFailures counts refused authentications: TLS handshakes
	// (mechanism "tls") and SASL exchanges, by reason.
	authFailures *prometheus.CounterVec
	// placement: see reassign.go.
	snapshotInstalls prometheus.Counter
	reassignments    *prometheus.CounterVec
}

func newMetrics(b *Broker) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_requests_total", Help: "Kafka requests answered, by API."}, []string{"api"})
	m.requestErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_request_errors_total", Help: "Error codes in responses (top level and per partition), by API and error."}, []string{"api", "error"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "simtel_broker_request_duration_seconds",
		Help:    "Time from reading a request to its response being ready, by API (produce includes the commit, fetch the long poll).",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
	}, []string{"api"})
	m.bytesIn = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_request_bytes_total", Help: "Request bytes read, by API."}, []string{"api"})
	m.bytesOut = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_response_bytes_total", Help: "Response bytes written, by API."}, []string{"api"})
	m.connections = prometheus.NewGauge(prometheus.GaugeOpts{Name: "simtel_broker_connections", Help: "Open client connections."})
	m.badFrames = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_bad_requests_total", Help: "Malformed, oversized or unsupported requests; each closed its connection."})
	m.producedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_produced_bytes_total", Help: "Record batch bytes appended."})
	m.producedRecords = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_produced_records_total", Help: "Records appended."})
	m.produceErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_produce_errors_total", Help: "Partition produces refused, by error."}, []string{"error"})
	m.fetchedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_fetched_bytes_total", Help: "Record batch bytes served to fetches."})
	m.authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_auth_failures_total", Help: "Refused authentications, by mechanism (tls or the SASL mechanism) and reason; each closed its connection or answered an authentication error."}, []string{"mechanism", "reason"})
	for _, c := range []prometheus.Collector{m.requests, m.requestErrors, m.latency, m.bytesIn, m.bytesOut, m.connections, m.badFrames, m.producedBytes, m.producedRecords, m.produceErrors, m.fetchedBytes, m.authFailures} {
		f(c)
	}
	m.registerPlacement(b)
	f(&stateCollector{b: b})
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observeRequest(p *pending, api string) {
	m.requests.WithLabelValues(api).Inc()
	m.latency.WithLabelValues(api).Observe(time.Since(p.start).Seconds())
	if p.resp != nil && p.key != 0 && p.key != 1 {
		for _, code := range responseErrorCodes(p.resp) {
			m.requestErrors.WithLabelValues(api, kerr.ErrorForCode(code).Error()).Inc()
		}
	}
}

// responseErrorCodes walks a response for non-zero ErrorCode fields. It uses
// reflection, so it is only used for the low-rate APIs; Produce and Fetch
// count their errors where they set them.
func responseErrorCodes(resp kmsg.Response) []int16 {
	var out []int16
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			t := v.Type()
			for i := 0; i < v.NumField(); i++ {
				f := v.Field(i)
				if t.Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 {
					if c := int16(f.Int()); c != 0 {
						out = append(out, c)
					}
					continue
				}
				if f.Kind() == reflect.Slice || f.Kind() == reflect.Struct {
					walk(f)
				}
			}
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.Struct {
				for i := 0; i < v.Len(); i++ {
					walk(v.Index(i))
				}
			}
		}
	}
	walk(reflect.ValueOf(resp))
	return out
}

// stateCollector reports partition offsets and sizes and group lag at
// scrape time, so nothing is kept up to date between scrapes.
type stateCollector struct{ b *Broker }

var (
	descLogStart = prometheus.NewDesc("simtel_broker_partition_log_start_offset", "First offset still in the log.", []string{"topic", "partition"}, nil)
	descHW       = prometheus.NewDesc("simtel_broker_partition_high_watermark", "Committed (durable) end offset.", []string{"topic", "partition"}, nil)
	descSize     = prometheus.NewDesc("simtel_broker_partition_size_bytes", "Bytes of all segments.", []string{"topic", "partition"}, nil)
	descLag      = prometheus.NewDesc("simtel_broker_group_lag", "High watermark minus committed offset.", []string{"group", "topic", "partition"}, nil)
	descCommit   = prometheus.NewDesc("simtel_broker_group_committed_offset", "Committed offset.", []string{"group", "topic", "partition"}, nil)
	descTopics   = prometheus.NewDesc("simtel_broker_topics", "Topics.", nil, nil)
	descCoords   = prometheus.NewDesc("simtel_broker_group_coordinators", "Group coordinators this broker runs: 1 on a single node; in cluster mode one per partition of __consumer_offsets it leads and has loaded.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLogStart, descHW, descSize, descLag, descCommit, descTopics, descCoords} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	topics := c.b.allTopics()
	ch <- prometheus.MustNewConstMetric(descTopics, prometheus.GaugeValue, float64(len(topics)))
	for _, t := range topics {
		for _, p := range t.parts {
			if p == nil {
				continue // cluster mode: led by another broker
			}
			idx := strconv.Itoa(int(p.Index()))
			ch <- prometheus.MustNewConstMetric(descLogStart, prometheus.GaugeValue, float64(p.Log().StartOffset()), t.name, idx)
			ch <- prometheus.MustNewConstMetric(descHW, prometheus.GaugeValue, float64(p.HighWatermark()), t.name, idx)
			ch <- prometheus.MustNewConstMetric(descSize, prometheus.GaugeValue, float64(p.Log().Size()), t.name, idx)
		}
	}
	coords := c.b.servedCoordinators()
	ch <- prometheus.MustNewConstMetric(descCoords, prometheus.GaugeValue, float64(len(coords)))
	for _, g := range coords {
		c.collectLags(ch, g)
	}
}

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
	// Profiles for finding hot paths under real load (go tool pprof
	// http://HOST/debug/pprof/profile?seconds=10).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
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
