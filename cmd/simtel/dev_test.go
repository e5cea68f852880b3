package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
)

// TestDevShipsACurlPost runs `simtel dev` as a user would and checks that
// a line POSTed to the agent arrives in the broker's telemetry topic with
// the agent's tags, becomes a row that `simtel lake query` returns, and
// that SIGTERM ends the process cleanly.
func TestDevShipsACurlPost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the simtel binary")
	}
	brokerAddr, agentHTTP := testutil.FreePort(t), testutil.FreePort(t)
	dataDir := t.TempDir()
	p := testutil.Start(t, t.TempDir(), "dev", "--data-dir", dataDir, "--broker-listen", brokerAddr,
		"--broker-http", testutil.FreePort(t), "--agent-http", agentHTTP, "--agent-udp", testutil.FreePort(t), "--agent-tcp", testutil.FreePort(t),
		"--sink-http", testutil.FreePort(t), "--rollup-http", testutil.FreePort(t), "--allowed-lateness", "1s")
	testutil.WaitPort(t, agentHTTP, p)
	resp, err := http.Post("http://"+agentHTTP+"/write?db=sim", "text/plain", strings.NewReader("reward,env=cartpole value=1.5"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("POST /write: status %d, want 204", resp.StatusCode)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.ConsumeTopics("telemetry"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got string
	for got == "" {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("the POSTed sample did not reach the telemetry topic within 30s")
		}
		fs.EachRecord(func(r *kgo.Record) {
			if strings.HasPrefix(string(r.Value), "reward,") {
				got = string(r.Value)
			}
		})
	}
	if !strings.Contains(got, "env=cartpole") || !strings.Contains(got, "run=dev") || !strings.Contains(got, "value=1.5") {
		t.Fatalf("stored %q, want env=cartpole, run=dev and value=1.5", got)
	}
	// The same sample becomes a row of the lake that simtel lake query
	// reads, within seconds (the sink flushes every 2 s in dev).
	lake := "file://" + filepath.Join(dataDir, "lake")
	testutil.WaitFor(t, 30*time.Second, "the POSTed sample is a row of the lake", func() error {
		out, err := exec.Command(testutil.Binary(t), "lake", "query", "--lake", lake, "--cache-dir", t.TempDir(), "--format", "csv",
			"SELECT env, run, value FROM reward").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "cartpole,dev,1.5") {
			return fmt.Errorf("last simtel lake query said (err %v):\n%s", err, out)
		}
		return nil
	})
	// A sample 30 s later closes the first one's 10 s window (1 s of
	// allowed lateness): the rollup worker emits it and the sink writes it
	// to the table rollup_10s.reward.
	later := fmt.Sprintf("reward,env=cartpole value=2.5 %d", time.Now().Add(30*time.Second).UnixNano())
	resp, err = http.Post("http://"+agentHTTP+"/write?db=sim", "text/plain", strings.NewReader(later))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	testutil.WaitFor(t, 60*time.Second, "the first sample's 10 s rollup in the lake", func() error {
		out, err := exec.Command(testutil.Binary(t), "lake", "query", "--lake", lake, "--cache-dir", t.TempDir(), "--format", "csv",
			"SELECT env, value_count, value_sum FROM rollup_10s.reward ORDER BY time LIMIT 1").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "cartpole,1,1.5") {
			return fmt.Errorf("last simtel lake query said (err %v):\n%s", err, out)
		}
		return nil
	})
	if err := p.Stop(20 * time.Second); err != nil {
		t.Fatalf("simtel dev did not stop cleanly on SIGTERM: %v", err)
	}
}
