package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestFanoutNetns runs bench/fanout-netns.sh with 8 agents and an 8 MiB
// version, each agent and the broker in a network namespace of its own
// behind a 1 Gbit/s link, in every mode, and checks what the links
// carried: without relay the broker sends one copy per node; with relay
// less than that; a delta brings each node less than the version. It
// needs root (namespaces, veths, tc) and runs in CI (CI=true) only, as it
// takes minutes.
func TestFanoutNetns(t *testing.T) {
	if os.Getenv("CI") != "true" {
		t.Skip("runs in CI only (CI=true): it makes network namespaces and takes over a minute")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces, veth pairs and tc qdiscs")
	}
	for _, tool := range []string{"ip", "tc", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (scripts/install-deps.sh installs it): %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "simtel")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/simtel")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := t.TempDir()
	const nodes, size = 8, 8 << 20
	cmd := exec.CommandContext(ctx, "./fanout-netns.sh")
	cmd.Env = append(os.Environ(), "SIMTEL_BIN="+bin, "OUT="+out, "NODES=8", "SIZE=8MiB", "TIMEOUT=1m")
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fanout-netns.sh: %v\n%s", err, log)
	}
	t.Logf("%s", log)
	if strings.Contains(string(log), "skipped:") {
		t.Errorf("a mode was skipped: the relay's agent flags are missing")
	}
	results := map[string]*FanoutResult{}
	for i, mode := range []string{"baseline", "relay", "delta", "delta-relay"} {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("step-%d-%s.json", i+1, mode)))
		if err != nil {
			t.Fatal(err)
		}
		var r FanoutResult
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("mode %s: %v", mode, err)
		}
		if r.Held != nodes || r.Failures != 0 || r.Links == nil || r.NetTargets == nil || len(r.Nodes) != nodes {
			t.Fatalf("mode %s: %d of %d agents hold the version (%s), links %+v, %d nodes reported", mode, r.Held, nodes, r.FirstErr, r.Links, len(r.Nodes))
		}
		results[mode] = &r
	}
	// Without relay every node takes its copy from the broker: the
	// broker's link carries at least one version per node, and each
	// node's link one version.
	base := results["baseline"].Links
	if base.BrokerOutBytes < nodes*size || base.NodeInMax < size {
		t.Errorf("baseline: broker link out %d bytes, most to a node %d; want at least %d and %d", base.BrokerOutBytes, base.NodeInMax, nodes*size, size)
	}
	if base.NodeReceivedMax < size {
		t.Errorf("baseline: the agents' received counters say at most %d bytes from the brokers, want at least %d", base.NodeReceivedMax, size)
	}
	// With relay the nodes take chunks from each other: less egress than
	// one copy per node, and the nodes' links carry what peers sent.
	rel := results["relay"].Links
	if rel.BrokerOutBytes >= nodes*size || rel.NodeOutTotal < size {
		t.Errorf("relay: broker link out %d bytes (one copy per node is %d), nodes sent %d; want less than one copy per node and peers sending at least one version",
			rel.BrokerOutBytes, nodes*size, rel.NodeOutTotal)
	}
	for _, mode := range []string{"delta", "delta-relay"} {
		// Chunks are cut by content, about 256 KiB on average: each of
		// the four changed regions costs a chunk or two of the 32 of
		// 8 MiB, so a delta carries about a third of it, a full version
		// all of it and more.
		if l := results[mode].Links; l.NodeInMax >= size*3/4 {
			t.Errorf("%s: a node's link carried %d bytes for a delta with 3%% of %d bytes changed", mode, l.NodeInMax, size)
		}
	}
}

// TestParseAgentCounters reads the policy's byte counters of an agent's
// /metrics by short name, ignoring other policies, and its CPU.
func TestParseAgentCounters(t *testing.T) {
	const text = `# TYPE simtel_agent_policy_received_bytes_total counter
simtel_agent_policy_received_bytes_total{policy="a"} 100
simtel_agent_policy_received_bytes_total{policy="b"} 7
# TYPE simtel_agent_policy_peer_bytes_total counter
simtel_agent_policy_peer_bytes_total{policy="a"} 5e+06
# TYPE simtel_agent_policy_version gauge
simtel_agent_policy_version{policy="a"} 3
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.5
`
	c, err := parseAgentCounters("a")(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.bytes) != 2 || c.bytes["received"] != 100 || c.bytes["peer"] != 5e6 || c.cpu != 1.5 {
		t.Errorf("got %+v, want received 100, peer 5e6, cpu 1.5", c)
	}
	if _, err := parseAgentCounters("a")(strings.NewReader("# TYPE x counter\nx 1\n")); err == nil {
		t.Error("metrics without the agent's policy counters were accepted")
	}
}

