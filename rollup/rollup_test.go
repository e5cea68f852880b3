package rollup_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/rollup"
	"github.com/simtel/simtel/sink"
)

// sample is one generated telemetry sample.
type sample struct {
	host  string
	t     int64 // unix ns
	value float64
	steps int64
	phase string
}

func (s sample) line() []byte {
	return []byte(fmt.Sprintf("cpu,host=%s,run=r1 phase=%q,steps=%di,value=%s %d", s.host, s.phase, s.steps, lineFloat(s.value), s.t))
}

func lineFloat(v float64) string { return fmt.Sprintf("%g", v) }

// genSamples makes n samples per host, one every step, from start. The
// values are multiples of 0.25 below 2^20, so every sum is exact in any
// order and the rollups' sums must equal the reference exactly.
func genSamples(hosts []string, start time.Time, step time.Duration, n int) []sample {
	var out []sample
	for i := range n {
		for h, host := range hosts {
			x := float64((i*7919+h*104729)%4001) / 4
			if i%50 == 7 {
				x = -x // negative values take the sketch's other store
			}
			out = append(out, sample{host: host, t: start.Add(time.Duration(i) * step).UnixNano(), value: x, steps: int64(i), phase: fmt.Sprintf("p%d", i/100)})
		}
	}
	return out
}

func produce(t *testing.T, cl *kgo.Client, topic string, ss []sample) {
	t.Helper()
	var recs []*kgo.Record
	for _, s := range ss {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("r1/" + s.host), Value: s.line(), Timestamp: time.Unix(0, s.t)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// flush produces to every partition a sample of another measurement far
// after at, so every window of the data before it closes.
func flush(t *testing.T, cl *kgo.Client, topic string, partitions int32, at time.Time) {
	t.Helper()
	for p := range partitions {
		line := fmt.Sprintf("zz_flush,run=r1 x=1 %d", at.UnixNano())
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: p, Value: []byte(line)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// startBroker starts an in-process broker with the topic telemetry of
// parts partitions, skipping the test under -short (why says what it
// starts), and returns it with a manualClient.
func startBroker(t *testing.T, parts int32, why string) (*brokertest.Broker, *kgo.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
	b := inproc.Start(t, brokertest.Topic("telemetry", parts), brokertest.GroupDelay(0))
	return b, manualClient(t, b.Addr)
}

func manualClient(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int {
			if len(r.Key) == 0 {
				return int(r.Partition)
			}
			h := uint32(2166136261)
			for _, c := range r.Key {
				h = (h ^ uint32(c)) * 16777619
			}
			return int(h % uint32(n))
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// agg is the reference aggregate of one series and window.
type agg struct {
	count         int64
	min, max, sum float64
	lastT         int64
	last          float64
}

// reference aggregates the samples' value field per host and window.
func reference(ss []sample, length time.Duration) map[string]*agg {
	out := map[string]*agg{}
	for _, s := range ss {
		start := s.t - s.t%int64(length)
		k := fmt.Sprintf("%s %d", s.host, start)
		a := out[k]
		if a == nil {
			a = &agg{min: s.value, max: s.value}
			out[k] = a
		}
		a.count++
		a.sum += s.value
		a.min, a.max = min(a.min, s.value), max(a.max, s.value)
		if s.t >= a.lastT {
			a.lastT, a.last = s.t, s.value
		}
	}
	return out
}

// readRollups reads a rollup topic (read_committed) to its end and returns
// the decoded value aggregates of measurement cpu by "host start", failing
// on a key produced twice.
func readRollups(t *testing.T, addr, topic string) map[string]*agg {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]*agg{}
	keys := map[string]bool{}
	var d lineproto.Decoder
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if fs.NumRecords() == 0 {
			return out
		}
		for _, r := range fs.Records() {
			if keys[string(r.Key)] {
				t.Errorf("%s: window %s emitted twice", topic, r.Key)
			}
			keys[string(r.Key)] = true
			wl, err := rollup.ParseWindowLine(&d, r.Value)
			if err != nil {
				t.Fatalf("%s: %q: %v", topic, r.Value, err)
			}
			if wl.Measurement != "cpu" {
				continue
			}
			a := &agg{}
			for _, f := range wl.Fields {
				if f.Field == "value" {
					a.count, a.min, a.max, a.sum = f.Count, f.Min, f.Max, f.Sum
					a.last, _ = f.Last.(float64)
				}
			}
			out[fmt.Sprintf("%s %d", wl.Tags["host"], wl.Start.UnixNano())] = a
		}
	}
}

func compare(t *testing.T, what string, got, want map[string]*agg) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: window %s missing", what, k)
		case g.count != w.count || g.min != w.min || g.max != w.max || g.sum != w.sum || g.last != w.last:
			t.Errorf("%s: window %s: got count %d min %v max %v sum %v last %v, want %d %v %v %v %v", what, k,
				g.count, g.min, g.max, g.sum, g.last, w.count, w.min, w.max, w.sum, w.last)
		}
	}
	for k := range got {
		if want[k] == nil {
			t.Errorf("%s: window %s not in the input", what, k)
		}
	}
}

// runSink runs a sink of the line-protocol topics into a new lake until
// stop.
func runSink(t *testing.T, addr string, topics []string) (_ store.Store, stop func()) {
	t.Helper()
	st, err := store.Open(context.Background(), "file://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sink.Run(ctx, sink.Config{Brokers: []string{addr}, Topics: topics, TelemetryTopics: topics, Store: st,
			FlushAge: 500 * time.Millisecond, JobsTopic: "-", Logger: testLogger(t)})
	}()
	return st, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink.Run: %v", err)
		}
	}
}

