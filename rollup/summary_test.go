package rollup_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/rollup"
	"github.com/simtel/simtel/scheduler"
)

// endRun publishes a run's start on nodes at start and its completion
// (exit code 0) at end, refreshing the run registry.
func endRun(t *testing.T, addr, run string, nodes []string, start, end time.Time) {
	t.Helper()
	reg, err := scheduler.Open(scheduler.Config{Brokers: []string{addr}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	zero := 0
	for _, e := range []scheduler.Event{
		{Type: scheduler.EventStarted, Run: run, JobID: "77", User: "ada", Nodes: nodes, Time: start},
		{Type: scheduler.EventCompleted, Run: run, Time: end, ExitCode: &zero, Source: scheduler.SourceJobComp},
	} {
		if _, err := reg.Record(context.Background(), e, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitSummary polls the summary topic until the run's summary of metric
// counts want values.
func waitSummary(t *testing.T, addr, run, metric string, want int64) rollup.Summary {
	t.Helper()
	var s rollup.Summary
	testutil.WaitFor(t, 2*time.Minute, "the summary of run "+run, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		got, ok, err := rollup.ReadSummary(ctx, rollup.Config{Brokers: []string{addr}}, run)
		if err != nil || !ok {
			return fmt.Errorf("no summary yet (%v)", err)
		}
		m := metricOf(got, metric)
		if m == nil || m.Count != want {
			return fmt.Errorf("metric %s: %+v, want count %d", metric, m, want)
		}
		s = got
		return nil
	})
	return s
}

func metricOf(s rollup.Summary, metric string) *rollup.MetricSummary {
	for i := range s.Metrics {
		if s.Metrics[i].Metric == metric {
			return &s.Metrics[i]
		}
	}
	return nil
}

// A run's summary, from samples spread over partitions and the run's end
// in the registry, equals DuckDB's aggregates over the raw samples in the
// lake (count, min, max, sum exactly, p95 within the sketch's accuracy),
// in the summary topic and in the lake's summary.runs; samples arriving
// after the summary amend it.
func TestRunSummary(t *testing.T) {
	const parts = 3
	b, cl := startBroker(t, parts, "starts a broker, a rollup worker and a sink")
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	hosts := []string{"n1", "n2", "n3", "n4"}
	ss := genSamples(hosts, start, time.Second, 900)
	produce(t, cl, "telemetry", ss)
	end := start.Add(16 * time.Minute)
	endRun(t, b.Addr, "r1", hosts, start, end)

	stop := runWorker(t, rollup.Config{Brokers: []string{b.Addr}, AllowedLateness: 30 * time.Second, IdleTimeout: -1,
		CommitInterval: 300 * time.Millisecond, Logger: testLogger(t)})
	defer stop()
	st, stopSink := runSink(t, b.Addr, []string{"telemetry", rollup.DefaultSummaryTopic})
	defer stopSink()
	var err error

	s := waitSummary(t, b.Addr, "r1", "cpu.value", int64(len(ss)))
	if s.State != scheduler.StateCompleted || s.ExitCode == nil || *s.ExitCode != 0 || s.JobID != "77" || s.User != "ada" {
		t.Errorf("run figures: state %q exit %v job %q user %q, want completed 0 77 ada", s.State, s.ExitCode, s.JobID, s.User)
	}
	if s.WallTime != end.Sub(start).Seconds() {
		t.Errorf("wall time %v s, want %v", s.WallTime, end.Sub(start).Seconds())
	}
	if !slices.Equal(s.Nodes, hosts) || !slices.Equal(s.Hosts, hosts) {
		t.Errorf("nodes %v, hosts %v, want %v", s.Nodes, s.Hosts, hosts)
	}
	if m := metricOf(s, "cpu.phase"); m == nil || m.Last != "p8" {
		t.Errorf("cpu.phase: %+v, want last p8", m)
	}
	if m := metricOf(s, "cpu.steps"); m == nil || m.Count != int64(len(ss)) || *m.Max != 899 || m.Last != 899.0 {
		t.Errorf("cpu.steps: %+v, want count %d, max and last 899", m, len(ss))
	}

	var eng *query.Engine
	openLake := func(check string, want int) {
		t.Helper()
		testutil.WaitFor(t, 2*time.Minute, check, func() error {
			if err = reopenLake(&eng, st); err != nil {
				return err
			}
			var n int
			if err := eng.DB().QueryRow(check).Scan(&n); err != nil {
				return err
			}
			if n != want {
				return fmt.Errorf("%d, want %d", n, want)
			}
			return nil
		})
	}
	openLake("SELECT count(*) FROM cpu", len(ss))
	// The lake holds every version of the summary; the latest by updated
	// is the summary.
	const latestSQL = `(SELECT * FROM summary.runs QUALIFY row_number() OVER (PARTITION BY run, metric ORDER BY updated DESC) = 1)`
	openLake("SELECT count FROM "+latestSQL+" WHERE run = 'r1' AND metric = 'cpu.value'", len(ss))
	defer func() { eng.Close() }()

	var c, sc int64
	var mn, smn, mx, smx, sum, ssum, last, smean, sp95, slast float64
	var vs []any
	err = eng.DB().QueryRow(`WITH raw AS (SELECT count(value) AS c, min(value) AS mn, max(value) AS mx, sum(value) AS s,
			list(value ORDER BY value) AS vs, arg_max(value, time) AS last FROM cpu WHERE run = 'r1')
		SELECT raw.c, r.count, raw.mn, r.min, raw.mx, r.max, raw.s, r.sum, raw.last, r.mean, r.p95, r.last, raw.vs
		FROM raw, `+latestSQL+` AS r WHERE r.run = 'r1' AND r.metric = 'cpu.value'`).
		Scan(&c, &sc, &mn, &smn, &mx, &smx, &sum, &ssum, &last, &smean, &sp95, &slast, &vs)
	if err != nil {
		t.Fatal(err)
	}
	if c != sc || mn != smn || mx != smx || sum != ssum {
		t.Errorf("summary.runs count %d min %v max %v sum %v, DuckDB %d %v %v %v", sc, smn, smx, ssum, c, mn, mx, sum)
	}
	if smean != sum/float64(c) {
		t.Errorf("mean %v, want %v", smean, sum/float64(c))
	}
	sorted := make([]float64, len(vs))
	for i, v := range vs {
		sorted[i] = v.(float64)
	}
	if err := checkQuantile(sorted, 0.95, sp95); err != nil {
		t.Error(err)
	}
	// The last sample time has one value per host; which host's record
	// came last is up to the partitions, so last is one of them.
	lastT := ss[len(ss)-1].t
	var lastVals []float64
	for _, x := range ss {
		if x.t == lastT {
			lastVals = append(lastVals, x.value)
		}
	}
	if !slices.Contains(lastVals, slast) {
		t.Errorf("last %v, want one of %v", slast, lastVals)
	}
	// The topic's summary says the same.
	m := metricOf(s, "cpu.value")
	if m.Count != sc || *m.Min != smn || *m.Max != smx || *m.Sum != ssum || *m.P95 != sp95 || m.Last != slast {
		t.Errorf("summary topic %+v differs from summary.runs count %d min %v max %v sum %v p95 %v last %v", m, sc, smn, smx, ssum, sp95, slast)
	}

	// Late samples of the ended run amend its summary: a new version in
	// the topic and in the lake, where the latest by updated wins.
	late := []sample{{host: "n2", t: start.Add(15 * time.Minute).UnixNano(), value: 1e6, steps: 900, phase: "late"}}
	produce(t, cl, "telemetry", late)
	s2 := waitSummary(t, b.Addr, "r1", "cpu.value", int64(len(ss)+1))
	if m := metricOf(s2, "cpu.value"); *m.Max != 1e6 || *m.Sum != ssum+1e6 || m.Last != 1e6 {
		t.Errorf("amended cpu.value %+v, want max and last 1e6, sum %v", m, ssum+1e6)
	}
	if !s2.Updated.After(s.Updated) {
		t.Errorf("amended summary updated %v, not after %v", s2.Updated, s.Updated)
	}
	openLake("SELECT count FROM "+latestSQL+" WHERE run = 'r1' AND metric = 'cpu.value'", len(ss)+1)
	var latest float64
	if err := eng.DB().QueryRow("SELECT max FROM " + latestSQL + " WHERE run = 'r1' AND metric = 'cpu.value'").Scan(&latest); err != nil {
		t.Fatal(err)
	}
	if latest != 1e6 {
		t.Errorf("latest max in summary.runs %v, want 1e6", latest)
	}
}

// A run that ends without a single sample still gets its summary: the
// run's figures (state, exit code, nodes, wall time) and no metrics.
func TestEmptyRunSummary(t *testing.T) {
	b, _ := startBroker(t, 2, "starts a broker and a rollup worker")
	stop := runWorker(t, rollup.Config{Brokers: []string{b.Addr}, AllowedLateness: time.Second, IdleTimeout: -1,
		CommitInterval: 200 * time.Millisecond, Logger: testLogger(t)})
	defer stop()
	start := time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)
	nodes := []string{"n1", "n2"}
	endRun(t, b.Addr, "empty", nodes, start, start.Add(90*time.Second))
	var s rollup.Summary
	testutil.WaitFor(t, 2*time.Minute, "the summary of run empty", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		got, ok, err := rollup.ReadSummary(ctx, rollup.Config{Brokers: []string{b.Addr}}, "empty")
		if err != nil || !ok {
			return fmt.Errorf("no summary yet (%v)", err)
		}
		s = got
		return nil
	})
	if s.State != scheduler.StateCompleted || s.ExitCode == nil || *s.ExitCode != 0 || s.WallTime != 90 || !slices.Equal(s.Nodes, nodes) {
		t.Errorf("summary %+v: want state completed, exit code 0, wall time 90 s, nodes %v", s, nodes)
	}
	if s.Metrics == nil || len(s.Metrics) != 0 {
		t.Errorf("metrics %+v, want none", s.Metrics)
	}
}
