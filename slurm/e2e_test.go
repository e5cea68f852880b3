package slurm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/scheduler"
)

// The end-to-end test needs the Slurm cluster of scripts/slurm-up.sh
// (three emulated nodes n1-n3 whose Prolog, Epilog and jobcomp hooks run
// $base/bin/simtel with the brokers of $base/etc/simtel-slurm.env). It
// skips without one, and fails without one under CI=true.

const simSteps, simEnvs, simNodes = 100, 2, 3

var simMeasurements = []string{"reward", "episode_length", "step_time"}

type cluster struct {
	base, conf string
}

func needCluster(t *testing.T) cluster {
	t.Helper()
	conf := os.Getenv("SLURM_CONF")
	if conf == "" {
		conf = "/tmp/simtel-slurm/etc/slurm.conf"
	}
	base := filepath.Dir(filepath.Dir(conf))
	why := ""
	if _, err := exec.LookPath("sbatch"); err != nil {
		why = "sbatch is not installed"
	} else if _, err := os.Stat(filepath.Join(base, "etc", "simtel-prolog")); err != nil {
		why = fmt.Sprintf("no simtel test cluster at %s", base)
	} else if out, err := exec.Command("sinfo", "-h", "-N", "-t", "idle,mixed,allocated", "-o", "%N").CombinedOutput(); err != nil {
		why = fmt.Sprintf("sinfo failed: %v: %s", err, bytes.TrimSpace(out))
	} else if n := len(strings.Fields(string(out))); n < simNodes {
		why = fmt.Sprintf("sinfo shows %d usable nodes, want %d: %s", n, simNodes, bytes.TrimSpace(out))
	}
	if why != "" {
		msg := why + ": start the cluster with scripts/slurm-up.sh and export SLURM_CONF=" + conf
		testutil.SkipOrFail(t, msg, "")
	}
	t.Setenv("SLURM_CONF", conf)
	return cluster{base: base, conf: conf}
}

type job struct {
	id, dir string
}

func TestSlurmEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Slurm jobs")
	}
	cl := needCluster(t)
	// A flush age far beyond the test's length: the run's rows reach the
	// lake only because its completion on the jobs topic makes the sink
	// flush them.
	p := startPipeline(t, cl, "10m")
	bin, dir, broker, lake := p.bin, p.dir, p.broker, p.lake

	// The rollup worker summarizes each run once the registry says it
	// ended.
	rollupHTTP := testutil.FreePort(t)
	roll := testutil.Start(t, dir, "rollup", "--brokers", broker, "--http-listen", rollupHTTP, "--commit-interval", "500ms")
	testutil.WaitPort(t, rollupHTTP, roll)

	// The scheduler loop writes the registry concurrently with the hooks;
	// the result must be the same.
	schedHTTP := testutil.FreePort(t)
	sched := testutil.Start(t, dir, "scheduler", "--brokers", broker, "--http-listen", schedHTTP, "--write-interval", "200ms")
	testutil.WaitPort(t, schedHTTP, sched)

	// A policy for the simulation to read through its agent.
	policy := filepath.Join(dir, "policy.bin")
	os.WriteFile(policy, bytes.Repeat([]byte("weights"), 1000), 0o644)
	if out, err := exec.Command(bin, "learner", "publish", "--brokers", broker, "--policy", "e2e-actor", "--file", policy).CombinedOutput(); err != nil {
		t.Fatalf("learner publish: %v: %s", err, out)
	}

	ok := submit(t, cl, dir, "ok", "--steps", fmt.Sprint(simSteps), "--envs", fmt.Sprint(simEnvs), "--policy", "e2e-actor", "--wait-policy", "20")
	bad := submit(t, cl, dir, "bad", "--steps", fmt.Sprint(simSteps), "--envs", fmt.Sprint(simEnvs), "--fail", "3")
	long := submit(t, cl, dir, "long", "--steps", "100000", "--envs", fmt.Sprint(simEnvs), "--step-sleep", "0.02")
	// Cancel the long job once its simulation has samples acknowledged on
	// every node.
	testutil.WaitFor(t, 90*time.Second, "job "+long.id+" has acknowledged samples on every rank", func() error {
		if a := acked(t, long); len(a) != simNodes || slices.Contains(slices.Collect(maps.Values(a)), 0) {
			return fmt.Errorf("acknowledged per rank: %v", a)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	if out, err := exec.Command("scancel", long.id).CombinedOutput(); err != nil {
		t.Fatalf("scancel %s: %v: %s", long.id, err, out)
	}

	for _, tc := range []struct {
		j       job
		state   string
		slurm   string
		exit    int // -1: any
		samples int // -1: at least what the simulation saw acknowledged
	}{
		{ok, scheduler.StateCompleted, "COMPLETED", 0, simSteps * simEnvs * len(simMeasurements) * simNodes},
		{bad, scheduler.StateFailed, "FAILED", 3, simSteps * simEnvs * len(simMeasurements) * simNodes},
		{long, scheduler.StateCancelled, "CANCELLED", -1, -1},
	} {
		t.Run(tc.state, func(t *testing.T) {
			st := waitJob(t, tc.j.id)
			ended := time.Now()
			if st != tc.slurm {
				t.Fatalf("job %s ended %s in Slurm, want %s; output:\n%s", tc.j.id, st, tc.slurm, jobOutput(tc.j))
			}
			if tc.j == ok {
				// Every rank read policy version 1 from its node's agent.
				if n := strings.Count(jobOutput(tc.j), "policy version 1\n"); n != simNodes {
					t.Fatalf("%d ranks report policy version 1, want %d:\n%s", n, simNodes, jobOutput(tc.j))
				}
			}
			checkRun(t, bin, broker, tc.j, tc.state, tc.exit)
			checkEvents(t, broker, tc.j, tc.state)
			want := tc.samples
			if want < 0 { // cancelled: every sample the agents acknowledged
				want = 0
				for _, n := range acked(t, tc.j) {
					want += n
				}
			}
			perMeasurement := countSamples(t, broker, tc.j, tc.samples >= 0, want)
			checkNoAgents(t, tc.j)
			checkSummary(t, bin, broker, tc.j, tc.state, tc.exit, perMeasurement, ended)
			checkLake(t, bin, lake, tc.j, perMeasurement)
			checkLakeRun(t, bin, lake, tc.j, tc.state)
		})
	}
}

// pipeline is what a test of the cluster runs: this build installed as
// the cluster's simtel, a broker the cluster's hooks publish to, and a
// sink writing the telemetry topic into a lake.
type pipeline struct {
	bin, dir, broker, lake string
}

func startPipeline(t *testing.T, cl cluster, flushAge string) pipeline {
	t.Helper()
	bin := testutil.Binary(t)
	// The hooks run the binary installed in the cluster: this build.
	inst := filepath.Join(cl.base, "bin", "simtel")
	copyFile(t, bin, inst+".new", 0o755)
	if err := os.Rename(inst+".new", inst); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	broker := brokertest.Start(t, brokertest.SkipShort(), brokertest.HTTP(), brokertest.DataDir(filepath.Join(dir, "broker"))).Addr
	envFile := filepath.Join(cl.base, "etc", "simtel-slurm.env")
	if err := os.WriteFile(envFile, []byte("SIMTEL_BROKERS="+broker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(envFile, nil, 0o644) })

	lake := "file://" + filepath.Join(dir, "lake")
	sinkHTTP := testutil.FreePort(t)
	sink := testutil.Start(t, dir, "sink", "--brokers", broker, "--topics", "telemetry", "--lake", lake, "--flush-age", flushAge,
		"--http-listen", sinkHTTP)
	testutil.WaitPort(t, sinkHTTP, sink)
	return pipeline{bin: bin, dir: dir, broker: broker, lake: lake}
}

func submit(t *testing.T, cl cluster, dir, name string, simArgs ...string) job {
	t.Helper()
	jdir := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(jdir, "acks"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("examples/simtel-job.sbatch")
	sim, _ := filepath.Abs("examples/sim.py")
	args := append([]string{"--parsable", "--nodes", fmt.Sprint(simNodes), "--job-name", "e2e-" + name,
		"--output", filepath.Join(jdir, "job.out"), script}, append(simArgs, "--ack-dir", filepath.Join(jdir, "acks"))...)
	cmd := exec.Command("sbatch", args...)
	cmd.Dir = jdir
	cmd.Env = append(os.Environ(),
		"SIMTEL="+filepath.Join(cl.base, "bin", "simtel"),
		"SIMTEL_BROKERS="+brokerOf(cl),
		"SIMTEL_JOB_DIR="+filepath.Join(jdir, "nodes"),
		"SIMTEL_AGENT_ARGS=--collect-interval=-1s --policies e2e-actor",
		"SIM="+sim)
	id := sbatch(t, cmd)
	t.Logf("job %s (%s) submitted", id, name)
	return job{id: id, dir: jdir}
}

// sbatch runs an `sbatch --parsable` command and returns the job id.
func sbatch(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v: %s", err, out)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job id", out)
	}
	return id
}

func brokerOf(cl cluster) string {
	b, _ := os.ReadFile(filepath.Join(cl.base, "etc", "simtel-slurm.env"))
	return strings.TrimSpace(strings.TrimPrefix(string(b), "SIMTEL_BROKERS="))
}

// waitJob polls scontrol (sbatch --wait polls slowly) until the job has
// left every active state, COMPLETING included (then every hook has run).
func waitJob(t *testing.T, id string) string {
	t.Helper()
	var state string
	re := regexp.MustCompile(`JobState=(\S+)`)
	testutil.WaitFor(t, 120*time.Second, "job "+id+" ended", func() error {
		out, err := exec.Command("scontrol", "show", "job", "-o", id).Output()
		if err != nil {
			return fmt.Errorf("scontrol show job: %v", err)
		}
		m := re.FindSubmatch(out)
		if m == nil {
			return fmt.Errorf("no JobState in %q", out)
		}
		state = string(m[1])
		switch state {
		case "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "RESIZING", "REQUEUED":
			return fmt.Errorf("JobState=%s", state)
		}
		return nil
	})
	return state
}

func checkRun(t *testing.T, bin, broker string, j job, state string, exit int) {
	t.Helper()
	out, err := exec.Command(bin, "runs", "--brokers", broker, "--format", "json", "--run", j.id).CombinedOutput()
	if err != nil {
		t.Fatalf("simtel runs: %v: %s", err, out)
	}
	var runs []scheduler.Run
	if err := json.Unmarshal(out, &runs); err != nil || len(runs) != 1 {
		t.Fatalf("simtel runs --format json: %v: %s", err, out)
	}
	r := runs[0]
	nodes := []string{"n1", "n2", "n3"}
	if r.JobID != j.id || r.State != state || !reflect.DeepEqual(r.Nodes, nodes) || !reflect.DeepEqual(r.NodesUp, nodes) ||
		!r.AllNodesDown() || r.Started.IsZero() || r.Ended.Before(r.Started) || r.User == "" {
		t.Fatalf("run %s in the registry: %+v; want job %s, state %s, nodes %v up and down, start and end", j.id, r, j.id, state, nodes)
	}
	if exit >= 0 && (r.ExitCode == nil || *r.ExitCode != exit) {
		t.Fatalf("run %s exit code %s, want %d", j.id, scheduler.ExitStatus(r.ExitCode), exit)
	}
	// The table lists it too.
	out, err = exec.Command(bin, "runs", "--brokers", broker).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^`+j.id+`\s+`+j.id+`\s+\S+\s+e2e-\S+\s+n1,n2,n3\s+`+state+`\s`).Match(out) {
		t.Fatalf("simtel runs table lacks run %s %s: %v\n%s", j.id, state, err, out)
	}
}

func checkEvents(t *testing.T, broker string, j job, state string) {
	t.Helper()
	reg, err := scheduler.Open(scheduler.Config{Brokers: []string{broker}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := reg.Events(ctx, j.id, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	up := map[string]bool{}
	for _, e := range evs {
		seen[e.Type+"/"+e.Source] = true
		if e.Type == scheduler.EventNodeUp {
			up[e.Node] = true
		}
	}
	for _, want := range []string{"submitted/", "started/", state + "/" + scheduler.SourceJobComp, state + "/" + scheduler.SourceEpilog, "node_down/"} {
		if !seen[want] {
			t.Errorf("jobs topic lacks a %s event for job %s; has %v", want, j.id, seen)
		}
	}
	if len(up) != simNodes {
		t.Errorf("node_up from %v, want all %d nodes", up, simNodes)
	}
}

// countSamples counts the simulation's samples of the job on the telemetry
// topic (exactly want, or at least want), checks there are no duplicates,
// and returns the count per measurement.
func countSamples(t *testing.T, broker string, j job, exact bool, want int) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "telemetry")
	if err != nil {
		t.Fatal(err)
	}
	parts := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			parts[o.Partition] = kgo.NewOffset().AtStart()
			left[o.Partition] = o.Offset
		}
	})
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{"telemetry": parts})
	lines := map[string]int{}
	per := map[string]int{}
	total := 0
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading telemetry: %v (partitions left %v)", ctx.Err(), left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
			if !strings.HasPrefix(string(r.Key), j.id+"/") {
				return
			}
			m, _, _ := strings.Cut(string(r.Value), ",")
			if !slices.Contains(simMeasurements, m) {
				return
			}
			total++
			per[m]++
			lines[string(r.Value)]++
		})
	}
	t.Logf("job %s: %d samples on the telemetry topic %v", j.id, total, per)
	if exact && total != want || !exact && total < want {
		t.Fatalf("job %s: %d samples on the telemetry topic, want %s%d", j.id, total, map[bool]string{true: "", false: "at least "}[exact], want)
	}
	for l, n := range lines {
		if n > 1 {
			t.Fatalf("sample %q arrived %d times", l, n)
		}
	}
	return per
}

// checkSummary polls `simtel runs show` until the run's summary holds
// every sample of the run (per measurement, its field value) with the
// run's state, exit code and nodes; the policy versions are those the
// simulation reports (only the ok job reads a policy).
func checkSummary(t *testing.T, bin, broker string, j job, state string, exit int, per map[string]int, ended time.Time) {
	t.Helper()
	var last string
	testutil.WaitFor(t, 60*time.Second, "the summary of run "+j.id, func() error {
		out, err := exec.Command(bin, "runs", "show", j.id, "--brokers", broker, "--format", "json").CombinedOutput()
		last = string(out)
		if err != nil {
			return fmt.Errorf("simtel runs show: %v: %s", err, out)
		}
		var s struct {
			State          string
			ExitCode       *int     `json:"exit_code"`
			Nodes          []string `json:"nodes"`
			PolicyVersions []int64  `json:"policy_versions"`
			Metrics        []struct {
				Metric string
				Count  int
			}
		}
		if err := json.Unmarshal(out, &s); err != nil {
			return fmt.Errorf("simtel runs show --format json: %v: %s", err, out)
		}
		counts := map[string]int{}
		for _, m := range s.Metrics {
			counts[m.Metric] = m.Count
		}
		for _, m := range simMeasurements {
			if counts[m+".value"] != per[m] {
				return fmt.Errorf("%s.value counts %d samples, the topic holds %d", m, counts[m+".value"], per[m])
			}
		}
		if s.State != state || exit >= 0 && (s.ExitCode == nil || *s.ExitCode != exit) || !slices.Equal(s.Nodes, []string{"n1", "n2", "n3"}) {
			return fmt.Errorf("state %s, exit code %v, nodes %v; want %s, %d, n1-n3", s.State, s.ExitCode, s.Nodes, state, exit)
		}
		if state == scheduler.StateCompleted && !slices.Equal(s.PolicyVersions, []int64{1}) {
			return fmt.Errorf("policy versions %v, want [1]", s.PolicyVersions)
		}
		return nil
	})
	t.Logf("job %s: summary complete %v after the job left Slurm's queue (then checked registry, events, samples and agents):\n%s", j.id, time.Since(ended).Round(time.Millisecond), last)
}

// checkNoAgents: every agent of the job has exited.
func checkNoAgents(t *testing.T, j job) {
	t.Helper()
	pids, _ := filepath.Glob(filepath.Join(j.dir, "nodes", "*", "agent.pid"))
	if len(pids) != simNodes {
		t.Fatalf("found %d agent pid files, want %d: %v", len(pids), simNodes, pids)
	}
	for _, f := range pids {
		b, _ := os.ReadFile(f)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			t.Errorf("agent pid %d (%s) survived the job (%v): %q", pid, f, err, cmdline)
		}
	}
	if out, err := exec.Command("pgrep", "-f", "--", "--spool-dir "+filepath.Join(j.dir, "nodes")).Output(); err == nil {
		t.Errorf("agent processes of job %s still running: %s", j.id, out)
	}
}

func checkLake(t *testing.T, bin, lake string, j job, per map[string]int) {
	t.Helper()
	for _, m := range simMeasurements {
		q := fmt.Sprintf("SELECT count(*) AS n FROM %s WHERE run = '%s'", m, j.id)
		var last string
		testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("lake holds %d %s rows of run %s", per[m], m, j.id), func() error {
			out, err := exec.Command(bin, "lake", "query", "--lake", lake, "--format", "csv", q).CombinedOutput()
			last = strings.TrimSpace(string(out))
			lines := strings.Split(last, "\n")
			n, perr := strconv.Atoi(strings.TrimSpace(lines[len(lines)-1]))
			if err != nil || perr != nil || n != per[m] {
				return fmt.Errorf("last answer to %q: %v: %s", q, err, last)
			}
			return nil
		})
		t.Logf("lake: %s -> %s", q, strings.ReplaceAll(last, "\n", " | "))
	}
}

// checkLakeRun checks that the sink marked the run complete in the lake,
// with its final state, once its data was flushed.
func checkLakeRun(t *testing.T, bin, lake string, j job, state string) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("simtel lake runs shows run %s as %s", j.id, state), func() error {
		out, err := exec.Command(bin, "lake", "runs", "--lake", lake, "--format", "json").Output()
		var runs []struct{ Run, State string }
		if err == nil && json.Unmarshal(out, &runs) == nil {
			for _, r := range runs {
				if r.Run == j.id && r.State == state {
					return nil
				}
			}
		}
		return fmt.Errorf("%v\n%s", err, out)
	})
}

func acked(t *testing.T, j job) map[string]int {
	files, _ := filepath.Glob(filepath.Join(j.dir, "acks", "rank-*.acked"))
	out := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil {
			out[filepath.Base(f)] = n
		}
	}
	return out
}

func jobOutput(j job) string {
	b, _ := os.ReadFile(filepath.Join(j.dir, "job.out"))
	return string(b)
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}
