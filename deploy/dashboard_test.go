package deploy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
)

// dashboardExprs returns every PromQL expression of the dashboard: panel
// targets (rows included) and template variable queries.
func dashboardExprs(t *testing.T) (map[string]any, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("grafana", "simtel.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana/simtel.json does not parse: %v", err)
	}
	var exprs []string
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			for _, tg := range l(p, "targets") {
				exprs = append(exprs, s(tg, "expr"))
			}
			walk(l(p, "panels"))
		}
	}
	walk(l(dash, "panels"))
	for _, v := range l(dash, "templating", "list") {
		if q := s(v, "query", "query"); q != "" {
			exprs = append(exprs, q)
		}
	}
	return dash, exprs
}

var metricName = regexp.MustCompile(`\bsimtel_[a-z0-9_]+`)

// dashboardMetrics returns the simtel metric names the dashboard queries.
func dashboardMetrics(t *testing.T) []string {
	_, exprs := dashboardExprs(t)
	set := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			set[n] = true
		}
	}
	return keys(set)
}

// TestDashboard checks the dashboard's structure, that it covers each
// part, and (with promtool) that every expression is valid PromQL.
func TestDashboard(t *testing.T) {
	dash, exprs := dashboardExprs(t)
	if s(dash, "uid") == "" || s(dash, "title") == "" {
		t.Error("dashboard has no uid or title")
	}
	ids := map[string]bool{}
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			id := s(p, "id")
			if ids[id] {
				t.Errorf("panel id %s is used twice", id)
			}
			ids[id] = true
			if s(p, "type") != "row" {
				if s(p, "datasource", "uid") != "${datasource}" {
					t.Errorf("panel %q: datasource %v, want the ${datasource} variable", s(p, "title"), m(p, "datasource"))
				}
				if len(l(p, "targets")) == 0 {
					t.Errorf("panel %q has no queries", s(p, "title"))
				}
				for _, tg := range l(p, "targets") {
					if strings.TrimSpace(s(tg, "expr")) == "" {
						t.Errorf("panel %q has an empty query", s(p, "title"))
					}
				}
			}
			walk(l(p, "panels"))
		}
	}
	walk(l(dash, "panels"))
	vars := map[string]bool{}
	for _, v := range l(dash, "templating", "list") {
		vars[s(v, "name")] = true
	}
	for _, e := range exprs {
		for _, ref := range regexp.MustCompile(`\$(\w+)`).FindAllStringSubmatch(e, -1) {
			if !vars[ref[1]] && !strings.HasPrefix(ref[1], "__") {
				t.Errorf("query %q uses $%s, which is not a dashboard variable", e, ref[1])
			}
		}
	}

	used := map[string]bool{}
	for _, n := range dashboardMetrics(t) {
		used[n] = true
	}
	for _, want := range []string{
		// broker: requests, bytes, errors, connections, latency
		"simtel_broker_requests_total", "simtel_broker_produced_bytes_total", "simtel_broker_fetched_bytes_total",
		"simtel_broker_request_errors_total", "simtel_broker_produce_errors_total", "simtel_broker_connections",
		"simtel_broker_request_duration_seconds_bucket",
		// agent: samples in, out, dropped, spooled; parse errors; latency; spool
		"simtel_agent_samples_received_total", "simtel_agent_samples_sent_total", "simtel_agent_samples_dropped_total",
		"simtel_agent_samples_spooled_total", "simtel_agent_parse_errors_total", "simtel_agent_broker_latency_seconds_bucket",
		"simtel_agent_spool_bytes",
		// sink: every metric it has
		"simtel_sink_records_consumed_total", "simtel_sink_rows_written_total", "simtel_sink_objects_written_total",
		"simtel_sink_bytes_written_total", "simtel_sink_deadletter_records_total", "simtel_sink_flushes_total",
		"simtel_sink_flush_duration_seconds_bucket", "simtel_sink_store_errors_total", "simtel_sink_buffered_rows",
		"simtel_sink_lag_records", "simtel_sink_last_flush_timestamp_seconds",
		// policy rollout: versions and staleness
		"simtel_agent_policy_version", "simtel_agent_policy_stale_versions", "simtel_agent_policy_stale_seconds",
	} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testutil.SkipOrFail(t, "promtool is not installed; PromQL syntax not checked", "; scripts/install-deps.sh installs it under CI")
	}
	// promtool parses the expressions of recording rules: one rule per
	// query, with Grafana's variables replaced by values.
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	repl := strings.NewReplacer("$__rate_interval", "5m", "$broker", ".*", "$agent", ".*", "$sink", ".*")
	n := 0
	for _, e := range exprs {
		if strings.HasPrefix(e, "label_values(") {
			continue // a Grafana function, not PromQL
		}
		n++
		q, _ := json.Marshal(repl.Replace(e))
		fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %s\n", n, q)
	}
	path := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's %d queries: %v\n%s", n, err, out)
	}
}

