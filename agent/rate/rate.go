// Package rate estimates how fast samples arrive over a short window. The
// agent's producer uses it to decide whether samples gather in the spool
// for a linger, and its runtime tuning to pick the Go processors.
package rate

import "time"

// Window estimates a rate over the last one to two spans: the count and
// length of the last complete span plus the current one. It is not safe
// for concurrent use.
type Window struct {
	span    time.Duration
	start   time.Time
	n       int
	prevN   int
	prevDur time.Duration
}

// NewWindow starts a window at now whose spans last span (at least a
// millisecond).
func NewWindow(now time.Time, span time.Duration) *Window {
	return &Window{span: max(span, time.Millisecond), start: now}
}

// Add counts n samples at now.
func (w *Window) Add(now time.Time, n int) {
	w.n += n
	if d := now.Sub(w.start); d >= w.span {
		w.prevN, w.prevDur = w.n, d
		w.n, w.start = 0, now
	}
}

// RecentPerSecond is the rate of the current span alone once it has
// lasted minSpan (0 before): it sees a step up sooner than PerSecond.
func (w *Window) RecentPerSecond(now time.Time, minSpan time.Duration) float64 {
	d := now.Sub(w.start)
	if d < minSpan || d <= 0 {
		return 0
	}
	return float64(w.n) / d.Seconds()
}

// PerSecond is the rate over the window up to now.
func (w *Window) PerSecond(now time.Time) float64 {
	d := w.prevDur + now.Sub(w.start)
	if d <= 0 {
		return 0
	}
	return float64(w.prevN+w.n) / d.Seconds()
}
