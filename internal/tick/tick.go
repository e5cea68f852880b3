// Package tick runs periodic background work until a context ends: the
// broker's maintenance, placement, leader and transaction loops and the
// sink's compactor all share this one loop.
package tick

import (
	"context"
	"time"
)

// Every calls f every d until ctx ends. The first call comes one period
// after the start; a call still running when ctx ends is not interrupted,
// and no call starts after Every has seen ctx end.
func Every(ctx context.Context, d time.Duration, f func()) {
	EveryOr[struct{}](ctx, d, nil, f)
}

// EveryOr is Every that also calls f as soon as wake delivers a value,
// for work that has a reason to run before its next period (the value is
// dropped). A nil wake never delivers.
func EveryOr[T any](ctx context.Context, d time.Duration, wake <-chan T, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		f()
	}
}

// Pace is the period of a loop that has work only now and then: Busy
// while its last pass left work or within Hold of a wake-up by an event
// (news often comes a moment before the state it is about), Idle
// otherwise, so that an idle process wakes seldom.
type Pace struct {
	Busy, Idle, Hold time.Duration
	hot              time.Time
}

// Woken records a wake-up by an event.
func (p *Pace) Woken() { p.hot = time.Now().Add(p.Hold) }

// Next is the wait before the next pass; busy: the last pass left work.
func (p *Pace) Next(busy bool) time.Duration {
	if busy || time.Now().Before(p.hot) {
		return p.Busy
	}
	return p.Idle
}
