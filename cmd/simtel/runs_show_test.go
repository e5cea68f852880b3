package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/rollup"
	"github.com/simtel/simtel/scheduler"
)

// TestRunsShow runs `simtel dev`, POSTs samples of its run, publishes the
// run's end, and reads the figures back with `simtel runs show` (from the
// summary topic) and from the lake's summary.runs.
func TestRunsShow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the simtel binary")
	}
	d := startDevRun(t)
	brokerAddr, p := d.broker, d.p
	endDevRun(t, d)

	var s rollup.Summary
	testutil.WaitFor(t, 60*time.Second, "simtel runs show dev", func() error {
		out, err := exec.Command(testutil.Binary(t), "runs", "show", "dev", "--brokers", brokerAddr, "--format", "json").CombinedOutput()
		if err != nil {
			return fmt.Errorf("simtel runs show said (err %v):\n%s", err, out)
		}
		s = rollup.Summary{}
		if err := json.Unmarshal(out, &s); err != nil {
			return fmt.Errorf("%v:\n%s", err, out)
		}
		if m := rewardOf(s); m == nil || m.Count != 4 {
			return fmt.Errorf("summary %s, want reward.value over 4 samples", out)
		}
		return nil
	})
	// The dev agent's own system metrics are samples of the run too.
	m := *rewardOf(s)
	if *m.Min != 1.5 || *m.Max != 8 || *m.Sum != 16 || *m.Mean != 4 || m.Last != 8.0 {
		t.Errorf("reward.value %+v, want min 1.5 max 8 sum 16 mean 4 last 8", m)
	}
	if !slices.Equal(s.PolicyVersions, []int64{1, 2}) {
		t.Errorf("policy versions %v, want [1 2]", s.PolicyVersions)
	}
	if s.State != scheduler.StateFailed || s.ExitCode == nil || *s.ExitCode != 3 || s.WallTime != 90 || s.JobID != "9" {
		t.Errorf("run: state %q exit %v wall %v s job %q, want failed 3 90 9", s.State, s.ExitCode, s.WallTime, s.JobID)
	}
	out, err := exec.Command(testutil.Binary(t), "runs", "show", "dev", "--brokers", brokerAddr).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("reward.value")) || !bytes.Contains(out, []byte("1m30s")) {
		t.Errorf("simtel runs show dev (table, err %v):\n%s", err, out)
	}
	if out, err := exec.Command(testutil.Binary(t), "runs", "show", "nosuchrun", "--brokers", brokerAddr).CombinedOutput(); err == nil {
		t.Errorf("simtel runs show nosuchrun succeeded:\n%s", out)
	}

	d.waitLakeCSV(t, 60*time.Second, "the summary in the lake",
		"SELECT run, metric, count, min, max, sum, state, exit_code FROM summary.runs WHERE metric = 'reward.value' "+
			"QUALIFY row_number() OVER (PARTITION BY run, metric ORDER BY updated DESC) = 1",
		"dev,reward.value,4,1.5,8,16,failed,3")
	if err := p.Stop(20 * time.Second); err != nil {
		t.Fatalf("simtel dev did not stop cleanly on SIGTERM: %v", err)
	}
}

// startDevRun starts `simtel dev` (startDev) and POSTs four samples of
// reward.value (1.5, 4, 2.5, 8, one a second from t0, now) to its agent,
// which tags them run=dev.
func startDevRun(t *testing.T) devRun {
	t.Helper()
	d := startDev(t)
	// Samples of now: the dev agent's own metrics keep the partition's
	// event time at now, so older ones would be too late for their
	// rollup windows (--allowed-lateness 1s).
	d.t0 = time.Now().Truncate(time.Second)
	var body strings.Builder
	for i, v := range []float64{1.5, 4, 2.5, 8} {
		fmt.Fprintf(&body, "reward,env=cartpole value=%g,policy_version=%di %d\n", v, 1+i/2, d.t0.Add(time.Duration(i)*time.Second).UnixNano())
	}
	d.write(t, body.String())
	return d
}

// endDevRun publishes that run dev started at t0 on n1 and failed with
// exit code 3 90 s later.
func endDevRun(t *testing.T, d devRun) {
	t.Helper()
	t0 := d.t0
	reg, err := scheduler.Open(scheduler.Config{Brokers: []string{d.broker}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	failed := 3
	for _, e := range []scheduler.Event{
		{Type: scheduler.EventStarted, Run: "dev", JobID: "9", Nodes: []string{"n1"}, Time: t0},
		{Type: scheduler.EventFailed, Run: "dev", Time: t0.Add(90 * time.Second), ExitCode: &failed, Source: scheduler.SourceJobComp},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := reg.Record(ctx, e, time.Time{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func rewardOf(s rollup.Summary) *rollup.MetricSummary {
	for i := range s.Metrics {
		if s.Metrics[i].Metric == "reward.value" {
			return &s.Metrics[i]
		}
	}
	return nil
}
