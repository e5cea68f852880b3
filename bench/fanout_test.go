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

	"golang.org/x/sys/unix"
)

func TestPercentile(t *testing.T) {
	seq := func(n int) []time.Duration {
		ds := make([]time.Duration, n)
		for i := range ds {
			ds[i] = time.Duration(i+1) * time.Millisecond
		}
		return ds
	}
	for _, c := range []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", []time.Duration{7}, 50, 7},
		{"one, p99", []time.Duration{7}, 99, 7},
		{"two, p50 is the lower", []time.Duration{1, 2}, 50, 1},
		{"two, p51 is the upper", []time.Duration{1, 2}, 51, 2},
		{"1..100 p50", seq(100), 50, 50 * time.Millisecond},
		{"1..100 p99", seq(100), 99, 99 * time.Millisecond},
		{"1..100 p100", seq(100), 100, 100 * time.Millisecond},
		{"1..1000 p99", seq(1000), 99, 990 * time.Millisecond},
		{"1..1000 p99.9", seq(1000), 99.9, 999 * time.Millisecond},
		{"1..10 p99 is the max", seq(10), 99, 10 * time.Millisecond},
		{"p0 is the min", seq(10), 0, time.Millisecond},
	} {
		if got := percentile(c.ds, c.p); got != c.want {
			t.Errorf("%s: percentile(%g) = %v, want %v", c.name, c.p, got, c.want)
		}
	}
}

func TestSummarizeDurations(t *testing.T) {
	if got := summarize(nil); got != (DurationSummary{}) {
		t.Errorf("summarize(nil) = %+v, want zero", got)
	}
	// Unsorted, with a negative value (a worker that held the version
	// before Publish returned).
	ds := []time.Duration{3 * time.Second, -time.Second, 2 * time.Second, time.Second}
	got := summarize(ds)
	want := DurationSummary{Count: 4, MinS: -1, MeanS: 1.25, P50S: 1, P99S: 3, MaxS: 3}
	if got != want {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}
}

