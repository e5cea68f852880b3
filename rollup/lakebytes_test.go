package rollup

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/sink"
)

// Lake bytes per day at the scale, 1,000 nodes × 100 series × 1
// sample/s, extrapolated from a scaled-down run in event time: the raw
// lines and the worker's output lines of each resolution go through the
// sink's encoder (the code of its flushes), and the Parquet bytes per raw
// sample and per rollup row scale to a day:
//
//	raw/day       = bytes per sample × nodes × series × 86,400
//	rollup_R/day  = bytes per row × nodes × series × 86,400 / R (in s)
//	summary.runs  = bytes per row × metrics per run × runs per day
const (
	lakeNodes        = 1000
	lakeSeries       = 100 // per node
	lakeMeasurements = 10  // each with 10 devices: 100 series per node
	secondsPerDay    = 86_400
)

// lakeLine is sample i of second sec of one series: the agent's tags
// (host, job, run, step) and a device tag, one float field following a
// random walk at 3 decimals, like a sensor or a training metric.
func lakeLine(dst []byte, meas string, node, dev int, v float64, t int64) []byte {
	dst = append(dst, meas...)
	dst = fmt.Appendf(dst, ",dev=%d,host=node%03d,job=%d,run=run-%d,step=0 value=", dev, node, 100000+node/5, node/5)
	dst = strconv.AppendFloat(dst, v, 'f', 3, 64)
	dst = append(dst, ' ')
	return strconv.AppendInt(dst, t, 10)
}

// BenchmarkLakeBytes prints the table of lake bytes per day. The
// scaled-down run is 20 nodes × 100 series for one simulated hour
// (LAKE_NODES and LAKE_MINUTES change it). Every table is encoded in
// objects of up to 1.2M rows (10 simulated minutes of raw samples), one
// per run and measurement, as flushes of that size or their compaction
// leave them; smaller objects compress worse:
//
//	go test -run X -bench LakeBytes -benchtime 1x ./rollup/
func BenchmarkLakeBytes(b *testing.B) {
	nodes, minutes := envInt(b, "LAKE_NODES", 20), envInt(b, "LAKE_MINUTES", 60)
	meas := [lakeMeasurements]string{"cpu", "mem", "gpu", "net", "disk", "power", "temp", "reward", "loss", "step_time"}
	cfg := Config{Brokers: []string{"-"}}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		rng := rand.New(rand.NewPCG(7, 7))
		vals := make([]float64, nodes*lakeSeries)
		for i := range vals {
			vals[i] = float64(rng.IntN(100_000)) / 1000
		}
		out := map[string]*tally{}
		for _, r := range Resolutions {
			out[r.Topic()] = &tally{b: b, e: sink.NewEncoder(r.Topic(), 0, true)}
		}
		var outOff int64
		w := &worker{cfg: cfg, log: cfg.Logger, m: newMetrics(prometheus.NewRegistry()), sk: newSketches(), parts: map[int32]*partition{}}
		w.send = func(_ context.Context, r *kgo.Record) {
			if t := out[r.Topic]; t != nil {
				t.add(&sink.Record{Offset: outOff, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value})
				outOff++
			}
		}
		p := newPartition(0, 0)
		w.parts[0] = p
		raw := &tally{b: b, e: sink.NewEncoder(cfg.Topic, 0, true)}
		t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC).UnixNano()
		var line []byte
		var off int64
		for sec := range minutes * 60 {
			for node := range nodes {
				for s := range lakeSeries {
					v := &vals[node*lakeSeries+s]
					*v = math.Abs(*v + float64(rng.IntN(2001)-1000)/1000)
					t := t0 + int64(sec)*int64(time.Second) + int64(rng.IntN(int(time.Second)))
					line = lakeLine(line[:0], meas[s/10], node, s%10, *v, t)
					rec := &kgo.Record{Value: line, Offset: off, Timestamp: time.Unix(0, t)}
					w.add(context.Background(), p, rec)
					raw.add(&sink.Record{Offset: off, Timestamp: rec.Timestamp, Key: []byte("run/" + strconv.Itoa(node)), Value: append([]byte(nil), line...)})
					off++
				}
			}
		}
		w.close(context.Background(), p, math.MaxInt64)

		// The run summaries of the runs seen, as if each had ended.
		sum := &tally{b: b, e: sink.NewEncoder(cfg.SummaryTopic, 0, true)}
		var sumOff int64
		for _, a := range p.runs {
			err := appendSummaryLines(a, t0, func(key, line []byte) {
				sum.add(&sink.Record{Offset: sumOff, Timestamp: time.Unix(0, t0), Key: key, Value: line})
				sumOff++
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		runs := len(p.runs)

		raw.encode()
		sum.encode()
		b.Logf("scaled-down run: %d nodes × %d series × %d min in event time; per day at %d nodes × %d series × 1 sample/s:", nodes, lakeSeries, minutes, lakeNodes, lakeSeries)
		b.Logf("%-14s %10s %11s %9s %9s  %s", "table", "rows", "bytes", "objects", "B/row", "per day")
		perSample := raw.perRow()
		b.Logf("%-14s %10d %11d %9d %9.2f  %.1f GB = %.2f B × %d × %d × 86,400", "raw", raw.rows, raw.bytes, raw.objects, perSample,
			perSample*lakeNodes*lakeSeries*secondsPerDay/1e9, perSample, lakeNodes, lakeSeries)
		b.ReportMetric(perSample, "raw-B/sample")
		for _, r := range Resolutions {
			t := out[r.Topic()]
			t.encode()
			perRow, windows := t.perRow(), secondsPerDay/r.Length.Seconds()
			b.Logf("%-14s %10d %11d %9d %9.2f  %.3f GB = %.2f B × %d × %d × %.0f", r.Topic(), t.rows, t.bytes, t.objects, perRow,
				perRow*lakeNodes*lakeSeries*windows/1e9, perRow, lakeNodes, lakeSeries, windows)
			b.ReportMetric(perRow, r.Name+"-B/row")
		}
		b.Logf("%-14s %10d %11d %9d %9.2f  %.0f B per run of %d metrics", SummaryMeasurement, sum.rows, sum.bytes, sum.objects, sum.perRow(),
			float64(sum.bytes)/float64(runs), sum.rows/int64(runs))
		b.ReportMetric(sum.perRow(), "summary-B/row")
	}
}

// tally encodes a table's records through the sink's encoder, in objects
// of up to tallyRows rows, and counts what they hold.
type tally struct {
	b                    *testing.B
	e                    *sink.Encoder
	pending              int
	rows, bytes, objects int64
}

const tallyRows = 1_200_000

func (t *tally) add(r *sink.Record) {
	t.e.Add(r)
	if t.pending++; t.pending == tallyRows {
		t.encode()
	}
}

func (t *tally) encode() {
	objs, err := t.e.Encode()
	if err != nil {
		t.b.Fatal(err)
	}
	for _, o := range objs {
		if o.Entry.Kind != "telemetry" {
			t.b.Fatalf("object %s is %s, not telemetry", o.Key, o.Entry.Kind)
		}
		t.rows += o.Entry.Rows
		t.bytes += int64(len(o.Data))
	}
	t.objects += int64(len(objs))
	t.e.Reset()
	t.pending = 0
}

func (t *tally) perRow() float64 { return float64(t.bytes) / float64(t.rows) }

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}
