package tick

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var at []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, time.Second, func() {
				at = append(at, time.Since(start))
				if len(at) == 3 {
					cancel()
				}
			})
		}()
		<-done
		want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("got %d calls at %v, want %v", len(at), at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Fatalf("call %d at %v, want %v", i, at[i], want[i])
			}
		}
	})
}

func TestEveryReturnsWhenCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		calls := 0
		go func() {
			defer close(done)
			Every(ctx, time.Second, func() { calls++ })
		}()
		time.Sleep(1500 * time.Millisecond)
		cancel()
		<-done
		if calls != 1 {
			t.Fatalf("got %d calls before the cancel, want 1", calls)
		}
	})
}

func TestPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := Pace{Busy: time.Millisecond, Idle: time.Second, Hold: 5 * time.Second}
		if d := p.Next(false); d != time.Second {
			t.Fatalf("idle: %v", d)
		}
		if d := p.Next(true); d != time.Millisecond {
			t.Fatalf("busy: %v", d)
		}
		p.Woken()
		time.Sleep(4 * time.Second)
		if d := p.Next(false); d != time.Millisecond {
			t.Fatalf("4 s after a wake-up: %v", d)
		}
		time.Sleep(2 * time.Second)
		if d := p.Next(false); d != time.Second {
			t.Fatalf("6 s after a wake-up: %v", d)
		}
	})
}

func TestPaceRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		news := make(chan struct{}, 1)
		calls := make(chan time.Duration)
		busy := true
		start := time.Now()
		p := Pace{Busy: time.Second, Idle: time.Hour, Hold: 10 * time.Second}
		go p.Run(ctx, func() bool { calls <- time.Since(start); return busy }, news)
		for i, want := range []time.Duration{0, time.Second, 2 * time.Second} {
			if got := <-calls; got != want {
				t.Fatalf("call %d at %v, want %v (busy)", i, got, want)
			}
		}
		busy = false
		if got := <-calls; got != 3*time.Second {
			t.Fatalf("call at %v, want 3s", got)
		}
		// Idle: the next pass an hour later, unless news comes.
		time.Sleep(time.Minute)
		news <- struct{}{}
		start = time.Now()
		// At once on the news, then every Busy second for the Hold.
		for i, want := range []time.Duration{0, time.Second, 2 * time.Second} {
			if got := <-calls; got != want {
				t.Fatalf("call %d after the news at %v, want %v", i, got, want)
			}
		}
		for got := <-calls; got < 10*time.Second; got = <-calls {
		}
		start = time.Now()
		if got := <-calls; got != time.Hour {
			t.Fatalf("idle call after the hold at %v, want 1h", got)
		}
	})
}
