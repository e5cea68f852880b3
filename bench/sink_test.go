package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/internal/testutil"
)

// The generated lines must be what the agent ships: canonical, so
// normalizing them again changes nothing.
func TestSinkBenchLinesCanonical(t *testing.T) {
	lines, keys, _ := sinkBenchLines(SinkBenchConfig{Samples: 500, Tags: 2, Fields: 4, Runs: 3})
	n, err := lineproto.NewNormalizer(lineproto.DefaultTags{})
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		out, s, err := n.Normalize(nil, l, lineproto.Nanosecond, time.Unix(0, 0))
		if err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if !bytes.Equal(out, l) {
			t.Fatalf("line %q is not canonical: normalizes to %q", l, out)
		}
		if want := string(s.Run) + "/" + string(s.Host); string(keys[i]) != want {
			t.Fatalf("key %q, want %q", keys[i], want)
		}
	}
}

func TestRunSinkBench(t *testing.T) {
	dir := t.TempDir()
	r, err := RunSinkBench(context.Background(), SinkBenchConfig{Samples: 20_000, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r)
	t.Logf("%s", b)
	if r.Samples != 20_000 || r.DeadLetters != 0 || r.Objects != 5*4 || r.ParquetBytesPerSample <= 0 || r.ParquetBytesPerSample >= r.BrokerBytesPerSample || r.SamplesPerCoreSec <= 0 {
		t.Fatalf("unexpected result %s", b)
	}
	var files int
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, _ error) error {
		if fi != nil && !fi.IsDir() {
			files++
		}
		return nil
	})
	if files != r.Objects {
		t.Fatalf("%d files in %s, want %d", files, dir, r.Objects)
	}
}

// The progress line counts samples as they are buffered and ends with the
// run: nothing is written after RunSinkBench returns.
func TestRunSinkBenchProgress(t *testing.T) {
	var out testutil.SyncBuffer
	r, err := RunSinkBench(context.Background(), SinkBenchConfig{Samples: 300_000, Progress: &out, ProgressEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if got == "" || !strings.HasPrefix(lines[0], "sink ") || !strings.Contains(lines[0], "rec/s") {
		t.Fatalf("progress output %q, want lines starting with \"sink \"", got)
	}
	last := lines[len(lines)-1]
	if f := strings.Fields(last); len(f) < 2 || f[len(f)-2] == "0" {
		t.Fatalf("last progress line %q counts no samples", last)
	}
	time.Sleep(5 * time.Millisecond)
	if out.String() != got {
		t.Fatalf("progress written after the run returned (%d samples)", r.Samples)
	}
}

// BenchmarkSinkEncode runs the sink benchmark at full size (1M samples):
// go test -run X -bench SinkEncode -benchtime 1x ./bench/
func BenchmarkSinkEncode(b *testing.B) {
	for range b.N {
		r, err := RunSinkBench(context.Background(), SinkBenchConfig{})
		if err != nil {
			b.Fatal(err)
		}
		js, _ := json.Marshal(r)
		b.Logf("%s", js)
		b.ReportMetric(r.SamplesPerCoreSec, "samples/core-s")
		b.ReportMetric(r.ParquetBytesPerSample, "parquet-B/sample")
	}
}
