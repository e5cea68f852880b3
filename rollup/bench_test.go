package rollup

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// benchLines makes canonical lines shaped like `simtel bench sink`'s: five
// measurements, 32 hosts, 4 runs, two sender tags, two float fields, an
// integer and a boolean, samples of a node 1 ms apart.
func benchLines(n int) []*kgo.Record {
	rng := rand.New(rand.NewPCG(42, uint64(n)))
	meas := []string{"reward", "cpu", "mem", "gpu", "loss"}
	const hosts, runs = 32, 4
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		host, run := i%hosts, "run-"+strconv.Itoa(i%runs)
		t := t0 + int64(i/hosts)*int64(time.Millisecond) + int64(rng.IntN(1000))
		b := fmt.Appendf(nil, "%s,env0=cartpole-%d,env1=cartpole-%d,host=node%03d,job=%d,run=%s,step=0 f0=%s,f1=%s,episode=%di,done=%v %d",
			meas[i%len(meas)], rng.IntN(4), rng.IntN(4), host, 100000+i%runs, run,
			strconv.FormatFloat(float64(rng.IntN(1_000_000))/1000, 'f', -1, 64), strconv.FormatFloat(float64(rng.IntN(1_000_000))/1000, 'f', -1, 64),
			i/hosts, rng.IntN(10) == 0, t)
		recs[i] = &kgo.Record{Value: b, Timestamp: time.Unix(0, t)}
	}
	return recs
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRollupChain is the worker's cost per sample for the whole
// chain on one goroutine: decoding, the 10 s windows, their merges into
// 1 min and 1 h windows, the output lines and a state checkpoint every
// 100,000 samples (a commit interval's worth at a fraction of the target
// rate; Kafka's own cost left out). The lines span 31 s of sample time,
// so the allowed lateness is 1 s for windows to close and their sketches
// to be reused as in a steady stream:
//
//	go test -run X -bench RollupChain -benchtime 3x ./rollup/
func BenchmarkRollupChain(b *testing.B) {
	const n = 1_000_000
	recs := benchLines(n)
	cfg := Config{Brokers: []string{"-"}, AllowedLateness: time.Second}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	var outBytes, stateBytes, outRecs int64
	ctx := context.Background()
	// The pools of sketches and pending buffers outlive an iteration's
	// worker, as they outlive windows in a worker that runs for long.
	sk := newSketches()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		w := &worker{cfg: cfg, log: cfg.Logger, m: newMetrics(prometheus.NewRegistry()), sk: sk, parts: map[int32]*partition{}}
		w.send = func(_ context.Context, r *kgo.Record) {
			if r.Topic == cfg.StateTopic {
				stateBytes += int64(len(r.Value))
				return
			}
			outRecs++
			outBytes += int64(len(r.Value))
		}
		p := newPartition(0, 0)
		w.parts[0] = p
		for i, r := range recs {
			w.add(ctx, p, r)
			if i%100_000 == 99_999 {
				w.checkpoint(ctx, p)
				// The commit: the client is done with the records.
				w.recordsDone(true)
			}
		}
		w.close(ctx, p, math.MaxInt64)
	}
	cpu := cpuTime() - cpu0
	samples := float64(n) * float64(b.N)
	b.ReportMetric(samples/cpu.Seconds(), "samples/CPU-s")
	b.ReportMetric(float64(outRecs)/float64(b.N), "windows/op")
	b.ReportMetric(float64(stateBytes)/samples, "state-B/sample")
}
