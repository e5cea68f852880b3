package bench

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// lineSet holds pre-rendered line protocol lines without their timestamps,
// as a training job's metrics look: per-rank step metrics and, one line in
// four, GPU gauges. Appending a line is a copy of its prefix and the
// formatting of one integer, so the generator costs little per line and
// leaves the cores to the agent it measures.
type lineSet struct {
	prefixes [][]byte // each ends with the space before the timestamp
	next     int
}

var benchEnvs = []string{"cartpole", "pendulum", "halfcheetah", "ant", "hopper", "walker2d", "humanoid", "lunarlander"}

// newLineSet renders n line prefixes for ranks ranks (tag rank=0..ranks-1)
// with values drawn from a generator seeded by seed, so a run is
// repeatable. Lines are 80–120 bytes with their timestamp and newline.
func newLineSet(n, ranks int, seed uint64) *lineSet {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &lineSet{prefixes: make([][]byte, n)}
	for i := range s.prefixes {
		rank := rng.IntN(ranks)
		var b []byte
		if i%4 == 3 {
			b = append(b, "gpu,rank="...)
			b = strconv.AppendInt(b, int64(rank), 10)
			b = append(b, ",device="...)
			b = strconv.AppendInt(b, int64(rank%8), 10)
			b = append(b, " util="...)
			b = strconv.AppendFloat(b, round(rng.Float64(), 2), 'f', -1, 64)
			b = append(b, ",mem_used="...)
			b = strconv.AppendInt(b, 8<<30+rng.Int64N(32<<30), 10)
			b = append(b, "i,temp_c="...)
			b = strconv.AppendInt(b, 40+rng.Int64N(45), 10)
			b = append(b, ",power_w="...)
			b = strconv.AppendFloat(b, round(80+rng.Float64()*320, 1), 'f', -1, 64)
		} else {
			b = append(b, "sim_step,env="...)
			b = append(b, benchEnvs[rank%len(benchEnvs)]...)
			b = append(b, ",rank="...)
			b = strconv.AppendInt(b, int64(rank), 10)
			b = append(b, " reward="...)
			b = strconv.AppendFloat(b, round(rng.NormFloat64()*50+100, 3), 'f', -1, 64)
			b = append(b, ",episode_len="...)
			b = strconv.AppendInt(b, 1+rng.Int64N(1000), 10)
			b = append(b, "i,step_time="...)
			b = strconv.AppendFloat(b, round(0.001+rng.ExpFloat64()*0.004, 5), 'f', -1, 64)
		}
		s.prefixes[i] = append(b, ' ')
	}
	return s
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// tsDigits is the length of a nanosecond Unix timestamp from 2001 to 2286.
const tsDigits = 19

// nextLen is the length of the next line appendLine will add.
func (s *lineSet) nextLen() int {
	return len(s.prefixes[s.next]) + tsDigits + 1
}

// appendLine adds the next line with timestamp ts (ns) to dst.
func (s *lineSet) appendLine(dst []byte, ts int64) []byte {
	dst = append(dst, s.prefixes[s.next]...)
	if s.next++; s.next == len(s.prefixes) {
		s.next = 0
	}
	dst = strconv.AppendInt(dst, ts, 10)
	return append(dst, '\n')
}

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
