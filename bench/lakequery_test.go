package bench

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
)

func TestLakeQueryBenchSmall(t *testing.T) {
	dir := t.TempDir()
	cfg := LakeQueryConfig{Samples: 200_000, Dir: dir, Runs: 5, Partitions: 2, FlushSamples: 20_000}
	res, err := RunLakeQueryBench(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Every run has 1/5 of the samples, 3/4 of which are cpu.
	if res.Samples != 200_000 || res.Rows != 200_000/5*3/4 {
		t.Errorf("samples %d, rows %d; want 200000 and %d", res.Samples, res.Rows, 200_000/5*3/4)
	}
	// The run's cpu objects only: one per flush (5 flushes per partition).
	if res.RunObjects != 10 || res.Objects != 10*5*2 {
		t.Errorf("objects: run %d of %d; want 10 of 100", res.RunObjects, res.Objects)
	}
	if res.Max != 99.6 || res.Avg <= 0 || res.ColdSeconds <= 0 || res.WarmSeconds <= 0 || res.BuildSeconds <= 0 {
		t.Errorf("result %+v", res)
	}
	// A second run reuses the lake.
	res2, err := RunLakeQueryBench(context.Background(), cfg)
	if err != nil || res2.BuildSeconds != 0 || res2.Rows != res.Rows {
		t.Errorf("second run: %+v, %v; want the lake reused", res2, err)
	}
}

// TestLakeQueryBenchLarge runs the benchmark at the size in
// SIMTEL_LAKEQUERY_SAMPLES (e.g. 100000000) in SIMTEL_LAKEQUERY_DIR (kept,
// so a second run reuses the lake) and prints the result as JSON.
func TestLakeQueryBenchLarge(t *testing.T) {
	res, err := RunLakeQueryBench(context.Background(), largeLake(t, "the lake query benchmark"))
	logResult(t, res, err)
}

// largeLake is the lake of the benchmarks at size: SIMTEL_LAKEQUERY_SAMPLES
// samples in SIMTEL_LAKEQUERY_DIR (default: a directory of the test's). The
// test, which runs bench, is skipped without SIMTEL_LAKEQUERY_SAMPLES.
func largeLake(t *testing.T, bench string) LakeQueryConfig {
	n, err := strconv.Atoi(os.Getenv("SIMTEL_LAKEQUERY_SAMPLES"))
	if err != nil {
		t.Skip("set SIMTEL_LAKEQUERY_SAMPLES (and SIMTEL_LAKEQUERY_DIR) to run " + bench + " at size")
	}
	dir := os.Getenv("SIMTEL_LAKEQUERY_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	return LakeQueryConfig{Samples: n, Dir: dir, Progress: os.Stderr}
}

// logResult logs a benchmark's result as JSON, or fails the test with err.
func logResult(t *testing.T, res any, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("%s", b)
}