// reopenLake opens a query engine on the lake in st into *eng, closing
// the one it held: a test waiting for objects to reach the lake opens it
// again on each try.
func reopenLake(eng **query.Engine, st store.Store) error {
	if *eng != nil {
		(*eng).Close()
	}
	var err error
	*eng, err = query.Open(context.Background(), st, catalog.New(st), &querytest.LocalFetcher{Store: st}, query.Filter{})
	return err
}

func runWorker(t *testing.T, cfg rollup.Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rollup.Run(ctx, cfg) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rollup.Run: %v", err)
		}
	}
}

// A worker stopped while it waits for its input topic to exist stops
// cleanly: Run returns nil, as after any clean shutdown.
func TestRunStoppedBeforeTheInputTopic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	b := inproc.Start(t, brokertest.GroupDelay(0))
	cfg := rollup.Config{Brokers: []string{b.Addr}, Topic: "not-created-yet", Logger: testLogger(t)}
	stop := runWorker(t, cfg)
	time.Sleep(500 * time.Millisecond)
	stop()
}

// The rollups of a run, tiered into the lake by the sink, equal DuckDB's
// aggregates over the run's raw samples at each resolution: count, min,
// max and sum exactly, the quantiles within the sketch's relative
// accuracy.
func TestRollupsMatchDuckDB(t *testing.T) {
	const parts = 2
	b, cl := startBroker(t, parts, "starts a broker, a rollup worker and a sink")
	start := time.Date(2026, 3, 1, 12, 58, 3, 0, time.UTC)
	ss := genSamples([]string{"n1", "n2", "n3"}, start, 1500*time.Millisecond, 2000) // 50 min across an hour boundary
	produce(t, cl, "telemetry", ss)
	flush(t, cl, "telemetry", parts, start.Add(3*time.Hour))

	stop := runWorker(t, rollup.Config{Brokers: []string{b.Addr}, AllowedLateness: 30 * time.Second, IdleTimeout: -1,
		CommitInterval: 300 * time.Millisecond, Logger: testLogger(t)})
	defer stop()
	st, stopSink := runSink(t, b.Addr, []string{"telemetry", "rollup_10s", "rollup_1m", "rollup_1h"})
	defer stopSink()
	var err error

	// Each resolution's topic is flushed on its own, so wait for all.
	want := map[string]int{}
	for _, r := range rollup.Resolutions {
		want[r.Name] = len(reference(ss, r.Length))
	}
	var eng *query.Engine
	testutil.WaitFor(t, 2*time.Minute, "the rollups in the lake", func() error {
		if err = reopenLake(&eng, st); err != nil {
			return err
		}
		var raw int
		if err := eng.DB().QueryRow("SELECT count(*) FROM cpu").Scan(&raw); err != nil {
			return err
		}
		if raw != len(ss) {
			return fmt.Errorf("%d raw rows of %d", raw, len(ss))
		}
		for _, r := range rollup.Resolutions {
			var n int
			if err := eng.DB().QueryRow("SELECT count(*) FROM rollup_" + r.Name + ".cpu").Scan(&n); err != nil {
				return err
			}
			if n != want[r.Name] {
				return fmt.Errorf("%d rows in rollup_%s.cpu of %d", n, r.Name, want[r.Name])
			}
		}
		return nil
	})
	defer eng.Close()

	for _, r := range rollup.Resolutions {
		interval := fmt.Sprintf("INTERVAL %d SECOND", int(r.Length.Seconds()))
		q := `WITH raw AS (
			SELECT time_bucket(` + interval + `, time) AS t, host, count(value) AS c, min(value) AS mn, max(value) AS mx, sum(value) AS s,
			       list(value ORDER BY value) AS vs
			FROM cpu GROUP BY ALL)
		SELECT coalesce(raw.t, r.time)::VARCHAR, coalesce(raw.host, r.host), raw.c, r.value_count, raw.mn, r.value_min, raw.mx, r.value_max, raw.s, r.value_sum,
		       r.value_mean, r.value_p50, r.value_p95, r.value_p99, raw.vs
		FROM raw FULL OUTER JOIN rollup_` + r.Name + `.cpu AS r ON raw.t = r.time AND raw.host = r.host`
		rows, err := eng.DB().Query(q)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var ts, host string
			var c, rc *int64
			var mn, rmn, mx, rmx, s, rs, mean, p50, p95, p99 *float64
			var vs []any
			if err := rows.Scan(&ts, &host, &c, &rc, &mn, &rmn, &mx, &rmx, &s, &rs, &mean, &p50, &p95, &p99, &vs); err != nil {
				t.Fatal(err)
			}
			n++
			if c == nil || rc == nil {
				t.Errorf("%s %s %s: raw count %v, rollup count %v (a window on one side only)", r.Name, ts, host, c, rc)
				continue
			}
			if *c != *rc || *mn != *rmn || *mx != *rmx || *s != *rs {
				t.Errorf("%s %s %s: rollup count %d min %v max %v sum %v, DuckDB %d %v %v %v", r.Name, ts, host, *rc, *rmn, *rmx, *rs, *c, *mn, *mx, *s)
			}
			if *mean != *s/float64(*c) {
				t.Errorf("%s %s %s: mean %v, want %v", r.Name, ts, host, *mean, *s/float64(*c))
			}
			sorted := make([]float64, len(vs))
			for i, v := range vs {
				sorted[i] = v.(float64)
			}
			for _, qv := range []struct {
				q   float64
				got *float64
			}{{0.5, p50}, {0.95, p95}, {0.99, p99}} {
				if err := checkQuantile(sorted, qv.q, *qv.got); err != nil {
					t.Errorf("%s %s %s: %v", r.Name, ts, host, err)
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if want := len(reference(ss, r.Length)); n != want {
			t.Errorf("%s: %d windows, want %d", r.Name, n, want)
		}
	}
}

// checkQuantile checks a sketch's answer for quantile q against the
// sorted values: within the relative accuracy of the value of rank
// q·(n−1), or of a neighbour (the rank is a float and both sides round it).
func checkQuantile(sorted []float64, q, got float64) error {
	i := int(q * float64(len(sorted)-1))
	for _, j := range []int{i - 1, i, i + 1} {
		if j < 0 || j >= len(sorted) {
			continue
		}
		if x := sorted[j]; math.Abs(got-x) <= rollup.RelativeAccuracy*math.Abs(x)+1e-9 {
			return nil
		}
	}
	return fmt.Errorf("p%g = %v, want within %v of %v (rank %d of %d)", q*100, got, rollup.RelativeAccuracy, sorted[i], i, len(sorted))
}

// A sample later than --allowed-lateness behind its partition's latest
// sample is dropped and counted; one within it lands in its window.
func TestLateSamples(t *testing.T) {
	b, cl := startBroker(t, 1, "starts a broker")
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	ss := genSamples([]string{"n1"}, t0, time.Second, 61) // t0 .. t0+60s
	produce(t, cl, "telemetry", ss)
	// The watermark is now t0+60s−30s: the 10 s window [t0+30s, t0+40s)
	// is open, [t0, t0+10s) is closed.
	inTime := sample{host: "n1", t: t0.Add(35 * time.Second).UnixNano(), value: 1000.25, phase: "late"}
	tooLate := sample{host: "n1", t: t0.Add(5 * time.Second).UnixNano(), value: 2000.5, phase: "late"}
	reg := prometheus.NewRegistry()
	stop := runWorker(t, rollup.Config{Brokers: []string{b.Addr}, AllowedLateness: 30 * time.Second, IdleTimeout: -1,
		CommitInterval: 200 * time.Millisecond, Registry: reg, Logger: testLogger(t)})
	defer stop()
	testutil.WaitFor(t, time.Minute, "the first windows", func() error {
		if n := len(readRollups(t, b.Addr, "rollup_10s")); n < 3 {
			return fmt.Errorf("%d windows", n)
		}
		return nil
	})
	produce(t, cl, "telemetry", []sample{inTime, tooLate})
	flush(t, cl, "telemetry", 1, t0.Add(3*time.Hour))
	all := append(slices.Clone(ss), inTime)
	testutil.WaitFor(t, time.Minute, "the hourly window", func() error {
		if n := len(readRollups(t, b.Addr, "rollup_1h")); n < 1 {
			return fmt.Errorf("%d windows", n)
		}
		return nil
	})
	for _, r := range rollup.Resolutions {
		compare(t, r.Topic(), readRollups(t, b.Addr, r.Topic()), reference(all, r.Length))
	}
	if got := counter(t, reg, "simtel_rollup_late_samples_total"); got != 1 {
		t.Errorf("late samples: got %v, want 1", got)
	}
}

// counter is the value of a counter or gauge without labels in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if g := mf.GetMetric()[0].GetGauge(); g != nil {
			return g.GetValue()
		}
		return mf.GetMetric()[0].GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// The worker of TestRollupKilled, run as a process (this test binary
// again) so the test can SIGKILL it.
const workerEnv = "SIMTEL_ROLLUP_TEST_WORKER"

func TestRollupWorkerProcess(t *testing.T) {
	addr := os.Getenv(workerEnv)
	if addr == "" {
		t.Skip("helper process of TestRollupKilled")
	}
	err := rollup.Run(context.Background(), rollup.Config{Brokers: []string{addr}, AllowedLateness: 30 * time.Second,
		IdleTimeout: -1, CommitInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	fmt.Fprintln(os.Stderr, "worker stopped:", err)
	os.Exit(3)
}

func startWorkerProcess(t *testing.T, addr, logPath string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestRollupWorkerProcess$", "-test.timeout=0", "-test.v")
	cmd.Env = append(os.Environ(), workerEnv+"="+addr)
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
	return cmd
}

// The worker SIGKILLed twice in the middle of its windows: the rollups
// read back (read_committed) hold every sample exactly once, and each
// window was emitted once.
func TestRollupKilled(t *testing.T) {
	const parts = 2
	b, cl := startBroker(t, parts, "starts a broker and kills worker processes")
	start := time.Date(2026, 3, 1, 12, 41, 7, 0, time.UTC)
	ss := genSamples([]string{"n1", "n2", "n3", "n4"}, start, 700*time.Millisecond, 6000) // 70 min
	chunks := 6
	per := len(ss) / chunks
	logDir := t.TempDir()
	logOf := func(n int) string { return fmt.Sprintf("%s/worker-%d.log", logDir, n) }
	w := startWorkerProcess(t, b.Addr, logOf(0))
	committed := stateCommitted(t, cl)
	kills := 0
	for c := range chunks {
		end := (c + 1) * per
		if c == chunks-1 {
			end = len(ss)
		}
		produce(t, cl, "telemetry", ss[c*per:end])
		if c == 1 || c == 3 {
			// Once the worker runs, let it get into the chunk, then
			// kill it with windows open and, likely, a transaction in
			// flight.
			testutil.WaitFor(t, time.Minute, "the worker to start", func() error {
				b, _ := os.ReadFile(logOf(kills))
				if !strings.Contains(string(b), "partition state loaded") {
					return errors.New("not yet")
				}
				return nil
			})
			// The assertion at the end (each restarted worker reads
			// open windows back) needs a checkpoint of this worker
			// before the kill, however slow the machine is.
			testutil.WaitFor(t, 2*time.Minute, "the worker to commit a checkpoint", func() error {
				if n := stateCommitted(t, cl); n <= committed {
					return fmt.Errorf("state topic committed up to %d, as when the worker started", n)
				}
				return nil
			})
			time.Sleep(time.Duration(300+200*c) * time.Millisecond)
			if err := w.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = w.Wait()
			kills++
			committed = stateCommitted(t, cl)
			w = startWorkerProcess(t, b.Addr, logOf(kills))
		}
	}
	flush(t, cl, "telemetry", parts, start.Add(3*time.Hour))
	want := map[string]map[string]*agg{}
	for _, r := range rollup.Resolutions {
		want[r.Name] = reference(ss, r.Length)
	}
	testutil.WaitFor(t, 3*time.Minute, "every hourly window", func() error {
		got := readRollups(t, b.Addr, "rollup_1h")
		if len(got) < len(want["1h"]) {
			return fmt.Errorf("%d of %d hourly windows", len(got), len(want["1h"]))
		}
		return nil
	})
	for _, r := range rollup.Resolutions {
		compare(t, r.Topic(), readRollups(t, b.Addr, r.Topic()), want[r.Name])
	}
	// The run's aggregates, checkpointed across the kills, make its
	// summary once it ends: every sample exactly once.
	endRun(t, b.Addr, "r1", []string{"n1", "n2", "n3", "n4"}, start, start.Add(70*time.Minute))
	sum := waitSummary(t, b.Addr, "r1", "cpu.value", int64(len(ss)))
	ref := reference(ss, 24*time.Hour)
	var wantSum, wantMin, wantMax float64 = 0, math.Inf(1), math.Inf(-1)
	for _, a := range ref {
		wantSum += a.sum
		wantMin, wantMax = min(wantMin, a.min), max(wantMax, a.max)
	}
	if m := metricOf(sum, "cpu.value"); *m.Sum != wantSum || *m.Min != wantMin || *m.Max != wantMax {
		t.Errorf("summary of cpu.value: sum %v min %v max %v, want %v %v %v", *m.Sum, *m.Min, *m.Max, wantSum, wantMin, wantMax)
	}
	// The kills landed with windows open: each restarted worker read
	// open windows back from the state topic.
	for n := 1; n <= kills; n++ {
		b, err := os.ReadFile(logOf(n))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`partition state loaded.* series=[1-9]`).Match(b) {
			t.Errorf("worker %d read no open windows back:\n%s", n, b)
		}
	}
}

// stateCommitted is the sum of the state topic's last stable offsets:
// it grows when a worker commits a transaction that wrote state.
func stateCommitted(t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, rollup.DefaultStateTopic)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("listing the state topic's offsets: %v", err)
		}
		return 0
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Every rollup topic is a namespace lake queries know, so its tables
// answer to rollup_<res>.<measurement>.
func TestResolutionsAreLakeNamespaces(t *testing.T) {
	for _, r := range rollup.Resolutions {
		if ns, table, ok := query.Namespaced(r.Topic() + ".cpu"); !ok || ns != r.Topic() || table != "cpu" {
			t.Errorf("query.Namespaced(%q) = %q, %q, %v; want %q, \"cpu\", true", r.Topic()+".cpu", ns, table, ok, r.Topic())
		}
	}
}
