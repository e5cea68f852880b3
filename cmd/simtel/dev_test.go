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
	d := startDev(t)
	d.write(t, "reward,env=cartpole value=1.5")
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.broker), kgo.ConsumeTopics("telemetry"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
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
	d.waitLakeCSV(t, 30*time.Second, "the POSTed sample is a row of the lake", "SELECT env, run, value FROM reward", "cartpole,dev,1.5")
	// A sample 30 s later closes the first one's 10 s window (1 s of
	// allowed lateness): the rollup worker emits it and the sink writes it
	// to the table rollup_10s.reward.
	d.write(t, fmt.Sprintf("reward,env=cartpole value=2.5 %d", time.Now().Add(30*time.Second).UnixNano()))
	d.waitLakeCSV(t, 60*time.Second, "the first sample's 10 s rollup in the lake",
		"SELECT env, value_count, value_sum FROM rollup_10s.reward ORDER BY time LIMIT 1", "cartpole,1,1.5")
	if err := d.p.Stop(20 * time.Second); err != nil {
		t.Fatalf("simtel dev did not stop cleanly on SIGTERM: %v", err)
	}
}

// devRun is a `simtel dev` started by startDev, with t0 the time of its
// run's first sample where the test sends samples.
type devRun struct {
	broker, agentHTTP, dataDir string
	p                          *testutil.Proc
	t0                         time.Time
}

// startDev starts `simtel dev` on free ports with an allowed lateness of
// 1 s and waits for its agent's HTTP listener.
func startDev(t *testing.T) devRun {
	t.Helper()
	d := devRun{broker: testutil.FreePort(t), agentHTTP: testutil.FreePort(t), dataDir: t.TempDir()}
	d.p = testutil.Start(t, t.TempDir(), "dev", "--data-dir", d.dataDir, "--broker-listen", d.broker,
		"--broker-http", testutil.FreePort(t), "--agent-http", d.agentHTTP, "--agent-udp", testutil.FreePort(t), "--agent-tcp", testutil.FreePort(t),
		"--sink-http", testutil.FreePort(t), "--rollup-http", testutil.FreePort(t), "--allowed-lateness", "1s")
	testutil.WaitPort(t, d.agentHTTP, d.p)
	return d
}

// write POSTs lines to the dev agent's /write and fails the test unless
// the agent accepts them (204).
func (d devRun) write(t *testing.T, lines string) {
	t.Helper()
	resp, err := http.Post("http://"+d.agentHTTP+"/write?db=sim", "text/plain", strings.NewReader(lines))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("POST /write: status %d, want 204", resp.StatusCode)
	}
}

// waitLakeCSV waits until `simtel lake query --format csv` of query over
// the dev lake prints want; the sink and the rollups reach the lake in
// their own time.
func (d devRun) waitLakeCSV(t *testing.T, timeout time.Duration, what, query, want string) {
	t.Helper()
	lake := "file://" + filepath.Join(d.dataDir, "lake")
	testutil.WaitFor(t, timeout, what, func() error {
		out, err := exec.Command(testutil.Binary(t), "lake", "query", "--lake", lake, "--cache-dir", t.TempDir(), "--format", "csv", query).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			return fmt.Errorf("last simtel lake query said (err %v):\n%s", err, out)
		}
		return nil
	})
}
