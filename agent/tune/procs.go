package tune

import (
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/simtel/simtel/agent/rate"
)

// Procs runs the process's goroutines on one Go processor (GOMAXPROCS
// 1) while samples arrive at under procsUpRate a second, and on up to
// Config.MaxProcs above it, back to one under procsDownRate.
//
// At low rates the agent's work is short bursts (an HTTP write, a bunch
// of datagrams, a produce request) handed from goroutine to goroutine.
// With a second processor idle, every hand-over wakes a thread to run it
// there, which then finds nothing more to do and sleeps again; on one
// processor the hand-over is a queue push. Near a million lines a second
// one processor is nearly saturated and UDP datagrams overflow the socket
// buffer, so the process takes more. On a node with many cores this also
// keeps the agent's scheduler off the simulation's cores.
type Procs struct {
	max int
	log *slog.Logger

	mu   sync.Mutex
	cur  int
	rate *rate.Window
}

// One processor costs less below procsDownRate and falls behind above
// procsUpRate (docs/agent-cost.md, "CPU"). Reproduce: RATE=100000
// bench/agent-ab.sh A B, B a wrapper adding --max-procs 0.
const (
	procsUpRate   = 300_000
	procsDownRate = 150_000
	// procsMinSpan is how long the current span of the rate window must
	// be before its rate alone may raise the processors: a step to a
	// high rate is seen within a fraction of a second, not after the
	// whole window.
	procsMinSpan = 100 * time.Millisecond
)

// NewProcs sets GOMAXPROCS to 1 and returns the governor that raises it
// to max (bounded by the runtime's own default) when samples arrive fast.
func NewProcs(max int, log *slog.Logger, now time.Time) *Procs {
	max = min(max, runtime.GOMAXPROCS(0))
	g := &Procs{max: max, log: log, cur: 1, rate: rate.NewWindow(now, time.Second)}
	runtime.GOMAXPROCS(1)
	return g
}

// Add counts n samples received at now and changes GOMAXPROCS if the
// rate crossed a threshold. A nil Procs does nothing.
func (g *Procs) Add(now time.Time, n int) {
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
