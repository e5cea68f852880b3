package lineproto

import (
	"fmt"
	"testing"
	"time"
)

var benchLines = []struct{ name, line string }{
	{"typical", "cpu,host=a,cpu=cpu0 usage_user=1.5,usage_system=0.3 1700000000000000000"},
	{"no-timestamp", "cpu,host=a,cpu=cpu0 usage_user=1.5,usage_system=0.3"},
	{"bare", "step_time seconds=0.0123"},
	{"event", `event,kind=checkpoint rank=12i,msg="wrote shard 3 of 8",ok=t 1700000000000000000`},
	{"telegraf-wide", "mem,host=node017,region=eu-west,rack=r12,cluster=hpc1 total=68719476736i,available=41231686041i," +
		"used=27487790695i,free=30923764531i,cached=8589934592i,buffered=1073741824i,used_percent=40.0,available_percent=60.0 1700000000000000000"},
	{"escaped", `my\ meas,run=r\ 1,tag\,key=v\=1 f\ x=1.5 1700000000000000000`},
	// What the agent benchmark's generator sends (internal/linegen).
	{"agent-step", "sim_step,env=cartpole,rank=3 reward=101.234,episode_len=517i,step_time=0.00412 1764460000000000000"},
	{"agent-gpu", "gpu,rank=3,device=3 util=0.41,mem_used=12345678901i,temp_c=61,power_w=210.5 1764460000000000000"},
}

// BenchmarkNormalize is the per-line cost of the agent's hot path.
func BenchmarkNormalize(b *testing.B) {
	n := newTestNormalizer(b, testDefaults)
	for _, bl := range benchLines {
		b.Run(bl.name, func(b *testing.B) {
			line := []byte(bl.line)
			dst := make([]byte, 0, 1024)
			now := time.Now()
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := n.Normalize(dst[:0], line, Nanosecond, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchBody(lines int) []byte {
	var body []byte
	for i := range lines {
		body = fmt.Appendf(body, "cpu,host=a,cpu=cpu%d usage_user=1.5,usage_system=0.3 %d\n", i%64, 1700000000000000000+i)
	}
	return body
}

// BenchmarkLines is the cost of splitting a body, per line.
func BenchmarkLines(b *testing.B) {
	const lines = 1000
	body := benchBody(lines)
	count := 0
	fn := func(int, []byte) error { count++; return nil }
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Lines(body, fn)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}

// BenchmarkBody is a request body end to end: split, normalize, append to
// a batch buffer.
func BenchmarkBody(b *testing.B) {
	const lines = 1000
	body := benchBody(lines)
	n := newTestNormalizer(b, testDefaults)
	batch := make([]byte, 0, 2*len(body)+lines*64)
	now := time.Now()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		batch = batch[:0]
		err := Lines(body, func(_ int, line []byte) error {
			var err error
			batch, _, err = n.Normalize(batch, line, Nanosecond, now)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}

func BenchmarkAppendStatsD(b *testing.B) {
	line := []byte("request_latency:320|ms|@0.5|#env:prod,role:web")
	dst := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendStatsD(dst[:0], line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode decodes the canonical lines of the same body, as the
// sink does with each record.
func BenchmarkDecode(b *testing.B) {
	const lines = 1000
	n := newTestNormalizer(b, testDefaults)
	var canon [][]byte
	_ = Lines(benchBody(lines), func(_ int, line []byte) error {
		out, _, err := n.Normalize(nil, line, Nanosecond, testNow)
		if err != nil {
			b.Fatal(err)
		}
		canon = append(canon, out)
		return nil
	})
	var d Decoder
	b.ReportAllocs()
	for b.Loop() {
		for _, line := range canon {
			if err := d.Decode(line); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}

// BenchmarkDecodeFields decodes the fields and timestamps of lines shaped
// like `simtel bench sink`'s (two floats, an integer, a boolean), from
// their series key on, as the rollup worker does with each record.
func BenchmarkDecodeFields(b *testing.B) {
	const lines = 1000
	canon := make([][]byte, lines)
	keys := make([]int, lines)
	for i := range canon {
		canon[i] = fmt.Appendf(nil, "reward,env0=cartpole-%d,host=node%03d,run=run-%d f0=%d.%03d,f1=%d.%d,episode=%di,done=%v %d",
			i%4, i%32, i%4, i*7919%1000, i*104729%1000, i*31%977, i%10, i/32, i%10 == 0, int64(1764417600000000000)+int64(i)*1e6)
		keys[i] = SeriesEnd(canon[i])
	}
	var d Decoder
	b.ReportAllocs()
	for b.Loop() {
		for i, line := range canon {
			if err := d.DecodeFields(line, keys[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}
