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