// TestJudgeAgents judges the targets from the link figures: the
// broker's link egress in versions, the last node against size ÷ rate,
// a delta's busiest node, and which floor is higher.
func TestJudgeAgents(t *testing.T) {
	const size = 64 << 20
	res := &FanoutResult{
		Settings:  FanoutSettings{Nodes: 2, Size: size, CPUs: 2, Delta: 0.03},
		Held:      2,
		FromStart: DurationSummary{MaxS: 1.5},
		Links:     &FanoutLinks{BrokerOutBytes: 3 * size, NodeInMax: size / 16, NodeOutMax: 5 * size, AgentsCPUS: 1},
		BenchCPUS: 0.5, BrokerCPUS: 0.5,
	}
	res.judgeAgents(1e9)
	tg := res.NetTargets
	if !tg.EgressMet || tg.EgressOverSize != 3 {
		t.Errorf("egress %g versions, met %v; want 3, met", tg.EgressOverSize, tg.EgressMet)
	}
	if limit := float64(size) * 8 / 1e9; tg.LinkLimitS != limit || !tg.TimeMet || tg.LastOverLinkLimit != 1.5/limit {
		t.Errorf("link limit %g s, last over it %g, met %v; want %g, %g, met", tg.LinkLimitS, tg.LastOverLinkLimit, tg.TimeMet, limit, 1.5/limit)
	}
	if !tg.DeltaMet || tg.NodeInMaxOverSize != 1.0/16 {
		t.Errorf("delta %g of the version, met %v; want 1/16, met", tg.NodeInMaxOverSize, tg.DeltaMet)
	}
	// The busiest link is a node sending 5 versions to its peers: 2.68 s
	// against 1 CPU s over 2 CPUs.
	if tg.CPUFloorS != 1 || tg.LinksFloorS != float64(5*size)*8/1e9 || tg.Bound != "links" {
		t.Errorf("floors CPU %g s, links %g s, bound %s; want 1, %g, links", tg.CPUFloorS, tg.LinksFloorS, tg.Bound, float64(5*size)*8/1e9)
	}
	res.Held = 1
	res.Links.BrokerOutBytes = 32 * size
	res.judgeAgents(1e9)
	if tg := res.NetTargets; tg.EgressMet || tg.TimeMet || tg.DeltaMet {
		t.Errorf("32 versions of egress and a node without the version met a target: %+v", tg)
	}
}

// An agent whose /metrics does not answer in time is asked again: a busy
// machine made the first reading of 32-agent runs miss the bench's bound,
// and the run failed without figures.
func TestScrapeAgentRetries(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-r.Context().Done() // the first request is never answered
			return
		}
		fmt.Fprintln(w, "# TYPE simtel_agent_policy_received_bytes_total counter")
		fmt.Fprintln(w, `simtel_agent_policy_received_bytes_total{policy="a"} 7`)
	}))
	defer srv.Close()
	cl := &http.Client{Timeout: 200 * time.Millisecond}
	c, err := scrapeAgent(context.Background(), cl, srv.URL+"/metrics", parseAgentCounters("a"))
	if err != nil || c.bytes["received"] != 7 || calls.Load() != 2 {
		t.Fatalf("counters %+v, err %v after %d requests; want received 7 after 2", c, err, calls.Load())
	}
	// An answer that is not an agent's counters is not asked again.
	calls.Store(0)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprintln(w, "x 1")
	}))
	defer bad.Close()
	if _, err := scrapeAgent(context.Background(), cl, bad.URL+"/metrics", parseAgentCounters("a")); err == nil || calls.Load() != 1 {
		t.Fatalf("err %v after %d requests; want an error after 1", err, calls.Load())
	}
}
