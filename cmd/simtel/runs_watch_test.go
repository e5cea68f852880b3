package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
)

// TestRunsWatch runs `simtel dev`, POSTs samples of its run and follows it
// with `simtel runs watch`: --once shows reward.value's figures from the
// live rollup topic, then the run's end once its summary is written, and
// --exit-on-end exits on its own.
func TestRunsWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the simtel binary")
	}
	d := startDevRun(t)
	// One window or two (the samples may straddle a 10 s boundary); the
	// newest window's last sample is 8 either way.
	reward := regexp.MustCompile(`(?m)^reward\.value +[▁▂▃▄▅▆▇█ ]+ +8 +1\.5 +8 +[0-9.]+ +4$`)
	watch := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, testutil.Binary(t), append([]string{"runs", "watch", "dev", "--brokers", d.broker}, args...)...).CombinedOutput()
		return string(out), err
	}
	testutil.WaitFor(t, 120*time.Second, "reward.value in simtel runs watch --once", func() error {
		out, err := watch("--once", "--metric", "reward.value")
		if err != nil || !reward.MatchString(out) {
			return fmt.Errorf("simtel runs watch --once said (err %v):\n%s", err, out)
		}
		if !strings.Contains(out, "running (no summary yet)") || strings.Contains(out, "mem.") {
			return fmt.Errorf("simtel runs watch --once --metric reward.value: want the run running and only reward.value:\n%s", out)
		}
		return nil
	})
	if out, err := watch("--once", "--since", "1h"); err != nil || !reward.MatchString(out) {
		t.Errorf("simtel runs watch --once --since 1h (err %v): want reward.value:\n%s", err, out)
	}
	if out, err := watch("--once", "--since", "1s", "--metric", "reward.value"); err != nil || !strings.Contains(out, "waiting for run dev") {
		t.Errorf("simtel runs watch --once --since 1s (err %v): the samples are older, want waiting:\n%s", err, out)
	}

	endDevRun(t, d)
	out, err := watch("--exit-on-end", "--interval", "500ms", "--metric", "reward.value")
	if err != nil || !strings.Contains(out, "ended: failed, exit 3, wall time 1m30s, nodes n1") || !reward.MatchString(out) {
		t.Errorf("simtel runs watch --exit-on-end (err %v):\n%s", err, out)
	}
	if err := d.p.Stop(20 * time.Second); err != nil {
		t.Fatalf("simtel dev did not stop cleanly on SIGTERM: %v", err)
	}
}
