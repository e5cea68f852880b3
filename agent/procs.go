package agent

import (
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/simtel/simtel/agent/rate"
)

// The agent runs its goroutines on one Go processor (GOMAXPROCS 1) while
// samples arrive at under procsUpRate a second, and on up to
// Config.MaxProcs above it, back to one under procsDownRate.
//
// At low rates the agent's work is short bursts (an HTTP write, a bunch
// of datagrams, a produce request) handed from goroutine to goroutine.
// With a second processor idle, every hand-over wakes a thread to run it
// there, which then finds nothing more to do and sleeps again: on this
// project's 2-core machine one processor cut the agent's context switches
// by a third and its CPU by about 8% at 10k and 100k lines a second
// (docs/agent.md, "CPU"). At a million lines a second one processor is
// nearly saturated and UDP datagrams start to overflow the socket buffer,
// so the agent takes more. On a node with many cores this also keeps the
// agent's scheduler off the simulation's cores.
const (
	procsUpRate   = 300_000
	procsDownRate = 150_000
	// procsMinSpan is how long the current span of the rate window must
	// be before its rate alone may raise the processors: a step to a
	// high rate is seen within a fraction of a second, not after the
	// whole window.
	procsMinSpan = 100 * time.Millisecond
)

type procsGovernor struct {
	max int
	log *slog.Logger

	mu   sync.Mutex
	cur  int
	rate *rate.Window
}

// newProcsGovernor sets GOMAXPROCS to 1 and returns the governor that
// raises it to max (bounded by the runtime's own default) when samples
// arrive fast.
func newProcsGovernor(max int, log *slog.Logger, now time.Time) *procsGovernor {
	max = min(max, runtime.GOMAXPROCS(0))
	g := &procsGovernor{max: max, log: log, cur: 1, rate: rate.NewWindow(now, time.Second)}
	runtime.GOMAXPROCS(1)
	return g
}

// add counts n samples received at now and changes GOMAXPROCS if the
// rate crossed a threshold.
func (g *procsGovernor) add(now time.Time, n int) {
	if g == nil || g.max <= 1 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rate.Add(now, n)
	r := max(g.rate.PerSecond(now), g.rate.RecentPerSecond(now, procsMinSpan))
	want := g.cur
	switch {
	case g.cur == 1 && r >= procsUpRate:
		want = g.max
	case g.cur > 1 && r < procsDownRate:
		want = 1
	}
	if want != g.cur {
		runtime.GOMAXPROCS(want)
		g.log.Debug("changed the Go processors for the rate of samples", "gomaxprocs", want, "samples_per_s", int64(r))
		g.cur = want
	}
}
