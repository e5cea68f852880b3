package agent

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/simtel/simtel/agent/lineproto"
)

// agentBody is n lines shaped like those bench/agentlines.go sends to the
// agent: per-rank step metrics and, one line in four, GPU gauges, each
// with a nanosecond timestamp.
func agentBody(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	envs := []string{"cartpole", "pendulum", "halfcheetah", "ant", "hopper", "walker2d", "humanoid", "lunarlander"}
	ts := int64(1_764_460_000_000_000_000)
	var b []byte
	for i := range n {
		rank := rng.IntN(64)
		if i%4 == 3 {
			b = append(b, "gpu,rank="...)
			b = strconv.AppendInt(b, int64(rank), 10)
			b = append(b, ",device="...)
			b = strconv.AppendInt(b, int64(rank%8), 10)
			b = append(b, " util="...)
			b = strconv.AppendFloat(b, float64(rng.IntN(100))/100, 'f', -1, 64)
			b = append(b, ",mem_used="...)
			b = strconv.AppendInt(b, 8<<30+rng.Int64N(32<<30), 10)
			b = append(b, "i,temp_c="...)
			b = strconv.AppendInt(b, 40+rng.Int64N(45), 10)
			b = append(b, ",power_w="...)
			b = strconv.AppendFloat(b, float64(800+rng.IntN(3200))/10, 'f', -1, 64)
		} else {
			b = append(b, "sim_step,env="...)
			b = append(b, envs[rank%len(envs)]...)
			b = append(b, ",rank="...)
			b = strconv.AppendInt(b, int64(rank), 10)
			b = append(b, " reward="...)
			b = strconv.AppendFloat(b, float64(rng.IntN(200000))/1000, 'f', -1, 64)
			b = append(b, ",episode_len="...)
			b = strconv.AppendInt(b, 1+rng.Int64N(1000), 10)
			b = append(b, "i,step_time="...)
			b = strconv.AppendFloat(b, float64(100+rng.IntN(900))/100000, 'f', -1, 64)
		}
		b = append(b, ' ')
		b = strconv.AppendInt(b, ts+int64(i)*1000, 10)
		b = append(b, '\n')
	}
	return b
}

// BenchmarkIngestAdd is the agent's per-line parse cost end to end: split
// a 5000-line HTTP body, normalize each line with the agent's tags and
// record its span and key, as ingest does before spooling.
func BenchmarkIngestAdd(b *testing.B) {
	const lines = 5000
	body := agentBody(lines)
	norm, err := lineproto.NewNormalizer(lineproto.DefaultTags{Host: "node017", Job: "123456", Step: "0", Run: "run-2026-12-03"})
	if err != nil {
		b.Fatal(err)
	}
	batch := &ingestBatch{norm: norm}
	now := time.Now()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		batch.reset()
		if e := batch.add(body, lineproto.Nanosecond, now); e != nil {
			b.Fatal(e)
		}
		if len(batch.spans) != lines {
			b.Fatalf("%d samples, want %d", len(batch.spans), lines)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}
