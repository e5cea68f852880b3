package collector

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
)

func gpuCollector(t *testing.T, smi string, timeout time.Duration) (*Collector, *testutil.Clock, *logBuffer) {
	t.Helper()
	root := t.TempDir()
	clk := newFakeClock()
	logs := &logBuffer{}
	c := New(Config{ProcRoot: root, SysRoot: root, NvidiaSMI: smi, GPUTimeout: timeout, Now: clk.Now, Logger: logs.logger()})
	return c, clk, logs
}

func gpuLines(t *testing.T, c *Collector) []point {
	t.Helper()
	return only(collect(t, c), "gpu")
}

func TestGPU(t *testing.T) {
	smi, err := filepath.Abs("testdata/fake-nvidia-smi")
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := gpuCollector(t, smi, 0)
	pts := gpuLines(t, c)
	if len(pts) != 2 {
		t.Fatalf("got %d gpu lines, want 2", len(pts))
	}
	g0 := one(t, pts, "gpu", "index", "0")
	if got, want := g0.tags["name"], "NVIDIA A100-SXM4-80GB"; got != want {
		t.Errorf("gpu 0 name = %q, want %q", got, want)
	}
	if got, want := g0.tags["uuid"], "GPU-5f1ac2b0-1d2e-4c3b-9a8f-0e1d2c3b4a59"; got != want {
		t.Errorf("gpu 0 uuid = %q, want %q", got, want)
	}
	wantFields(t, g0, map[string]any{
		"utilization_gpu": int64(87), "utilization_memory": int64(45), "memory_used": int64(40536),
		"memory_total": int64(81920), "temperature_gpu": int64(61), "power_draw": 312.45,
	})

	// A name with a comma, a space and '=' survives the CSV and is escaped
	// in the tag; values nvidia-smi cannot read are left out.
	g1 := one(t, pts, "gpu", "index", "1")
	if got, want := g1.tags["name"], "NVIDIA A100, rev=2"; got != want {
		t.Errorf("gpu 1 name = %q, want %q", got, want)
	}
	wantFields(t, g1, map[string]any{"utilization_memory": int64(3), "memory_used": int64(1024), "temperature_gpu": int64(35)})
	wantNoFields(t, g1, "utilization_gpu", "power_draw")
}

func TestGPUByNameInPath(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/fake-nvidia-smi")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	c, _, _ := gpuCollector(t, "", 0) // default: "nvidia-smi" from PATH
	if n := len(gpuLines(t, c)); n != 2 {
		t.Errorf("got %d gpu lines, want 2", n)
	}
}

func TestGPUMissingBinary(t *testing.T) {
	c, clk, logs := gpuCollector(t, filepath.Join(t.TempDir(), "nvidia-smi"), 0)
	for range 3 {
		if n := len(gpuLines(t, c)); n != 0 {
			t.Fatalf("no nvidia-smi: got %d gpu lines", n)
		}
		clk.Advance(gpuMissingRetry + time.Second) // looked for again each time
	}
	if n := logs.count("collector source skipped", "source=gpu"); n != 1 {
		t.Errorf("no nvidia-smi: got %d debug lines, want 1\n%s", n, logs.String())
	}
}

func TestGPUHungIsBoundedAndBacksOff(t *testing.T) {
	smi, _ := filepath.Abs("testdata/hang-nvidia-smi")
	runs := filepath.Join(t.TempDir(), "runs")
	t.Setenv("FAKE_NVIDIA_SMI_LOG", runs)
	c, clk, logs := gpuCollector(t, smi, 200*time.Millisecond)

	start := time.Now()
	if n := len(gpuLines(t, c)); n != 0 {
		t.Fatalf("hung nvidia-smi: got %d gpu lines", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Collect with a hung nvidia-smi took %v, want about the 200ms timeout", d)
	}
	if n := logs.count("collector source skipped", "source=gpu", "deadline exceeded"); n != 1 {
		t.Errorf("got %d timeout debug lines, want 1\n%s", n, logs.String())
	}

	// Within the backoff nvidia-smi is not run again.
	clk.Advance(gpuMinBackoff / 2)
	gpuLines(t, c)
	if n := countRuns(t, runs); n != 1 {
		t.Errorf("nvidia-smi ran %d times within the backoff, want 1", n)
	}
	clk.Advance(gpuMinBackoff)
	gpuLines(t, c)
	if n := countRuns(t, runs); n != 2 {
		t.Errorf("nvidia-smi ran %d times after the backoff, want 2", n)
	}
}

func countRuns(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

func TestGPUFailingCommand(t *testing.T) {
	// Wrong arguments make the fake exit 2, like nvidia-smi without a driver.
	dir := t.TempDir()
	smi := filepath.Join(dir, "nvidia-smi")
	writeFile(t, smi, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n")
	os.Chmod(smi, 0o755)
	c, _, logs := gpuCollector(t, smi, 0)
	out, err := c.Collect(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(only(decodeLines(t, out), "gpu")); n != 0 {
		t.Errorf("failing nvidia-smi: got %d gpu lines", n)
	}
	if n := logs.count("source=gpu", "exit status 9", "could not communicate"); n != 1 {
		t.Errorf("got %d debug lines naming the exit status and message, want 1\n%s", n, logs.String())
	}
}

func TestParseNvidiaSMI(t *testing.T) {
	rows := parseNvidiaSMI([]byte("0, GPU-a, Tesla T4, 1, 2, 3, 4, 5, 6.5\n\ngarbage\n1, , , , , , , , \n"), nil)
	if len(rows) != 2 {
		t.Fatalf("got %d rows, want 2: %+v", len(rows), rows)
	}
	if r := rows[0]; r.index != "0" || r.uuid != "GPU-a" || r.name != "Tesla T4" || r.vals != [6]float64{1, 2, 3, 4, 5, 6.5} {
		t.Errorf("row 0 = %+v", r)
	}
	if r := rows[1]; r.index != "1" || r.uuid != "" || r.name != "" {
		t.Errorf("row 1 = %+v", r)
	}
}
