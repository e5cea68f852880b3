package bench

import (
	"math"
	"time"
)

// pacer grants lines on a schedule of rate lines per second from start: by
// time t, ⌊rate·(t−start)⌋ lines in all. It is a token bucket filled
// continuously and emptied every tick (a millisecond), so the schedule
// does not drift with late wake-ups: a tick that comes late grants more.
//
// A caller that fell behind (the agent pushed back on HTTP or TCP, or the
// generator did not get a core) gets at most burst lines at once; the rest
// of what was due is skipped and counted, and the schedule goes on from
// now, so a stall is not followed by a flood the agent never sees in
// practice.
type pacer struct {
	rate    float64 // lines per second
	burst   int64
	start   time.Time
	granted int64 // lines granted or skipped since start
	skipped int64
}

func newPacer(rate float64, burst int64, start time.Time) *pacer {
	return &pacer{rate: rate, burst: max(burst, 1), start: start}
}

// due is how many lines the schedule holds from start to now.
func (p *pacer) due(now time.Time) int64 {
	el := now.Sub(p.start)
	if el <= 0 {
		return 0
	}
	return int64(math.Floor(float64(el.Nanoseconds()) * p.rate / 1e9))
}

// grant returns how many lines may be sent now.
func (p *pacer) grant(now time.Time) int64 {
	due := p.due(now)
	n := due - p.granted
	if n <= 0 {
		return 0
	}
	if n > p.burst {
		p.skipped += n - p.burst
		n = p.burst
	}
	p.granted = due
	return n
}
