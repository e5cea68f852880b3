package collector

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
)

// jobCollector copies a cgroup fixture tree (testdata/cgroup/v1 or v2) into
// a temporary directory and returns a Collector for job 42 reading it.
func jobCollector(t *testing.T, fixture string, cfg Config) (*Collector, string, *testutil.Clock, *logBuffer) {
	t.Helper()
	root := t.TempDir()
	if fixture != "" {
		copyTree(t, fixture, root)
	}
	clk := newFakeClock()
	logs := &logBuffer{}
	cfg.ProcRoot = filepath.Join(root, "proc")
	cfg.SysRoot = filepath.Join(root, "sys")
	if cfg.JobID == "" {
		cfg.JobID = "42"
	}
	cfg.NvidiaSMI = filepath.Join(root, "none")
	cfg.Now = clk.Now
	cfg.Logger = logs.logger()
	return New(cfg), root, clk, logs
}

func jobLines(t *testing.T, c *Collector) []point {
	t.Helper()
	return only(collect(t, c), "slurm_job")
}

func TestSlurmJobCgroupV2(t *testing.T) {
	c, root, clk, _ := jobCollector(t, "testdata/cgroup/v2", Config{})
	job := filepath.Join(root, "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42")

	p := one(t, jobLines(t, c), "slurm_job", "job", "42")
	wantFields(t, p, map[string]any{
		"cpu_usage_seconds": 5.0, "memory_usage_bytes": int64(1 << 30), "memory_max_bytes": int64(2 << 30),
	})
	wantNoFields(t, p, "cpu_percent", "memory_limit_bytes") // first call; memory.max is "max"

	// 15 cpu-seconds in 10 s: 150 % (a job using 1.5 cores).
	writeFile(t, filepath.Join(job, "cpu.stat"), "usage_usec 20000000\nuser_usec 18000000\nsystem_usec 2000000\n")
	writeFile(t, filepath.Join(job, "memory.max"), "8589934592\n")
	clk.Advance(10 * time.Second)
	p = one(t, jobLines(t, c), "slurm_job", "job", "42")
	wantFields(t, p, map[string]any{
		"cpu_usage_seconds": 20.0, "cpu_percent": 150.0, "memory_limit_bytes": int64(8 << 30),
	})
}

