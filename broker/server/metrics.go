package server

import (
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metrics are the server's series, registered with the broker's.
type metrics struct {
	requests      *prometheus.CounterVec
	requestErrors *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	bytesIn       *prometheus.CounterVec
	bytesOut      *prometheus.CounterVec
	connections   prometheus.Gauge
	badFrames     prometheus.Counter
	// authFailures counts refused authentications: TLS handshakes
	// (mechanism "tls") and SASL exchanges, by reason.
	authFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{}
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
	m.authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_auth_failures_total", Help: "Refused authentications, by mechanism (tls or the SASL mechanism) and reason; each closed its connection or answered an authentication error."}, []string{"mechanism", "reason"})
	reg.MustRegister(m.requests, m.requestErrors, m.latency, m.bytesIn, m.bytesOut, m.connections, m.badFrames, m.authFailures)
	return m
}

func (m *metrics) observeRequest(p *Slot, api string) {
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
