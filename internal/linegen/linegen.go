// Package linegen renders the line protocol that simtel's agent benchmarks
// send: a training job's per-rank step metrics and GPU gauges. The load
// generator (`simtel bench agent`) and the agent's own Go benchmarks use
// the same lines.
package linegen

import (
	"math"
	"math/rand/v2"
	"strconv"
)

// Set holds pre-rendered line protocol lines without their timestamps,
// as a training job's metrics look: per-rank step metrics and, one line in
// four, GPU gauges. Appending a line is a copy of its prefix and the
// formatting of one integer, so the generator costs little per line and
// leaves the cores to the agent it measures.
type Set struct {
	prefixes [][]byte // each ends with the space before the timestamp
	next     int
}

var envs = []string{"cartpole", "pendulum", "halfcheetah", "ant", "hopper", "walker2d", "humanoid", "lunarlander"}

// New renders n line prefixes for ranks ranks (tag rank=0..ranks-1)
// with values drawn from a generator seeded by seed, so a run is
// repeatable. Lines are 80–120 bytes with their timestamp and newline.
func New(n, ranks int, seed uint64) *Set {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &Set{prefixes: make([][]byte, n)}
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
			b = append(b, envs[rank%len(envs)]...)
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

// NextLen is the length of the next line AppendLine will add.
func (s *Set) NextLen() int {
	return len(s.prefixes[s.next]) + tsDigits + 1
}

// AppendLine adds the next line with timestamp ts (ns) to dst.
func (s *Set) AppendLine(dst []byte, ts int64) []byte {
	dst = append(dst, s.prefixes[s.next]...)
	if s.next++; s.next == len(s.prefixes) {
		s.next = 0
	}
	dst = strconv.AppendInt(dst, ts, 10)
	return append(dst, '\n')
}
