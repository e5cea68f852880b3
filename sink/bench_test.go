package sink

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// testLines makes n canonical lines like the agent ships: a few
// measurements, hosts and runs, tags sorted, float and integer fields.
func testLines(n, runs int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	meas := []string{"cpu", "mem", "reward", "gpu"}
	out := make([][]byte, n)
	t0 := int64(1700000000000000000)
	for i := range out {
		m := meas[i%len(meas)]
		host := fmt.Sprintf("n%03d", i%16)
		run := fmt.Sprintf("run%d", i%runs)
		out[i] = fmt.Appendf(nil, "%s,env=cartpole,host=%s,job=1234,rank=%d,run=%s,step=0 value=%.6f,loss=%.4f,episode=%di %d",
			m, host, i%8, run, rng.Float64()*100, rng.Float64(), i/16, t0+int64(i)*int64(time.Millisecond)/16)
	}
	return out
}

func BenchmarkEncode(b *testing.B) {
	const n = 100_000
	lines := testLines(n, 4)
	recs := make([]Record, n)
	var bytes int64
	for i, l := range lines {
		recs[i] = Record{Offset: int64(i), Timestamp: time.Unix(0, 1700000000000000000), Key: []byte("run1/n001"), Value: l}
		bytes += int64(len(l))
	}
	e := NewEncoder("telemetry", 0, true)
	b.ReportAllocs()
	b.ResetTimer()
	var out int64
	for range b.N {
		e.Reset()
		for i := range recs {
			e.Add(&recs[i])
		}
		objs, err := e.Encode()
		if err != nil {
			b.Fatal(err)
		}
		out = 0
		for _, o := range objs {
			out += int64(len(o.Data))
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(out)/n, "parquet-B/sample")
	b.ReportMetric(float64(bytes)/n, "line-B/sample")
}
