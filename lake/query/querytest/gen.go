package querytest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/simtel/simtel/lake/replay"
)

// Start is the time of the first generated sample: a minute before
// midnight, so generated runs span two date= partitions.
var Start = time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)

// GenSamples makes n samples per run over partitions 0..parts-1, with
// offsets assigned per partition in production order, times that are not
// monotonic in offset order (hosts report late), every field type, a field
// that appears halfway (schema evolution), and a step tag that grows by one
// every ten samples. The same seed gives the same samples.
func GenSamples(seed uint64, runs []string, n int, parts int32) []replay.Sample {
	rng := rand.New(rand.NewPCG(seed, 2))
	next := make([]int64, parts)
	var out []replay.Sample
	for i := 0; i < n; i++ {
		for _, run := range runs {
			host := fmt.Sprintf("n%d", rng.IntN(3))
			p := int32(rng.IntN(int(parts)))
			s := replay.Sample{
				Tags:      map[string]string{"host": host, "run": run, "job": "j-" + run, "step": fmt.Sprint(i / 10)},
				Time:      Start.Add(time.Duration(i)*time.Second+time.Duration(rng.IntN(3000))*time.Millisecond).UnixNano() + int64(rng.IntN(1000)),
				Partition: p, Offset: next[p],
			}
			next[p]++
			switch rng.IntN(3) {
			case 0:
				s.Measurement = "cpu"
				s.Fields = map[string]any{"usage": rng.Float64() * 100, "cores": int64(rng.IntN(64))}
				if i > n/2 {
					s.Fields["temp"] = uint64(rng.IntN(90))
				}
			case 1:
				s.Measurement = "mem"
				s.Fields = map[string]any{"used": uint64(rng.Uint32()), "swap": rng.IntN(2) == 0}
			default:
				s.Measurement = "log"
				s.Fields = map[string]any{"msg": fmt.Sprintf(`step "%d" done, ok\n`, i%4), "level": int64(-rng.IntN(3))}
			}
			out = append(out, s)
		}
	}
	return out
}

// WriteSamples flushes samples into the lake per partition of topic, in
// flushes of flushSize consecutive offsets.
func (l *Lake) WriteSamples(ctx context.Context, topic string, ss []replay.Sample, flushSize int) error {
	byPart := map[int32][]replay.Sample{}
	for _, s := range ss {
		byPart[s.Partition] = append(byPart[s.Partition], s)
	}
	for _, p := range slices.Sorted(func(yield func(int32) bool) {
		for p := range byPart {
			if !yield(p) {
				return
			}
		}
	}) {
		list := byPart[p]
		slices.SortFunc(list, func(a, b replay.Sample) int { return int(a.Offset - b.Offset) })
		for lo := 0; lo < len(list); lo += flushSize {
			chunk := list[lo:min(lo+flushSize, len(list))]
			if _, err := l.Flush(ctx, topic, p, chunk[0].Offset, chunk[len(chunk)-1].Offset, chunk); err != nil {
				return err
			}
		}
	}
	return nil
}

// SortSamples sorts samples in replay order.
func SortSamples(ss []replay.Sample) {
	slices.SortFunc(ss, func(a, b replay.Sample) int {
		switch {
		case replay.Less(&a, &b):
			return -1
		case replay.Less(&b, &a):
			return 1
		}
		return 0
	})
}