// scrape returns the sample names in a /metrics page.
func scrape(url string) (map[string]bool, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names, sc.Err()
}

// waitMetrics scrapes url until every name in want is there or the time
// is up, and returns the names still missing.
func waitMetrics(t *testing.T, url string, want []string, within time.Duration) []string {
	t.Helper()
	began := time.Now()
	deadline := began.Add(within)
	defer func() {
		t.Logf("%s: waited %s for %d metric names", url, time.Since(began).Round(10*time.Millisecond), len(want))
	}()
	for {
		got, err := scrape(url)
		var missing []string
		for _, n := range want {
			if err != nil || !got[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			if err != nil {
				t.Logf("last scrape of %s: %v", url, err)
			}
			return missing
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func post(t *testing.T, url, body string, want int) {
	t.Helper()
	resp, err := http.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("POST %s: got %s (%s), want %d", url, resp.Status, strings.TrimSpace(string(b)), want)
	}
}

// TestDashboardMetricsServed starts a real broker, agent and (when the
// binary has it) sink, makes each of them do what every queried series
// needs (errors included), and checks that every metric the dashboard
// queries is in their /metrics, and that the health paths the Kubernetes
// probes use answer 200.
func TestDashboardMetricsServed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker, agent and sink processes")
	}
	bin := binary(t)
	want := map[string][]string{}
	for _, n := range dashboardMetrics(t) {
		part := strings.SplitN(n, "_", 3)[1]
		want[part] = append(want[part], n)
	}
	for part := range want {
		if part != "broker" && part != "agent" && part != "sink" {
			t.Errorf("the dashboard queries metrics of an unknown part %q: %v", part, want[part])
		}
	}
	probes := probePaths(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// Processes are started here rather than with testutil.Start so that
	// SIMTEL_TEST_BIN can name the binary; their logs are shown on failure.
	start := func(args ...string) {
		cmd := exec.Command(bin, args...)
		logf, err := os.CreateTemp(dir, args[0]+"-*.log")
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("log of simtel %s:\n%s", args[0], b)
			}
		})
	}
	checkProbes := func(cmd, base string) {
		for _, p := range probes[cmd] {
			resp, err := http.Get(base + p)
			if err != nil {
				t.Errorf("%s probe %s: %v", cmd, p, err)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s probe %s (from deploy/k8s): got %s, want 200", cmd, p, resp.Status)
			}
		}
	}

	kafka, brokerHTTP := testutil.FreePort(t), testutil.FreePort(t)
	start("broker", "--data-dir", filepath.Join(dir, "broker"), "--listen", kafka, "--http-listen", brokerHTTP,
		"--group-initial-rebalance-delay", "0s")
	testutil.WaitPort(t, kafka, nil)
	testutil.WaitPort(t, brokerHTTP, nil)

	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// A small max.message.bytes lets the test make the broker refuse a
	// sample for good (simtel_agent_samples_dropped_total{reason=
	// "rejected_by_broker"}, simtel_broker_produce_errors_total).
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("4096")}, "telemetry"); err != nil {
		t.Fatalf("create topic telemetry: %v", err)
	}
	// A second create answers TOPIC_ALREADY_EXISTS:
	// simtel_broker_request_errors_total.
	_, _ = adm.CreateTopic(ctx, 1, 1, nil, "telemetry")
	// A committed offset makes the group series appear.
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "telemetry", Partition: 0, At: 0, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "dashboard", offs); err != nil {
		t.Fatalf("commit offsets: %v", err)
	}

	agentHTTP, gossip := testutil.FreePort(t), testutil.FreePort(t)
	start("agent", "--brokers", kafka, "--spool-dir", filepath.Join(dir, "spool"), "--listen-http", agentHTTP,
		"--listen-udp", "", "--listen-tcp", "", "--policies", "dashboard", "--policy-dir", filepath.Join(dir, "policy"),
		"--gossip-listen", gossip, "--collect-interval", "-1s", "--linger", "10ms")
	testutil.WaitPort(t, agentHTTP, nil)
	base := "http://" + agentHTTP
	post(t, base+"/write?db=sim", "reward,env=cartpole value=1.5\nloss,env=cartpole value=0.25,step=3i\n", http.StatusNoContent)
	post(t, base+"/write?db=sim", "this is not line protocol\n", http.StatusBadRequest)
	if missing := waitMetrics(t, base+"/metrics", []string{"simtel_agent_samples_sent_total"}, 20*time.Second); len(missing) > 0 {
		t.Fatal("the agent did not ship its first samples within 20s")
	}
	// A sample the broker refuses for good: larger than max.message.bytes
	// even compressed.
	big := make([]byte, 24<<10)
	_, _ = rand.Read(big)
	post(t, base+"/write?db=sim", fmt.Sprintf("blob,env=cartpole data=%q\n", base64.StdEncoding.EncodeToString(big)), http.StatusNoContent)
	post(t, base+"/v1/policy/dashboard?step=1", "policy weights", http.StatusCreated)

	// Consuming makes fetch series appear.
	cons, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.ConsumeTopics("telemetry"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	cons.PollFetches(pctx)
	pcancel()
	cons.Close()

	for part, url := range map[string]string{"broker": "http://" + brokerHTTP + "/metrics", "agent": base + "/metrics"} {
		if missing := waitMetrics(t, url, want[part], 30*time.Second); len(missing) > 0 {
			t.Errorf("the dashboard queries %d metrics the running %s does not serve: %v", len(missing), part, missing)
		}
	}
	checkProbes("broker", "http://"+brokerHTTP)
	checkProbes("agent", base)

	t.Run("sink", func(t *testing.T) {
		needCommand(t, "sink")
		sinkHTTP := testutil.FreePort(t)
		start("sink", "--brokers", kafka, "--topics", "telemetry", "--lake", "file://"+filepath.Join(dir, "lake"),
			"--group", "dashboard-sink", "--flush-age", "1s", "--http-listen", sinkHTTP)
		testutil.WaitPort(t, sinkHTTP, nil)
		// A record that is not line protocol goes to the dead letters.
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "telemetry", Value: []byte("not line protocol")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		post(t, base+"/write?db=sim", "reward,env=cartpole value=2.5\n", http.StatusNoContent)
		missing := waitMetrics(t, "http://"+sinkHTTP+"/metrics", want["sink"], 60*time.Second)
		// Store errors need a failing store; a plain counter is there from the start.
		if len(missing) > 0 {
			sort.Strings(missing)
			t.Errorf("the dashboard queries %d metrics the running sink does not serve: %v", len(missing), missing)
		}
		checkProbes("sink", "http://"+sinkHTTP)
	})
	if !help(t, "sink").exists {
		t.Log("NOTE: `simtel sink` is not in this binary; its metrics were not checked against a running sink")
	}
}
