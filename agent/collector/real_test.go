//go:build linux

package collector

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRealProc collects from this machine's /proc and /sys twice and checks
// that the node measurements appear and parse.
func TestRealProc(t *testing.T) {
	var logs logBuffer
	c := New(Config{Logger: logs.logger(), NvidiaSMI: "/nonexistent/nvidia-smi"})
	first := collect(t, c)
	time.Sleep(300 * time.Millisecond)
	out, err := c.Collect(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	second := decodeLines(t, out)
	t.Logf("second collect, %d bytes:\n%s", len(out), out)

	want := []string{"cpu", "mem", "system", "kernel"}
	if hasActiveInterface(t) {
		want = append(want, "net")
	}
	if hasUsedDisk(t) {
		want = append(want, "diskio")
	}
	for _, pts := range [][]point{first, second} {
		for _, m := range want {
			if len(only(pts, m)) == 0 {
				t.Errorf("no %s line; got %v\nlog:\n%s", m, measurements(pts), logs.String())
			}
		}
	}
	if n := len(only(second, "cpu")); n < 2 {
		t.Errorf("got %d cpu lines, want cpu-total and at least one core", n)
	}
	sys := one(t, second, "system")
	if n, ok := sys.fields["n_cpus"].(int64); !ok || n < 1 || int(n) != len(only(second, "cpu"))-1 {
		t.Errorf("n_cpus = %v with %d per-core lines", sys.fields["n_cpus"], len(only(second, "cpu"))-1)
	}
	// Percentages over 300 ms: present once a tick has passed, summing to 100.
	total := one(t, second, "cpu", "cpu", "cpu-total")
	if _, ok := total.fields["usage_idle"]; ok {
		sum := 0.0
		for _, k := range []string{"usage_user", "usage_nice", "usage_system", "usage_idle", "usage_iowait", "usage_irq", "usage_softirq", "usage_steal"} {
			sum += total.fields[k].(float64)
		}
		if math.Abs(sum-100) > 1e-6 {
			t.Errorf("cpu-total usage_* sum to %v, want 100", sum)
		}
	}
	for _, p := range only(second, "net") {
		if _, ok := p.fields["bytes_recv_per_sec"]; !ok {
			t.Errorf("net %v: no bytes_recv_per_sec on the second call", p.tags)
		}
	}
	for _, p := range only(second, "diskio") {
		if _, ok := p.fields["read_bytes_per_sec"]; !ok {
			t.Errorf("diskio %v: no read_bytes_per_sec on the second call", p.tags)
		}
	}
	mem := one(t, second, "mem")
	if tot, _ := mem.fields["total"].(int64); tot <= 0 {
		t.Errorf("mem total = %v", mem.fields["total"])
	}
}

// hasActiveInterface reports whether /proc/net/dev lists an interface other
// than lo that has received or sent a packet.
func hasActiveInterface(t *testing.T) bool {
	b, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		f := strings.Fields(rest)
		if ok && strings.TrimSpace(name) != "lo" && len(f) >= 10 && (f[1] != "0" || f[9] != "0") {
			return true
		}
	}
	return false
}

// hasUsedDisk reports whether /proc/diskstats lists a device other than
// loop, ram and zram that has been read or written.
func hasUsedDisk(t *testing.T) bool {
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 14 || strings.HasPrefix(f[2], "loop") || strings.HasPrefix(f[2], "ram") || strings.HasPrefix(f[2], "zram") {
			continue
		}
		if f[3] != "0" || f[7] != "0" {
			return true
		}
	}
	return false
}
