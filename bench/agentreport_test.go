package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sampleAgentResult is a step as `simtel bench agent --json` reports one.
func sampleAgentResult(transport string, rate, achieved, cpuPct, per10k, peak float64, d *AgentDelivery) *AgentLoadResult {
	return &AgentLoadResult{
		Kind:      "agent",
		Settings:  AgentLoadSettings{Transport: transport, Rate: rate},
		LinesPerS: achieved, MachineBusyPct: 70,
		Agent:    &AgentCost{CPUPct: cpuPct, CPUPctPer10k: per10k, MicrosPerLine: per10k * 1.02, RSSMiB: peak - 2, AnonMiB: peak / 2, PeakMiB: peak, RSSMaxMiB: peak - 1},
		Delivery: d,
	}
}

func complete(n int64) *AgentDelivery {
	return &AgentDelivery{Sent: n, Received: n, Accepted: n, Shipped: n, Delivered: n, Idle: true, Complete: true}
}

func TestAgentVerdict(t *testing.T) {
	for _, c := range []struct {
		name string
		res  *AgentLoadResult
		want string
	}{
		{"within targets", sampleAgentResult("udp", 1e4, 1e4, 0.8, 0.8, 30, complete(120_000)), "✓"},
		{"too much CPU", sampleAgentResult("udp", 1e4, 1e4, 4.6, 4.6, 30, complete(120_000)), "✗ CPU"},
		{"too much memory", sampleAgentResult("http", 1e6, 1e6, 89, 0.89, 212, complete(12e6)), "✗ RSS"},
		{"udp loss and slow", sampleAgentResult("udp", 1e6, 9e5, 75, 1.45, 105,
			&AgentDelivery{Sent: 6e6, Received: 3e6, Accepted: 3e6, Shipped: 3e6, Delivered: 3e6, Idle: true}),
			"✗ CPU, RSS, lines lost before the agent, rate"},
		{"not delivered", sampleAgentResult("http", 1e5, 1e5, 9, 0.9, 40,
			&AgentDelivery{Sent: 10, Received: 10, Accepted: 10, Shipped: 10, Delivered: 9, Idle: true}), "✗ delivery"},
		{"still shipping", sampleAgentResult("http", 1e5, 1e5, 9, 0.9, 40,
			&AgentDelivery{Sent: 10, Received: 10, Accepted: 10, Shipped: 4, Delivered: 4}), "✗ delivery"},
	} {
		if got := agentVerdict(c.res); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func sampleAgentRun() *AgentRun {
	udpLoss := &AgentDelivery{Sent: 6_000_000, Received: 3_081_558, Accepted: 3_081_558, Shipped: 3_081_558,
		Delivered: 3_081_558, UDPSocketDrops: 35_190, Idle: true, DrainS: 0.3}
	http := sampleAgentResult("http", 1e6, 1_000_121, 89, 0.89, 212.4, complete(5_980_456))
	http.HTTPStatus = map[string]int64{"204": 1190, "503": 7}
	http.GeneratorCPUPct = 18.25
	http.FirstErr = "http://127.0.0.1:8186/write?db=bench: 503 Service Unavailable cannot store the samples now"
	return &AgentRun{ID: "2026-11-29-150000", Date: "2026-11-29T15:00:00Z", Host: "2 CPUs", Command: "bench/agent-cost.sh",
		Steps: []AgentStep{
			{Label: "udp 10k lines/s", Command: "simtel broker &\nsimtel agent --listen-udp :1 &\nsimtel bench agent --rate 10000",
				Result: sampleAgentResult("udp", 1e4, 10_000, 4.6, 4.6, 28.3, complete(59_998))},
			{Label: "udp 1M lines/s", Command: "simtel broker &\nsimtel agent --listen-udp :1 &\nsimtel bench agent --rate 1000000",
				Result: sampleAgentResult("udp", 1e6, 1_000_101, 74.6, 1.45, 105.4, udpLoss)},
			{Label: "http 1M lines/s", Command: "simtel broker &\nsimtel agent --listen-http :2 &\nsimtel bench agent --transport http", Result: http},
			{Label: "tcp 10k lines/s", Command: "simtel bench agent --transport tcp", Error: "exit status 1: agent pid 5: process is gone"},
		}}
}

func TestRenderAgentResults(t *testing.T) {
	r := sampleAgentRun()
	earlier := sampleAgentRun()
	earlier.ID = "2026-11-28-150000"
	out := RenderAgentResults(r, "results/agent-cost", []*AgentRun{earlier, r})
	wantAll(t, "rendered agent results", out,
		"Latest run: `2026-11-29-150000` (2026-11-29T15:00:00Z), 2 CPUs, by `bench/agent-cost.sh`.",
		"| udp | 10,000 | 10,000 | 4.6 | 4.60 | 4.69 | 26.3 (14.2) | 28.3 | 59,998 / 59,998 | 100% | 70% | ✗ CPU |",
		"| udp | 1,000,000 | 1,000,101 | 74.6 | 1.45 | 1.48 | 103.4 (52.7) | 105.4 | 3,081,558 / 3,081,558 | 51.3% | 70% | ✗ CPU, RSS, lines lost before the agent |",
		"| http | 1,000,000 | 1,000,121 | 89.0 | 0.89 | 0.91 | 210.4 (106.2) | 212.4 | 5,980,456 / 5,980,456 | 100% | 70% (18.2%) | ✗ RSS |",
		"| tcp 10k lines/s | | | | | | | | | | | ✗ failed |",
		"udp 1M lines/s: the agent received 3,081,558 of 6,000,000 lines sent (48.6% lost); the kernel dropped 35,190 datagrams",
		"http 1M lines/s: 7 requests answered 503",
		"**tcp 10k lines/s failed**: `exit status 1: agent pid 5: process is gone`",
		"simtel agent --listen-udp :1 &\nsimtel bench agent --rate 10000\n# udp 1M lines/s\nsimtel bench agent --rate 1000000\n",
		"Earlier runs: 1 more in `results/agent-cost/`",
	)
	if strings.Contains(out, earlier.ID) {
		t.Errorf("an earlier run is listed in the README's results:\n%s", out)
	}
	// The server commands, shown once for every step that shares them.
	if n := strings.Count(out, "simtel broker &"); n != 1 {
		t.Errorf("the broker command is shown %d times, want once", n)
	}
}

func TestPublishAgent(t *testing.T) {
	dir := t.TempDir()
	runPath := filepath.Join(dir, "run.json")
	r := sampleAgentRun()
	for _, st := range r.Steps {
		var out []byte
		if st.Result != nil {
			var err error
			if out, err = json.Marshal(st.Result); err != nil {
				t.Fatal(err)
			}
		} else {
			out = []byte("agent udp 1.0s ...\n") // a failed step printed no JSON
		}
		if err := AddAgentStep(runPath, st.Label, st.Command, st.Error, out); err != nil {
			t.Fatalf("add %s: %v", st.Label, err)
		}
	}
	if err := AddAgentStep(runPath, "bad", "cmd", "", []byte("not json")); err == nil {
		t.Error("unparsable output of a step that did not fail: got no error")
	}
	if err := AddAgentStep(runPath, "produce", "cmd", "", []byte(`{"kind": "produce"}`)); err == nil {
		t.Error("another command's result: got no error")
	}

	readme := filepath.Join(dir, "README.md")
	doc := "# bench\n<!-- results:start -->\ncompare\n<!-- results:end -->\n<!-- agent:start -->\nprose\n" +
		AgentMarkerStart + "\nold\n" + AgentMarkerEnd + "\n<!-- agent:end -->\n"
	if err := os.WriteFile(readme, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	// A compare.sh run in the results directory above must not be read as
	// an agent run, and the agent runs must not be seen by ReadRuns.
	results := filepath.Join(dir, "results", "agent-cost")
	path, err := PublishAgent(PublishConfig{RunPath: runPath, ResultsDir: results, README: readme,
		ID: r.ID, Date: r.Date, Host: r.Host, Command: r.Command})
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAgentRun(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Steps) != 4 || got.Steps[3].Result != nil || got.Steps[3].Error == "" || got.Steps[1].Result.Delivery.UDPSocketDrops != 35_190 {
		t.Errorf("published run: %+v", got)
	}
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, "<!-- results:start -->\ncompare\n<!-- results:end -->") || !strings.Contains(s, "prose\n"+AgentMarkerStart+"\nLatest run:") ||
		strings.Contains(s, "\nold\n") || !strings.HasSuffix(s, AgentMarkerEnd+"\n<!-- agent:end -->\n") {
		t.Errorf("README after publishing:\n%s", s)
	}
	if runs, err := ReadRuns(filepath.Join(dir, "results")); err != nil || len(runs) != 0 {
		t.Errorf("ReadRuns of the compare results: got %d runs, %v; want none", len(runs), err)
	}
	if _, err := PublishAgent(PublishConfig{RunPath: runPath, ResultsDir: results, ID: "../x"}); err == nil {
		t.Error("an id with a slash: got no error")
	}
}
