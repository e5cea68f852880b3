package agent

import (
	"math"
	"testing"
	"time"
)

// TestRateWindow checks the shipper's rate estimate, which decides
// whether it gathers samples for a linger: over the last one to two
// spans, so that a fall from a high rate is seen within two spans.
func TestRateWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := newRateWindow(t0, time.Second)
	if r := w.perSecond(t0); r != 0 {
		t.Fatalf("empty window: %g/s, want 0", r)
	}
	// 100k samples a second for three seconds, read every 10 ms.
	for ms := 10; ms <= 3000; ms += 10 {
		w.add(at(ms), 1000)
	}
	if r := w.perSecond(at(3000)); math.Abs(r-100_000) > 2_000 {
		t.Fatalf("steady 100k/s: estimated %g/s", r)
	}
	const linger = 1.0 // seconds
	if w.perSecond(at(3000))*linger < gatherRecords {
		t.Fatalf("at 100k/s with a 1 s linger the shipper would gather")
	}
	// Then 5k a second, one read of 2,500 every 500 ms: within two spans
	// the estimate is low enough to gather.
	ms := 3000
	for range 4 {
		ms += 500
		w.add(at(ms), 2500)
	}
	if r := w.perSecond(at(ms)); r >= gatherRecords || r < 1000 {
		t.Fatalf("two seconds after falling to 5k/s: estimated %g/s, want under %d", r, gatherRecords)
	}
}