func TestParseBrokerCounters(t *testing.T) {
	c, err := parseBrokerCounters(openTestdata(t, "broker-metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Fetched != 82051951599 {
		t.Errorf("fetched = %d, want 82051951599", c.Fetched)
	}
	if got := c.Response["Fetch"]; got != 82054251435 {
		t.Errorf("Fetch response bytes = %d, want 82054251435", got)
	}
	if got := c.Response["Produce"]; got != 21240 {
		t.Errorf("Produce response bytes = %d, want 21240", got)
	}
	if got, want := c.responseTotal(), int64(82054251435+21240+2487432+4944+9780+180+312+514728+933850); got != want {
		t.Errorf("response total = %d, want %d", got, want)
	}

	for _, bad := range []struct{ name, text string }{
		{"not a broker", "# TYPE go_goroutines gauge\ngo_goroutines 3\n"},
		{"not an exposition", "simtel_broker_fetched_bytes_total{\n"},
		{"response without api", "simtel_broker_fetched_bytes_total 1\nsimtel_broker_response_bytes_total{x=\"y\"} 2\n"},
	} {
		if _, err := parseBrokerCounters(strings.NewReader(bad.text)); err == nil {
			t.Errorf("%s: got no error", bad.name)
		}
	}
	// Before the first response the vector has no series: zero, no error.
	c, err = parseBrokerCounters(strings.NewReader("# TYPE simtel_broker_fetched_bytes_total counter\nsimtel_broker_fetched_bytes_total 0\n"))
	if err != nil || c.Fetched != 0 || c.responseTotal() != 0 {
		t.Errorf("fresh broker: got %+v, %v; want zeros", c, err)
	}
}

func TestEgressBetween(t *testing.T) {
	a := brokerCounters{Fetched: 100, Response: map[string]int64{"Fetch": 1000, "Metadata": 50}}
	b := brokerCounters{Fetched: 600, Response: map[string]int64{"Fetch": 1700, "Metadata": 50, "ListOffsets": 30}}
	e := egressBetween(a, b)
	if e.FetchedBytes != 500 || e.FetchResponseBytes != 700 || e.ResponseBytes != 730 {
		t.Errorf("egress = %+v, want fetched 500, fetch responses 700, all 730", e)
	}
	if _, ok := e.ByAPI["Metadata"]; ok || e.ByAPI["ListOffsets"] != 30 {
		t.Errorf("by API = %v, want ListOffsets 30 and no Metadata", e.ByAPI)
	}
}

func TestJudge(t *testing.T) {
	res := &FanoutResult{
		Settings:    FanoutSettings{Mode: FanoutNode, Nodes: 50, WorkersPerNode: 20, Workers: 1000, Fetchers: 50, Size: 1 << 20},
		Held:        1000,
		FromStart:   DurationSummary{Count: 1000, MaxS: 3},
		NodeInstall: &DurationSummary{Count: 50, MaxS: 1},
		Egress:      &Egress{ResponseBytes: 100 << 20},
		Loopback:    &Loopback{BytesPerS: 50 << 20},
		BenchCPUS:   4.5,
		BrokerCPUS:  1.5,
	}
	res.Settings.CPUs = 2
	res.judge()
	tg := res.Targets
	if tg.CPUFloorS != 3 || tg.LastOverCPUFloor != 1 {
		t.Errorf("targets %+v: want a CPU floor of (4.5+1.5)/2 = 3 s, last worker at 1×", tg)
	}
	if tg.LimitS != 2 || tg.LastOverLimit != 1.5 || tg.NodesOverLimit != 0.5 || !tg.TimeMet {
		t.Errorf("targets %+v: want limit 2 s, last 1.5×, nodes 0.5×, met", tg)
	}
	if tg.EgressPerWorker != float64(100<<20)/1000 || tg.EgressPerFetcherOverSize != 2 {
		t.Errorf("targets %+v: want %g per worker, 2× size per fetcher", tg, float64(100<<20)/1000)
	}
	res.FromStart.MaxS = 4.5
	res.judge()
	if res.Targets.TimeMet {
		t.Errorf("last worker at 2.25× the limit: got met")
	}
	res.FromStart.MaxS, res.Held = 1, 999
	res.judge()
	if res.Targets.TimeMet {
		t.Errorf("a worker missing: got met")
	}
}

func TestMeasureLoopback(t *testing.T) {
	lb, err := MeasureLoopback(context.Background(), 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Bytes < loopbackWrite || lb.Seconds < 0.1 || lb.BytesPerS <= 0 {
		t.Errorf("loopback %+v: want at least one write over at least 100ms", lb)
	}
}

// fanoutFixture is a node step and a direct step as fanout.sh records them.
func fanoutFixture() []FanoutStep {
	node := &FanoutResult{
		Kind:        "fanout",
		Settings:    FanoutSettings{Mode: FanoutNode, Nodes: 50, WorkersPerNode: 20, Workers: 1000, Fetchers: 50, Size: 64 << 20},
		Version:     2,
		PublishS:    3.9,
		Held:        1000,
		FromStart:   DurationSummary{Count: 1000, P50S: 5.04, P99S: 6.86, MaxS: 6.89},
		FromReturn:  DurationSummary{Count: 1000, P50S: 1.1, P99S: 2.93, MaxS: 2.95},
		NodeInstall: &DurationSummary{Count: 50, P50S: 3.94, P99S: 6.83, MaxS: 6.83},
		Egress:      &Egress{ResponseBytes: 3_360_000_000, FetchedBytes: 3_355_000_000},
		Loopback:    &Loopback{BytesPerS: 4.69e9},
		Verified:    "hashed",
		BenchCPUS:   8.1,
		BrokerCPUS:  0.6,
	}
	node.Settings.CPUs = 2
	node.judge()
	direct := &FanoutResult{
		Kind:       "fanout",
		Settings:   FanoutSettings{Mode: FanoutDirect, Nodes: 5, WorkersPerNode: 20, Workers: 100, Fetchers: 100, Size: 64 << 20, PollInterval: "500ms"},
		Version:    2,
		Held:       100,
		FromStart:  DurationSummary{Count: 100, P50S: 3.7, P99S: 4.09, MaxS: 4.09},
		FromReturn: DurationSummary{Count: 100, P50S: 3.52, P99S: 3.91, MaxS: 3.91},
		Egress:     &Egress{ResponseBytes: 6_760_000_000},
		Loopback:   &Loopback{BytesPerS: 4.78e9},
		Polls:      143,
	}
	direct.judge()
	return []FanoutStep{
		{Label: "node 50×20", Command: "simtel broker ... &\nsimtel bench fanout --mode node", Result: node},
		{Label: "direct 100", Command: "simtel broker ... &\nsimtel bench fanout --mode direct", Result: direct},
	}
}

func TestCompareFanout(t *testing.T) {
	steps := fanoutFixture()
	c := compareFanout(steps)
	if c == nil {
		t.Fatal("no comparison")
	}
	// 3.36 GB / 1000 workers against 6.76 GB / 100 workers: 20.1×.
	if c.Ratio < 20.1 || c.Ratio > 20.2 || !c.Met || c.WorkersPerNode != 20 {
		t.Errorf("comparison %+v: want a ratio of 20.1, met, 20 workers per node", c)
	}
	if want := float64(64<<20) / 3.36e6; c.RatioFloor != want {
		t.Errorf("ratio floor %g, want %g", c.RatioFloor, want)
	}
	steps[1].Result.Egress.ResponseBytes = 6_000_000_000
	steps[1].Result.judge()
	if c := compareFanout(steps); c.Met {
		t.Errorf("ratio %.1f below 20: got met", c.Ratio)
	}
	steps[1].Error = "exit status 1"
	if c := compareFanout(steps); c != nil {
		t.Errorf("failed direct step: got comparison %+v, want none", c)
	}
}

func TestRenderFanoutResults(t *testing.T) {
	run := &FanoutRun{ID: "2026-11-29-150000", Date: "2026-11-29T15:00:00Z", Host: "2 CPUs", Command: "bench/fanout.sh", Steps: fanoutFixture()}
	run.Comparison = compareFanout(run.Steps)
	earlier := &FanoutRun{ID: "2026-11-28-150000", Steps: fanoutFixture()}
	out := RenderFanoutResults(run, "results/fanout", []*FanoutRun{earlier, run})
	wantAll(t, "rendered fanout results", out,
		"| measure | node 50×20 | direct 100 |",
		"| **worker holds it, from publish start, p50 / p99 / max s** | **5.04 / 6.86 / 6.89** | **3.70 / 4.09 / 4.09** |",
		"| node installed, from publish start, p50 / p99 / max s | 3.94 / 6.83 / 6.83 | – |",
		"| broker egress (all responses) | 3.36 GB | 6.76 GB |",
		"| **egress per worker** | **3.4 MB** | **67.6 MB** |",
		"| Latest polls | – | 143 |",
		"| CPU floor: (bench + broker CPU s) ÷ CPUs, s | 4.35 | – |",
		"| last worker ÷ CPU floor | 1.58× | – |",
		"the ratio would be 19.97×",
		"**20.1×** less",
		"target ≥ 20× (the workers per node): ✓",
		"- **Time, node 50×20**: the last worker held the version 6.89 s after the publish started; egress ÷ loopback bandwidth is 0.72 s, so **9.62×**, target ≤ 2×: ✗",
		"# node 50×20\nsimtel broker ... &\nsimtel bench fanout --mode node\n# direct 100\nsimtel bench fanout --mode direct\n",
		"Earlier runs: 1 more in `results/fanout/`, each with its figures and commands.",
	)
	if strings.Contains(out, earlier.ID) {
		t.Errorf("an earlier run is listed in the page's results:\n%s", out)
	}
	// A failed step renders as a column of dashes and a note.
	run.Steps = append(run.Steps, FanoutStep{Label: "node 50×1", Command: "x", Error: "exit status 1: boom"})
	out = RenderFanoutResults(run, "results/fanout", nil)
	if !strings.Contains(out, "| version size | 64 MiB | 64 MiB | – |") || !strings.Contains(out, "**node 50×1 failed**: `exit status 1: boom`") {
		t.Errorf("failed step not rendered:\n%s", out)
	}
}

func TestPublishFanout(t *testing.T) {
	dir := t.TempDir()
	runPath := filepath.Join(dir, "run.json")
	for _, st := range fanoutFixture() {
		b, err := json.Marshal(st.Result)
		if err != nil {
			t.Fatal(err)
		}
		if err := AddFanoutStep(runPath, st.Label, st.Command, "", b); err != nil {
			t.Fatal(err)
		}
	}
	if err := AddFanoutStep(runPath, "broken", "x", "", []byte(`{"kind":"agent"}`)); err == nil {
		t.Error("an agent result was accepted as a fan-out step")
	}
	if err := AddFanoutStep(runPath, "crashed", "x", "exit status 2", []byte("panic: ...")); err != nil {
		t.Errorf("a failed step without output: %v", err)
	}
	readme := filepath.Join(dir, "README.md")
	doc := "# bench\n\n<!-- fanout:start -->\n## Fan-out\n\nprose\n\n" + FanoutMarkerStart + "\nold\n" + FanoutMarkerEnd + "\n\nmore prose\n<!-- fanout:end -->\n\ntail\n"
	if err := os.WriteFile(readme, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	results := filepath.Join(dir, "results", "fanout")
	path, err := PublishFanout(PublishConfig{RunPath: runPath, ResultsDir: results, README: readme, ID: "run-1", Date: "2026-11-29T15:00:00Z", Host: "test", Command: "bench/fanout.sh"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := readFanoutRun(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Steps) != 3 || r.Comparison == nil || !r.Comparison.Met || r.ID != "run-1" {
		t.Errorf("published run: %d steps, comparison %+v, id %q; want 3 steps, a met comparison, run-1", len(r.Steps), r.Comparison, r.ID)
	}
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if strings.Contains(got, "\nold\n") || !strings.Contains(got, "Latest run: `run-1`") || path != filepath.Join(results, "run-1.json") {
		t.Errorf("README section not replaced:\n%s", got)
	}
	if !strings.HasPrefix(got, "# bench\n\n<!-- fanout:start -->\n## Fan-out\n\nprose\n\n") || !strings.HasSuffix(got, "\n\nmore prose\n<!-- fanout:end -->\n\ntail\n") {
		t.Errorf("README outside the results markers changed:\n%s", got)
	}
	if _, err := PublishFanout(PublishConfig{RunPath: runPath, ResultsDir: results, README: readme, ID: "../x"}); err == nil {
		t.Error("an id with a slash was accepted")
	}
}

func TestPrintFanout(t *testing.T) {
	var b bytes.Buffer
	for _, st := range fanoutFixture() {
		PrintFanout(&b, st.Result)
	}
	PrintFanout(&b, &FanoutResult{Settings: FanoutSettings{Mode: FanoutNode, Workers: 6}})
	out := b.String()
	wantAll(t, "fanout output", out,
		"fanout node: 50 nodes × 20 workers (50 fetching from the broker), 67.1 MB as version 2",
		"workers hold it, from the publish start:  p50 5.040 s, p99 6.860 s, max 6.890 s",
		"1000 of 1000 workers hold it",
		"egress / loopback = 0.72 s; last worker 6.89 s = 9.62× that (target ≤ 2×: missed)",
		"143 Latest polls (0 failed)",
		"0 of 6 workers hold it",
	)
}

func TestFanoutConfigValidate(t *testing.T) {
	ok := FanoutConfig{Client: Client{Brokers: []string{"127.0.0.1:9092"}}}
	checkRefusals(t, ok, []refusal[FanoutConfig]{
		{"no brokers", func(c *FanoutConfig) { c.Brokers = nil }, "no brokers"},
		{"bad mode", func(c *FanoutConfig) { c.Mode = "tree" }, "is not node"},
		{"negative nodes", func(c *FanoutConfig) { c.Nodes = -1 }, "both must be positive"},
		{"negative size", func(c *FanoutConfig) { c.Size = -5 }, "size -5"},
		{"bad policy", func(c *FanoutConfig) { c.Policy = "a/b" }, "a/b"},
		{"metrics not a URL", func(c *FanoutConfig) { c.BrokerMetrics = "127.0.0.1:9644/metrics" }, "broker metrics"},
		{"tiny read buffer", func(c *FanoutConfig) { c.ReadBuffer = 16 }, "read buffer"},
		{"bad worker load", func(c *FanoutConfig) { c.WorkerLoad = "copy" }, "worker load"},
		{"tiny poll", func(c *FanoutConfig) { c.PollInterval = time.Microsecond }, "poll interval"},
	})
}

// TestWorkerReadChecks: what a worker reads is compared with the published
// bytes when asked, and a difference anywhere is reported.
func TestWorkerReadChecks(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	path := filepath.Join(t.TempDir(), "2")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if n, err := readWeights(path, buf, want); err != nil || n != int64(len(want)) {
		t.Errorf("readWeights of the right bytes: %d, %v; want %d, nil", n, err, len(want))
	}
	if n, err := readWeights(path, buf, nil); err != nil || n != int64(len(want)) {
		t.Errorf("readWeights without a check: %d, %v; want %d, nil", n, err, len(want))
	}
	bad := bytes.Clone(want)
	bad[50000] ^= 1
	if _, err := readWeights(path, buf, bad); err == nil || !strings.Contains(err.Error(), "[49152, 53248)") {
		t.Errorf("readWeights of a differing file: %v, want a difference in [49152, 53248)", err)
	}
	if _, err := readWeights(path, buf, want[:1000]); err == nil {
		t.Error("readWeights of a longer file: got no error")
	}
	if _, err := readWeights(filepath.Join(t.TempDir(), "missing"), buf, nil); err == nil {
		t.Error("readWeights of a missing file: got no error")
	}

	m, err := mapWeights(path, int64(len(want)), want)
	if err != nil || !bytes.Equal(m, want) {
		t.Errorf("mapWeights of the right bytes: %d bytes, %v; want %d, nil", len(m), err, len(want))
	}
	if len(m) > 0 {
		unix.Munmap(m)
	}
	m, err = mapWeights(path, int64(len(want)), nil)
	if err != nil || len(m) != len(want) || m[50000] != want[50000] {
		t.Errorf("mapWeights without a check: %d bytes, %v; want %d, nil", len(m), err, len(want))
	}
	if len(m) > 0 {
		unix.Munmap(m)
	}
	if _, err := mapWeights(path, int64(len(want)), bad); err == nil || !strings.Contains(err.Error(), "at byte 50000") {
		t.Errorf("mapWeights of a differing file: %v, want a difference at byte 50000", err)
	}
	if _, err := mapWeights(path, int64(len(want))+1, nil); err == nil || !strings.Contains(err.Error(), "the manifest says") {
		t.Errorf("mapWeights of a file shorter than the manifest: %v, want a size error", err)
	}
	if _, err := mapWeights(filepath.Join(t.TempDir(), "missing"), 1, nil); err == nil {
		t.Error("mapWeights of a missing file: got no error")
	}
	empty := filepath.Join(t.TempDir(), "3")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := mapWeights(empty, 0, nil); err != nil || m == nil || len(m) != 0 {
		t.Errorf("mapWeights of an empty file: %v, %v; want an empty slice", m, err)
	}

	w := &checkWriter{want: want}
	w.Write(want[:100])
	w.Write(want[100:])
	if w.err != nil || w.n != int64(len(want)) {
		t.Errorf("checkWriter of the right bytes: %d, %v", w.n, w.err)
	}
	w = &checkWriter{want: want}
	w.Write(want[:100])
	w.Write(bad[100:])
	if w.err == nil || w.n != int64(len(want)) {
		t.Errorf("checkWriter of differing bytes: %d, %v; want the count and an error", w.n, w.err)
	}
	w = &checkWriter{want: want[:10]}
	w.Write(want[:11])
	if w.err == nil {
		t.Error("checkWriter of too many bytes: got no error")
	}
}
