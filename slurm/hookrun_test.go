package slurm

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
	"github.com/simtel/simtel/scheduler"
)

// fakeScontrol writes a script that prints line, standing in for scontrol
// where no cluster is needed.
func fakeScontrol(t *testing.T, line string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "scontrol")
	if err := os.WriteFile(p, []byte("#!/bin/sh\ncat <<'EOF'\n"+line+"\nEOF\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHookBrokerDown: with no broker (refused), or one that accepts
// connections and never answers, the hook gives up within its timeout and
// says why.
func TestHookBrokerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() { // accept and hold: a hung broker
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	})
	for _, addr := range []string{"127.0.0.1:1", ln.Addr().String()} {
		hookBrokerDown(t, addr)
	}
}

func hookBrokerDown(t *testing.T, addr string) {
	var logs bytes.Buffer
	start := time.Now()
	err := RunHook(context.Background(), HookProlog, HookConfig{
		Brokers:  []string{addr},
		Timeout:  1500 * time.Millisecond,
		Scontrol: fakeScontrol(t, prologLine),
		Getenv:   env("SLURM_JOB_ID", "8", "SLURMD_NODENAME", "n2", "SLURM_JOB_NODELIST", "n[1-2,10]"),
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "is a broker at "+addr+" up?") {
		t.Fatalf("broker %s: got error %v, want one naming the broker", addr, err)
	}
	if took > 3*time.Second {
		t.Fatalf("broker %s: hook took %v with a 1.5s timeout", addr, took)
	}
	t.Logf("broker %s: gave up after %v: %v", addr, took.Round(time.Millisecond), err)
}

// TestHookPublishes runs the prolog and epilog of a two-node job against
// a real broker (scontrol faked) and reads the registry back.
func TestHookPublishes(t *testing.T) {
	addr := inproc.Start(t).Addr
	run := func(kind, node, line string) {
		t.Helper()
		start := time.Now()
		defer func() { t.Logf("%s on %s took %v", kind, node, time.Since(start)) }()
		err := RunHook(context.Background(), kind, HookConfig{
			Brokers:  []string{addr},
			Timeout:  10 * time.Second,
			Scontrol: fakeScontrol(t, line),
			Getenv:   env("SLURM_JOB_ID", "8", "SLURMD_NODENAME", node, "SLURM_JOB_NODELIST", "n[1-2,10]", "SLURM_JOB_USER", "ana"),
		})
		if err != nil {
			t.Fatalf("%s on %s: %v", kind, node, err)
		}
	}
	for _, n := range []string{"n1", "n2", "n10"} {
		run(HookProlog, n, prologLine)
	}
	for _, n := range []string{"n10", "n2", "n1"} {
		run(HookEpilog, n, epilogFailed)
	}
	runs := registeredRuns(t, addr)
	if len(runs) != 1 {
		t.Fatalf("got %d runs, want 1: %+v", len(runs), runs)
	}
	r := runs[0]
	if r.Run != "8" || r.State != scheduler.StateFailed || *r.ExitCode != 3 || r.Name != "ppo sweep" || r.User != "ana" ||
		!r.AllNodesDown() || len(r.NodesUp) != 3 || r.Submitted.IsZero() {
		t.Fatalf("got %+v", r)
	}
}

// registeredRuns is every run the scheduler registry on the brokers at
// addr holds.
func registeredRuns(t *testing.T, addr string) []scheduler.Run {
	t.Helper()
	reg, err := scheduler.Open(scheduler.Config{Brokers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	runs, err := reg.Runs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// TestHookCommandNeverFails: `simtel slurm prolog` exits 0 with the
// broker down, within its timeout, and leaves a line in its log file.
func TestHookCommandNeverFails(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := testutil.Binary(t)
	dir := t.TempDir()
	envFile := filepath.Join(dir, "slurm.env")
	if err := os.WriteFile(envFile, []byte("SIMTEL_BROKERS=127.0.0.1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "hooks.log")
	cmd := exec.Command(bin, "slurm", "epilog", "--env-file", envFile, "--log-file", logFile, "--timeout", "1s",
		"--scontrol", fakeScontrol(t, epilogFailed))
	cmd.Env = []string{"SLURM_JOB_ID=8", "SLURMD_NODENAME=n2", "SLURM_JOB_NODELIST=n[1-2,10]"} // slurmd's bare environment
	start := time.Now()
	stderr, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("epilog exited with %v, want 0: %s", err, stderr)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("epilog took %v with --timeout 1s", took)
	}
	b, _ := os.ReadFile(logFile)
	if !strings.Contains(string(b), `msg="slurm hook failed; job event not sent" hook=epilog job=8 node=n2`) {
		t.Fatalf("log file lacks the failure line:\n%s", b)
	}
}