func TestSlurmJobCgroupV2Ends(t *testing.T) {
	c, root, clk, logs := jobCollector(t, "testdata/cgroup/v2", Config{})
	one(t, jobLines(t, c), "slurm_job")
	// The job ends: slurmstepd removes its cgroup.
	if err := os.RemoveAll(filepath.Join(root, "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.Advance(10 * time.Second)
		if got := jobLines(t, c); len(got) != 0 {
			t.Fatalf("after the job's cgroup was removed: got %d slurm_job lines, want 0", len(got))
		}
	}
	if n := logs.count("collector source skipped", "source=slurm_job"); n != 1 {
		t.Errorf("got %d debug lines for slurm_job, want 1\n%s", n, logs.String())
	}
}

func TestSlurmJobCgroupV1Search(t *testing.T) {
	// Two slurmd (n1, n2) on one host both hold job 42 and there is no
	// /proc/self/cgroup: the search takes the first in name order, slurm_n1.
	c, root, _, _ := jobCollector(t, "testdata/cgroup/v1", Config{UID: "1000"})
	os.RemoveAll(filepath.Join(root, "proc"))
	p := one(t, jobLines(t, c), "slurm_job", "job", "42")
	wantFields(t, p, map[string]any{
		"cpu_usage_seconds": 3.0, "memory_usage_bytes": int64(100 << 20), "memory_max_bytes": int64(200 << 20),
	})
	wantNoFields(t, p, "memory_limit_bytes") // v1's "unlimited" 9223372036854771712
}

func TestSlurmJobCgroupV1PrefersUID(t *testing.T) {
	for _, tc := range []struct {
		uid  string
		want float64
	}{
		{"1000", 3.0},  // slurm_n1/uid_1000 beats slurm_a/uid_999
		{"", 1e-9},     // no uid: first in name order, slurm_a
		{"999", 1e-9},  // uid_999
		{"4242", 1e-9}, // no match for the uid: first in name order
	} {
		c, root, _, _ := jobCollector(t, "testdata/cgroup/v1", Config{UID: tc.uid})
		os.RemoveAll(filepath.Join(root, "proc"))
		writeFile(t, filepath.Join(root, "sys/fs/cgroup/cpuacct/slurm_a/uid_999/job_42/cpuacct.usage"), "1\n")
		p := one(t, jobLines(t, c), "slurm_job")
		wantFields(t, p, map[string]any{"cpu_usage_seconds": tc.want})
	}
}

func TestSlurmJobCgroupV1FromSelf(t *testing.T) {
	// The agent runs inside job 42's step under slurmd n2: /proc/self/cgroup
	// says so, and that beats the search.
	c, _, _, _ := jobCollector(t, "testdata/cgroup/v1", Config{UID: "1000"})
	p := one(t, jobLines(t, c), "slurm_job", "job", "42")
	wantFields(t, p, map[string]any{
		"cpu_usage_seconds": 8.0, "memory_usage_bytes": int64(300 << 20), "memory_max_bytes": int64(400 << 20),
		"memory_limit_bytes": int64(4 << 30),
	})
}

func TestSlurmJobCgroupV2FromSelf(t *testing.T) {
	c, root, _, _ := jobCollector(t, "testdata/cgroup/v2", Config{})
	// A second copy of job 42 elsewhere that the search would find first.
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/a.slice/job_42/cpu.stat"), "usage_usec 1\n")
	writeFile(t, filepath.Join(root, "proc/self/cgroup"), "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n")
	wantFields(t, one(t, jobLines(t, c), "slurm_job"), map[string]any{"cpu_usage_seconds": 5.0})
}

func TestSlurmJobNotFound(t *testing.T) {
	c, root, clk, logs := jobCollector(t, "testdata/cgroup/v2", Config{JobID: "77"})
	if got := jobLines(t, c); len(got) != 0 {
		t.Fatalf("no cgroup for job 77: got %d slurm_job lines", len(got))
	}
	// The cgroup shows up later (the agent started before slurmstepd made
	// it): found at the next search, at most jobSearchBackoff later.
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/system.slice/slurmstepd.scope/job_77/memory.current"), "4096\n")
	clk.Advance(jobSearchBackoff / 2)
	if got := jobLines(t, c); len(got) != 0 {
		t.Fatalf("searched again before the backoff: got %d slurm_job lines", len(got))
	}
	clk.Advance(jobSearchBackoff / 2)
	wantFields(t, one(t, jobLines(t, c), "slurm_job", "job", "77"), map[string]any{"memory_usage_bytes": int64(4096)})
	if n := logs.count("collector source skipped", "source=slurm_job"); n != 1 {
		t.Errorf("got %d debug lines for slurm_job, want 1\n%s", n, logs.String())
	}
}

func TestSlurmJobSearchDepthBound(t *testing.T) {
	c, root, _, _ := jobCollector(t, "testdata/cgroup/v2", Config{JobID: "88"})
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/a/b/c/d/e/f/job_88/memory.current"), "1\n")
	if got := jobLines(t, c); len(got) != 0 {
		t.Errorf("job_88 at depth 7: got %d slurm_job lines, want 0 (search depth %d)", len(got), jobSearchDepth)
	}
	c, root, _, _ = jobCollector(t, "testdata/cgroup/v2", Config{JobID: "88"})
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/a/b/c/d/e/job_88/memory.current"), "1\n")
	if got := jobLines(t, c); len(got) != 1 {
		t.Errorf("job_88 at depth 6: got %d slurm_job lines, want 1", len(got))
	}
}

func TestNoJobIDNoSlurm(t *testing.T) {
	c, _, _, logs := jobCollector(t, "testdata/cgroup/v2", Config{})
	c.cfg.JobID = ""
	if got := jobLines(t, c); len(got) != 0 {
		t.Errorf("without a job id: got %d slurm_job lines", len(got))
	}
	if n := logs.count("source=slurm_job"); n != 0 {
		t.Errorf("without a job id: got %d slurm_job log lines, want 0", n)
	}
}
