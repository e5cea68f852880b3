package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// What `simtel bench fanout` measures besides the workers: the broker's
// egress, from the counters of its /metrics (broker/metrics.go), and the
// loopback bandwidth of this machine, the limit that egress cannot beat.

// The broker's counters read here.
const (
	// metricFetchedBytes counts the record batch bytes served to fetches.
	metricFetchedBytes = "simtel_broker_fetched_bytes_total"
	// metricResponseBytes counts response bytes written, by label api
	// (zero-copy fetch responses included: header, record batches and all).
	metricResponseBytes = "simtel_broker_response_bytes_total"
)

// brokerCounters is one reading of the broker's egress counters.
type brokerCounters struct {
	Fetched  int64
	Response map[string]int64 // by api
}

func (c brokerCounters) responseTotal() int64 {
	var n int64
	for _, v := range c.Response {
		n += v
	}
	return n
}

// parseBrokerCounters reads the egress counters from a Prometheus text
// exposition. The fetched-bytes counter must be there (a broker always
// exposes it; its absence means this is not a simtel broker's /metrics);
// the response-bytes vector has no series before the first response.
func parseBrokerCounters(r io.Reader) (brokerCounters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return brokerCounters{}, fmt.Errorf("cannot parse metrics: %w", err)
	}
	c := brokerCounters{Response: map[string]int64{}}
	f, ok := fams[metricFetchedBytes]
	if !ok {
		return brokerCounters{}, fmt.Errorf("metric %s is missing", metricFetchedBytes)
	}
	for _, m := range f.GetMetric() {
		c.Fetched += int64(counterValue(m.GetCounter().GetValue(), m.GetUntyped().GetValue()))
	}
	for _, m := range fams[metricResponseBytes].GetMetric() {
		api := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "api" {
				api = l.GetValue()
			}
		}
		if api == "" {
			return brokerCounters{}, fmt.Errorf("metric %s has a series without an api label", metricResponseBytes)
		}
		c.Response[api] += int64(counterValue(m.GetCounter().GetValue(), m.GetUntyped().GetValue()))
	}
	return c, nil
}

// counterValue is whichever of a counter's and an untyped sample's value
// is set (the exposition may declare the family either way).
func counterValue(counter, untyped float64) float64 {
	if counter != 0 {
		return counter
	}
	return untyped
}

// Egress is what the broker sent over the measured part of a run: the
// growth of its counters.
type Egress struct {
	// FetchedBytes is simtel_broker_fetched_bytes_total: record batches
	// served to fetches.
	FetchedBytes int64 `json:"fetched_bytes"`
	// FetchResponseBytes is simtel_broker_response_bytes_total{api="Fetch"}:
	// whole fetch responses.
	FetchResponseBytes int64 `json:"fetch_response_bytes"`
	// ResponseBytes is simtel_broker_response_bytes_total over every API:
	// the broker's egress, the figure the targets use.
	ResponseBytes int64 `json:"response_bytes"`
	// ByAPI splits ResponseBytes by API (APIs that sent nothing are left
	// out).
	ByAPI map[string]int64 `json:"by_api"`
}

func egressBetween(a, b brokerCounters) *Egress {
	e := &Egress{FetchedBytes: b.Fetched - a.Fetched, ByAPI: map[string]int64{}}
	for api, v := range b.Response {
		if d := v - a.Response[api]; d != 0 {
			e.ByAPI[api] = d
			e.ResponseBytes += d
		}
	}
	e.FetchResponseBytes = e.ByAPI["Fetch"]
	return e
}

// egressProbe reads the broker's /metrics.
type egressProbe struct {
	url  string
	http *http.Client
}

func newEgressProbe(url string) *egressProbe {
	return &egressProbe{url: url, http: &http.Client{Timeout: 30 * time.Second}}
}

// read tries three times when the broker does not answer in time: a
// broker sharing two cores with dozens of agents (bench/fanout-netns.sh)
// has let a /metrics request wait past 30 s.
func (p *egressProbe) read(ctx context.Context) (brokerCounters, error) {
	var err error
	for range 3 {
		var c brokerCounters
		if c, err = scrapeMetrics(ctx, p.http, p.url, "broker", parseBrokerCounters); err == nil {
			return c, nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || ctx.Err() != nil {
			return c, err
		}
	}
	return brokerCounters{}, err
}

// Loopback is the bandwidth of one TCP stream over 127.0.0.1, measured
// in the run's own process.
type Loopback struct {
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	BytesPerS float64 `json:"bytes_per_s"`
	WriteSize int     `json:"write_size"`
}

// loopbackWrite is the size of each write (as iperf3's default 128 KiB,
// larger: the broker writes whole fetch responses with sendfile).
const loopbackWrite = 1 << 20

// MeasureLoopback streams over a TCP connection on 127.0.0.1 for d with
// writes of 1 MiB and returns bytes received over the time from the first
// write to the last byte read, as iperf3 measures a single stream.
func MeasureLoopback(ctx context.Context, d time.Duration) (Loopback, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return Loopback{}, fmt.Errorf("cannot listen for the loopback test: %w", err)
	}
	defer ln.Close()
	type readResult struct {
		n   int64
		end time.Time
		err error
	}
	got := make(chan readResult, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- readResult{err: err}
			return
		}
		defer c.Close()
		buf := make([]byte, loopbackWrite)
		var n int64
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				got <- readResult{n: n, end: time.Now(), err: err}
				return
			}
		}
	}()
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return Loopback{}, fmt.Errorf("cannot connect for the loopback test: %w", err)
	}
	buf := make([]byte, loopbackWrite)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	deadline := start.Add(d)
	var werr error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, werr = c.Write(buf); werr != nil {
			break
		}
	}
	c.Close()
	rr := <-got
	switch {
	case werr != nil:
		return Loopback{}, fmt.Errorf("loopback test: cannot write: %w", werr)
	case rr.err != nil:
		return Loopback{}, fmt.Errorf("loopback test: cannot read: %w", rr.err)
	case ctx.Err() != nil:
		return Loopback{}, ctx.Err()
	}
	secs := rr.end.Sub(start).Seconds()
	return Loopback{Bytes: rr.n, Seconds: secs, BytesPerS: float64(rr.n) / secs, WriteSize: loopbackWrite}, nil
}
