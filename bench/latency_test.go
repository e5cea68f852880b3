package bench

import (
	"math"
	"testing"
	"time"
)

// within reports whether got is within rel (a fraction) of want.
func within(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*want
}

func TestLatencyPercentilesUniform(t *testing.T) {
	l := NewLatency()
	for i := 1; i <= 100000; i++ {
		l.Record(time.Duration(i) * time.Microsecond)
	}
	s := l.Summary()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"p50", float64(s.P50US), 50000},
		{"p90", float64(s.P90US), 90000},
		{"p99", float64(s.P99US), 99000},
		{"p999", float64(s.P999US), 99900},
		{"max", float64(s.MaxUS), 100000},
		{"min", float64(s.MinUS), 1},
		{"mean", s.MeanUS, 50000.5},
	} {
		if !within(c.got, c.want, 0.001) {
			t.Errorf("%s: got %v µs, want %v ± 0.1%%", c.name, c.got, c.want)
		}
	}
	if s.Count != 100000 {
		t.Errorf("count: got %d, want 100000", s.Count)
	}
}

func TestLatencyTail(t *testing.T) {
	// 999 fast records and one slow: p99 stays fast, p999 and max are
	// the slow one. A histogram that interpolated or dropped outliers
	// would fail here.
	l := NewLatency()
	for range 999 {
		l.Record(200 * time.Microsecond)
	}
	l.Record(2 * time.Second)
	s := l.Summary()
	if !within(float64(s.P99US), 200, 0.001) {
		t.Errorf("p99: got %d µs, want 200", s.P99US)
	}
	if !within(float64(s.P999US), 200, 0.001) {
		t.Errorf("p999: got %d µs, want 200 (rank 999 of 1000)", s.P999US)
	}
	if !within(float64(s.MaxUS), 2e6, 0.001) {
		t.Errorf("max: got %d µs, want 2,000,000", s.MaxUS)
	}
	l.Record(2 * time.Second)
	if s := l.Summary(); !within(float64(s.P999US), 2e6, 0.001) {
		t.Errorf("p999 with 2 of 1001 slow: got %d µs, want 2,000,000", s.P999US)
	}
}

func TestLatencyMergeAndClamp(t *testing.T) {
	a, b := NewLatency(), NewLatency()
	a.Record(100 * time.Microsecond)
	b.Record(300 * time.Microsecond)
	b.Record(time.Hour) // beyond the 10 minute maximum
	b.Record(0)         // below the 1 µs minimum
	a.Merge(b)
	a.Merge(a) // no-op, must not deadlock
	s := a.Summary()
	if s.Count != 4 {
		t.Errorf("count: got %d, want 4", s.Count)
	}
	if s.Clamped != 1 {
		t.Errorf("clamped: got %d, want 1", s.Clamped)
	}
	if s.MinUS != 1 {
		t.Errorf("min: got %d, want 1", s.MinUS)
	}
	if !within(float64(s.MaxUS), float64(latencyMaxMicros), 0.001) {
		t.Errorf("max: got %d, want %d", s.MaxUS, latencyMaxMicros)
	}
	if got := b.Summary().Count; got != 3 {
		t.Errorf("merge changed its source: count %d, want 3", got)
	}
}

func TestLatencyEmpty(t *testing.T) {
	if s := NewLatency().Summary(); s != (LatencySummary{}) {
		t.Errorf("empty histogram: got %+v, want zero", s)
	}
}

func TestGroupDigits(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {1234567, "1,234,567"}, {-1234, "-1,234"}, {100000, "100,000"}} {
		if got := groupDigits(c.in); got != c.want {
			t.Errorf("groupDigits(%d): got %q, want %q", c.in, got, c.want)
		}
	}
}
