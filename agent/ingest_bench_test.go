package agent

import (
	"testing"
	"time"

	"github.com/simtel/simtel/internal/linegen"
	"github.com/simtel/simtel/internal/lineproto"
)

// agentBody is n lines as the agent benchmark's generator sends them
// (internal/linegen), 1 µs apart.
func agentBody(n int) []byte {
	set := linegen.New(4096, 64, 1)
	ts := int64(1_764_460_000_000_000_000)
	var b []byte
	for i := range n {
		b = set.AppendLine(b, ts+int64(i)*1000)
	}
	return b
}

// BenchmarkIngestAdd is the agent's per-line parse cost end to end: split
// a 5000-line HTTP body, normalize each line with the agent's tags, check
// its field types (types=on; off as with --field-types-memory -1) and
// record its span and key, as ingest does before spooling (with the
// default --run-from-tag job, which looks for a job tag in each line).
func BenchmarkIngestAdd(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "types=off"
		if on {
			name = "types=on"
		}
		b.Run(name, func(b *testing.B) { benchIngestAdd(b, on) })
	}
}

func benchIngestAdd(b *testing.B, checkTypes bool) {
	const lines = 5000
	body := agentBody(lines)
	norm, err := lineproto.NewNormalizer(lineproto.DefaultTags{Host: "node017", Job: "123456", Step: "0", Run: "run-2026-12-03"})
	if err != nil {
		b.Fatal(err)
	}
	runFrom, _ := newRunFromTag("job") // the agent's default
	batch := &ingestBatch{norm: norm, runFrom: runFrom}
	if checkTypes {
		batch.types = newFieldTypes(4 << 20)
	}
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
