package rate

import (
	"testing"
	"time"
)

// TestWindowSpans: the rate covers the last complete span and the
// current one, so an old burst falls out of it after two spans.
func TestWindowSpans(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	w := NewWindow(t0, time.Second)
	if r := w.PerSecond(t0); r != 0 {
		t.Fatalf("empty window: got %g/s, want 0", r)
	}
	w.Add(t0.Add(500*time.Millisecond), 3000) // a burst, within the first span
	if r := w.PerSecond(t0.Add(time.Second)); r != 3000 {
		t.Errorf("one second after the start: got %g/s, want 3000", r)
	}
	w.Add(t0.Add(time.Second), 0) // the first span ends
	// The burst's span is the previous one now: still counted, over the
	// one and a half seconds the window covers.
	if r := w.PerSecond(t0.Add(1500 * time.Millisecond)); r != 2000 {
		t.Errorf("half a span later: got %g/s, want 2000", r)
	}
	w.Add(t0.Add(2*time.Second), 0) // the second span ends: the burst is out
	if r := w.PerSecond(t0.Add(2 * time.Second)); r != 0 {
		t.Errorf("two quiet spans after the burst: got %g/s, want 0", r)
	}
}

// TestWindowRecent: the current span's rate alone counts only once the
// span has lasted minSpan.
func TestWindowRecent(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	w := NewWindow(t0, time.Second)
	w.Add(t0.Add(50*time.Millisecond), 5000)
	if r := w.RecentPerSecond(t0.Add(50*time.Millisecond), 100*time.Millisecond); r != 0 {
		t.Errorf("50 ms into the span: got %g/s, want 0 (under minSpan)", r)
	}
	w.Add(t0.Add(200*time.Millisecond), 15000)
	if r := w.RecentPerSecond(t0.Add(200*time.Millisecond), 100*time.Millisecond); r != 100_000 {
		t.Errorf("200 ms into the span: got %g/s, want 100000", r)
	}
	if r := w.PerSecond(t0.Add(200 * time.Millisecond)); r != 100_000 {
		t.Errorf("whole window at 200 ms: got %g/s, want 100000", r)
	}
}

// TestWindowSpanFloor: a span of 0 counts as a millisecond, so a window
// made with a zero linger still estimates.
func TestWindowSpanFloor(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	w := NewWindow(t0, 0)
	w.Add(t0.Add(500*time.Microsecond), 10)
	w.Add(t0.Add(time.Millisecond), 10)
	if r := w.PerSecond(t0.Add(time.Millisecond)); r != 20_000 {
		t.Errorf("got %g/s, want 20000", r)
	}
}
