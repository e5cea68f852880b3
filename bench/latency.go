package bench

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency bounds: values are recorded in microseconds between 1 µs and 10
// minutes with three significant digits (a recorded value is within 0.1% of
// the true one). Longer values are clamped to the maximum and counted in
// Clamped, so a stalled broker shows up as a huge p999 rather than as a
// silently dropped sample.
const (
	latencyMinMicros = 1
	latencyMaxMicros = int64(10 * time.Minute / time.Microsecond)
	latencySigFigs   = 3
)

// Latency is a concurrency-safe latency histogram. Produce promises of one
// kgo client are called from the client's goroutines, so every producer owns
// one Latency and the run merges them at the end; the mutex is then only
// contended by the progress reporter.
type Latency struct {
	mu struct {
		sync.Mutex
		h       *hdrhistogram.Histogram
		clamped int64
	}
}

// NewLatency returns an empty histogram.
func NewLatency() *Latency {
	l := &Latency{}
	l.mu.h = hdrhistogram.New(latencyMinMicros, latencyMaxMicros, latencySigFigs)
	return l
}

// Record adds one observation. Values below 1 µs count as 1 µs; values
// above the maximum count as the maximum.
func (l *Latency) Record(d time.Duration) {
	us := int64(d / time.Microsecond)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case us < latencyMinMicros:
		us = latencyMinMicros
	case us > latencyMaxMicros:
		us = latencyMaxMicros
		l.mu.clamped++
	}
	// In range by construction, so RecordValue cannot fail.
	_ = l.mu.h.RecordValue(us)
}

// Merge adds every observation of other to l.
func (l *Latency) Merge(other *Latency) {
	if l == other {
		return
	}
	other.mu.Lock()
	h := other.mu.h.Clone()
	clamped := other.mu.clamped
	other.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.h.Merge(h)
	l.mu.clamped += clamped
}

// Summary returns the percentiles of what was recorded so far.
func (l *Latency) Summary() LatencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.mu.h
	if h.TotalCount() == 0 {
		return LatencySummary{}
	}
	return LatencySummary{
		Count:   h.TotalCount(),
		Clamped: l.mu.clamped,
		MinUS:   h.Min(),
		MeanUS:  h.Mean(),
		P50US:   h.ValueAtPercentile(50),
		P90US:   h.ValueAtPercentile(90),
		P99US:   h.ValueAtPercentile(99),
		P999US:  h.ValueAtPercentile(99.9),
		MaxUS:   h.Max(),
	}
}

// LatencySummary holds percentiles in microseconds. A percentile is the
// highest value equivalent (within 0.1%) to the recorded value at that rank.
type LatencySummary struct {
	Count   int64   `json:"count"`
	Clamped int64   `json:"clamped,omitempty"` // observations above 10 minutes, recorded as 10 minutes
	MinUS   int64   `json:"min_us"`
	MeanUS  float64 `json:"mean_us"`
	P50US   int64   `json:"p50_us"`
	P90US   int64   `json:"p90_us"`
	P99US   int64   `json:"p99_us"`
	P999US  int64   `json:"p999_us"`
	MaxUS   int64   `json:"max_us"`
}
