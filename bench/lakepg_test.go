package bench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

func TestLakePGBenchSmall(t *testing.T) {
	res, err := RunLakePGBench(context.Background(), LakePGConfig{
		Lake:     LakeQueryConfig{Samples: 20000, Dir: t.TempDir(), FlushSamples: 1000},
		Clients:  []int{1, 3},
		Duration: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Levels) != 2 {
		t.Fatalf("%+v", res)
	}
	for _, lv := range res.Levels {
		if lv.Queries == 0 || lv.QPS <= 0 || lv.P50ms <= 0 || lv.P99ms < lv.P50ms {
			t.Errorf("level %+v", lv)
		}
	}
}

// TestLakePGBenchLarge runs the PostgreSQL wire benchmark over the lake of
// TestLakeQueryBenchLarge (SIMTEL_LAKEQUERY_SAMPLES, SIMTEL_LAKEQUERY_DIR),
// SIMTEL_LAKEPG_SECONDS per client count (default 10), and prints the
// result as JSON.
func TestLakePGBenchLarge(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("SIMTEL_LAKEPG_SECONDS"))
	res, err := RunLakePGBench(context.Background(), LakePGConfig{
		Lake:     largeLake(t, "the PostgreSQL wire benchmark"),
		Duration: time.Duration(secs) * time.Second,
		Progress: os.Stderr,
	})
	logResult(t, res, err)
}
