package rollup_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/rollup"
)

// produceRun produces n samples of run, one a second from start, over two
// hosts, keyed like the agent's.
func produceRun(t *testing.T, cl *kgo.Client, run string, start time.Time, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		host := fmt.Sprintf("n%d", i%2)
		ts := start.Add(time.Duration(i) * time.Second)
		recs = append(recs, &kgo.Record{Topic: "telemetry", Key: []byte(run + "/" + host), Timestamp: ts,
			Value: fmt.Appendf(nil, "cpu,host=%s,run=%s value=%d %d", host, run, i, ts.UnixNano())})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// A long sequence of ended runs keeps at most --max-summary-runs merged
// summaries in memory, every run still gets its summary, and samples of a
// run long forgotten amend its summary over all its samples: the worker
// reads the run's earlier partials back.
func TestSummaryRunsBounded(t *testing.T) {
	const parts, runs, perRun, maxRuns = 2, 12, 20, 3
	b, cl := startBroker(t, parts, "starts a broker and a rollup worker")
	reg := prometheus.NewRegistry()
	stop := runWorker(t, rollup.Config{Brokers: []string{b.Addr}, AllowedLateness: time.Second, IdleTimeout: -1,
		CommitInterval: 200 * time.Millisecond, MaxSummaryRuns: maxRuns, Registry: reg, Logger: testLogger(t)})
	defer stop()

	start := time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC)
	runStart := func(i int) time.Time { return start.Add(time.Duration(i) * time.Hour) }
	for i := range runs {
		run := fmt.Sprintf("r%02d", i)
		produceRun(t, cl, run, runStart(i), perRun)
		endRun(t, b.Addr, run, []string{"n0", "n1"}, runStart(i), runStart(i).Add(time.Minute))
		waitSummary(t, b.Addr, run, "cpu.value", perRun)
		if held := counter(t, reg, "simtel_rollup_summary_runs"); held > maxRuns {
			t.Errorf("after run %s: %v run summaries held, want at most %d", run, held, maxRuns)
		}
	}
	testutil.WaitFor(t, time.Minute, "the evictions", func() error {
		held := counter(t, reg, "simtel_rollup_summary_runs")
		if ev := counter(t, reg, "simtel_rollup_summary_evictions_total"); held > maxRuns || held+ev != runs {
			return fmt.Errorf("%v run summaries held, %v evicted; want at most %d held, %d in all", held, ev, maxRuns, runs)
		}
		return nil
	})

	// r00 was forgotten long ago: five more samples amend its summary,
	// which counts all 25.
	rebuilds := counter(t, reg, "simtel_rollup_summary_rebuilds_total")
	produceRun(t, cl, "r00", runStart(0).Add(30*time.Second), 5)
	s := waitSummary(t, b.Addr, "r00", "cpu.value", perRun+5)
	if m := metricOf(s, "cpu.value"); *m.Sum != float64(perRun*(perRun-1)/2+0+1+2+3+4) || *m.Max != perRun-1 {
		t.Errorf("amended r00 cpu.value %+v, want sum %d max %d", m, perRun*(perRun-1)/2+10, perRun-1)
	}
	if got := counter(t, reg, "simtel_rollup_summary_rebuilds_total"); got <= rebuilds {
		t.Errorf("rebuilds %v, want more than %v: the amended run was not read back", got, rebuilds)
	}
	if s.State != "completed" || s.WallTime != 60 {
		t.Errorf("amended r00: state %q wall %v, want completed 60", s.State, s.WallTime)
	}
}
