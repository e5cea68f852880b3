// Package tick runs periodic background work until a context ends: the
// broker's maintenance, placement, leader, coordinator and transaction
// loops and the sink's compactor all use it.
package tick

import (
	"context"
	"time"
)

// Every calls f every d until ctx ends. The first call comes one period
// after the start; a call still running when ctx ends is not interrupted,
// and no call starts after Every has seen ctx end.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// Pace is the period of a loop that has work only now and then: Busy
// while its last pass left work or within Hold of a wake-up by news
// (news often comes a moment before the state it is about), Idle
// otherwise, so that an idle process wakes seldom.
type Pace struct {
	Busy, Idle, Hold time.Duration
	hot              time.Time
}

// Woken records a wake-up by news.
func (p *Pace) Woken() { p.hot = time.Now().Add(p.Hold) }

// Next is the wait before the next pass; busy: the last pass left work.
func (p *Pace) Next(busy bool) time.Duration {
	if busy || time.Now().Before(p.hot) {
		return p.Busy
	}
	return p.Idle
}

// Run calls f at once and then again after Next of what it reported (it
// reports whether work is left), or as soon as one of news delivers a
// token, until ctx ends. A call still running when ctx ends is not
// interrupted.
func (p *Pace) Run(ctx context.Context, f func() (busy bool), news ...<-chan struct{}) {
	woken := make(chan struct{}, 1)
	for _, c := range news {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-c:
				}
				select {
				case woken <- struct{}{}:
				default:
				}
			}
		}()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		t.Reset(p.Next(f()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-woken:
			p.Woken()
		}
	}
}
