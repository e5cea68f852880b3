package collector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
)

// snapshotCollector copies testdata/proc/snap1 (captured from a 2-core
// Debian VM) into a temporary ProcRoot and returns a Collector reading it with
// a fake clock and no GPU.
func snapshotCollector(t *testing.T, cfg Config) (*Collector, string, *testutil.Clock) {
	t.Helper()
	root := t.TempDir()
	copyTree(t, "testdata/proc/snap1", root)
	clk := newFakeClock()
	cfg.ProcRoot = root
	if cfg.SysRoot == "" {
		cfg.SysRoot = filepath.Join(root, "no-sys")
	}
	cfg.NvidiaSMI = filepath.Join(root, "no-nvidia-smi")
	cfg.Now = clk.Now
	return New(cfg), root, clk
}

var rateKeys = []string{
	"usage_user", "usage_system", "usage_idle",
	"bytes_recv_per_sec", "bytes_sent_per_sec", "packets_recv_per_sec", "packets_sent_per_sec",
	"read_bytes_per_sec", "write_bytes_per_sec", "reads_per_sec", "writes_per_sec",
}

func TestFirstCollectReportsTotals(t *testing.T) {
	c, _, clk := snapshotCollector(t, Config{})
	pts := collect(t, c)

	got := strings.Join(measurements(pts), ",")
	if want := "cpu,diskio,kernel,mem,net,system"; got != want {
		t.Fatalf("measurements = %s, want %s", got, want)
	}
	for _, p := range pts {
		if !p.time.Equal(clk.Now()) {
			t.Errorf("%s %v: time %v, want %v", p.measurement, p.tags, p.time, clk.Now())
		}
		wantNoFields(t, p, rateKeys...)
	}
	if n := len(only(pts, "cpu")); n != 3 {
		t.Errorf("got %d cpu lines, want 3 (cpu-total, cpu0, cpu1)", n)
	}
	wantFields(t, one(t, pts, "cpu", "cpu", "cpu0"), map[string]any{
		"time_user": 1154.32, "time_nice": 0.0, "time_system": 407.69, "time_idle": 1786.63,
		"time_iowait": 18.28, "time_irq": 0.0, "time_softirq": 22.97, "time_steal": 4.61, "time_guest": 0.0,
	})
	wantFields(t, one(t, pts, "system"), map[string]any{
		"load1": 0.10, "load5": 1.70, "load15": 2.87, "n_cpus": int64(2), "uptime": int64(3436),
	})
	wantFields(t, one(t, pts, "kernel"), map[string]any{
		"boot_time": int64(1795956960), "context_switches": int64(75279168),
		"interrupts": int64(27652961), "processes_forked": int64(51832),
	})
	wantFields(t, one(t, pts, "net", "interface", "eth0"), map[string]any{
		"bytes_recv": int64(275886207), "packets_recv": int64(18912), "bytes_sent": int64(1431534),
		"packets_sent": int64(12924), "err_in": int64(0), "err_out": int64(0), "drop_in": int64(0), "drop_out": int64(0),
	})
	// lo is skipped by default; ifb0 and ifb1 never moved a packet.
	if n := len(only(pts, "net")); n != 1 {
		t.Errorf("got %d net lines, want 1 (eth0)", n)
	}
	wantFields(t, one(t, pts, "diskio", "name", "vda"), map[string]any{
		"reads": int64(139705), "writes": int64(4348696), "read_bytes": int64(6039530 * 512),
		"write_bytes": int64(392015424 * 512), "read_time": int64(108909), "write_time": int64(1073596),
		"io_time": int64(286176), "weighted_io_time": int64(1297592), "iops_in_progress": int64(0),
		"merged_reads": int64(16436), "merged_writes": int64(525578),
	})
	// loop0-7 and zram0 are skipped.
	if n := len(only(pts, "diskio")); n != 1 {
		t.Errorf("got %d diskio lines, want 1 (vda)", n)
	}
}

func TestSecondCollectReportsRates(t *testing.T) {
	c, root, clk := snapshotCollector(t, Config{})
	collect(t, c)
	copyTree(t, "testdata/proc/snap2", root)
	clk.Advance(10 * time.Second)
	pts := collect(t, c)

	// /proc/stat deltas (ticks) between the snapshots:
	//            user(guest) system idle iowait softirq steal  total
	//  cpu        700 (100)   300  2800   100     50     50    4000
	//  cpu0       600 (100)   200  1000   100     50     50    2000
	//  cpu1       100         100  1800    -5                   2000  (iowait went backwards: counts as 0)
	//  cpu2       new core: times only
	wantFields(t, one(t, pts, "cpu", "cpu", "cpu-total"), map[string]any{
		"usage_user": 15.0, "usage_system": 7.5, "usage_idle": 70.0, "usage_iowait": 2.5,
		"usage_irq": 0.0, "usage_softirq": 1.25, "usage_steal": 1.25, "usage_guest": 2.5,
		"usage_nice": 0.0, "usage_guest_nice": 0.0,
	})
	wantFields(t, one(t, pts, "cpu", "cpu", "cpu0"), map[string]any{
		"usage_user": 25.0, "usage_system": 10.0, "usage_idle": 50.0, "usage_iowait": 5.0,
		"usage_irq": 0.0, "usage_softirq": 2.5, "usage_steal": 2.5, "usage_guest": 5.0,
		"time_user": 1160.32, "time_guest": 1.0,
	})
	wantFields(t, one(t, pts, "cpu", "cpu", "cpu1"), map[string]any{
		"usage_user": 5.0, "usage_system": 5.0, "usage_idle": 90.0, "usage_iowait": 0.0,
	})
	cpu2 := one(t, pts, "cpu", "cpu", "cpu2")
	wantFields(t, cpu2, map[string]any{"time_user": 0.1, "time_system": 0.2, "time_idle": 0.3})
	wantNoFields(t, cpu2, "usage_user", "usage_idle")

	wantFields(t, one(t, pts, "system"), map[string]any{
		"load1": 0.5, "load5": 0.75, "load15": 1.25, "n_cpus": int64(3), "uptime": int64(3446),
	})
	wantFields(t, one(t, pts, "kernel"), map[string]any{
		"context_switches": int64(75284168), "interrupts": int64(27655961), "processes_forked": int64(51872),
	})

	// eth0 over 10 s: +1,000,000 bytes and +1000 packets in, +250,000 bytes
	// and +500 packets out, 3 receive errors, 7 transmit drops.
	wantFields(t, one(t, pts, "net", "interface", "eth0"), map[string]any{
		"bytes_recv": int64(276886207), "packets_recv": int64(19912), "err_in": int64(3), "drop_in": int64(0),
		"bytes_sent": int64(1681534), "packets_sent": int64(13424), "err_out": int64(0), "drop_out": int64(7),
		"bytes_recv_per_sec": 100000.0, "packets_recv_per_sec": 100.0,
		"bytes_sent_per_sec": 25000.0, "packets_sent_per_sec": 50.0,
	})
	ib0 := one(t, pts, "net", "interface", "ib0") // appeared: totals only
	wantFields(t, ib0, map[string]any{"bytes_recv": int64(4096), "bytes_sent": int64(2048)})
	wantNoFields(t, ib0, "bytes_recv_per_sec", "bytes_sent_per_sec")
	if n := len(only(pts, "net", "interface", "lo")); n != 0 {
		t.Errorf("got %d lo lines, want 0", n)
	}

	// vda over 10 s: +100 reads of 20000 sectors, +50 writes of 4000 sectors.
	wantFields(t, one(t, pts, "diskio", "name", "vda"), map[string]any{
		"reads": int64(139805), "read_bytes": int64(6059530 * 512), "writes": int64(4348746),
		"write_bytes": int64(392019424 * 512), "io_time": int64(286206),
		"read_bytes_per_sec": 1024000.0, "write_bytes_per_sec": 204800.0,
		"reads_per_sec": 10.0, "writes_per_sec": 5.0,
	})
	nvme := one(t, pts, "diskio", "name", "nvme0n1")
	wantFields(t, nvme, map[string]any{"reads": int64(500), "read_bytes": int64(8000 * 512)})
	wantNoFields(t, nvme, "read_bytes_per_sec")
	for _, part := range []string{"vda1", "nvme0n1p1", "loop0", "zram0"} {
		if n := len(only(pts, "diskio", "name", part)); n != 0 {
			t.Errorf("got %d diskio lines for %s, want 0", n, part)
		}
	}
}

func TestMem(t *testing.T) {
	c, _, _ := snapshotCollector(t, Config{})
	pts := collect(t, c)
	// snap1/meminfo in kB: MemTotal 24684092, MemFree 21526364, MemAvailable
	// 24117200, Buffers 42316, Cached 2737752, SReclaimable 200556.
	// cached = Cached + SReclaimable = 2938308; used = total - free - buffers - cached = 177104.
	const kB = 1024
	wantFields(t, one(t, pts, "mem"), map[string]any{
		"total":             int64(24684092 * kB),
		"free":              int64(21526364 * kB),
		"available":         int64(24117200 * kB),
		"buffered":          int64(42316 * kB),
		"cached":            int64(2938308 * kB),
		"used":              int64(177104 * kB),
		"used_percent":      100 * 177104.0 / 24684092,
		"available_percent": 100 * 24117200.0 / 24684092,
		"slab":              int64(253488 * kB),
		"swap_total":        int64(0),
		"committed_as":      int64(345956 * kB),
		"huge_pages_total":  int64(0),
	})
}

func TestMeminfoWithoutMemAvailable(t *testing.T) {
	// Linux before 3.14 has no MemAvailable: available = free + buffers + cached.
	var m meminfo
	err := parseMeminfo([]byte("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 200 kB\nHugePages_Total: 4\n"), &m)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "meminfo"), "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 200 kB\nHugePages_Total: 4\n")
	c := New(Config{ProcRoot: root, SysRoot: root, NvidiaSMI: filepath.Join(root, "none")})
	wantFields(t, one(t, collect(t, c), "mem"), map[string]any{
		"available": int64(350 * 1024), "used": int64(650 * 1024), "used_percent": 65.0,
		"available_percent": 35.0, "huge_pages_total": int64(4),
	})
	if err := parseMeminfo([]byte("MemFree: 100 kB\n"), &m); err == nil {
		t.Error("parseMeminfo without MemTotal: got nil error")
	}
}

func TestConfiguredInterfacesAndDevices(t *testing.T) {
	c, _, _ := snapshotCollector(t, Config{Interfaces: []string{"lo", "ifb0"}, Devices: []string{"loop0", "vda"}})
	pts := collect(t, c)
	var nets, disks []string
	for _, p := range only(pts, "net") {
		nets = append(nets, p.tags["interface"])
	}
	for _, p := range only(pts, "diskio") {
		disks = append(disks, p.tags["name"])
	}
	if got, want := strings.Join(nets, ","), "lo,ifb0"; got != want {
		t.Errorf("interfaces = %s, want %s", got, want)
	}
	if got, want := strings.Join(disks, ","), "loop0,vda"; got != want {
		t.Errorf("devices = %s, want %s", got, want)
	}
	wantFields(t, one(t, pts, "net", "interface", "lo"), map[string]any{"bytes_recv": int64(252862757251)})
}

func TestCounterWentBackwards(t *testing.T) {
	root := t.TempDir()
	clk := newFakeClock()
	c := New(Config{ProcRoot: root, SysRoot: root, NvidiaSMI: filepath.Join(root, "none"), Now: clk.Now})
	const hdr = "Inter-|   Receive |  Transmit\n face |bytes    packets|bytes\n"
	writeFile(t, filepath.Join(root, "net/dev"), hdr+"  eth0: 5000 50 0 0 0 0 0 0 7000 70 0 0 0 0 0 0\n")
	collect(t, c)
	// The driver reset its counters (receive side), transmit moved on.
	writeFile(t, filepath.Join(root, "net/dev"), hdr+"  eth0: 1000 10 0 0 0 0 0 0 9000 90 0 0 0 0 0 0\n")
	clk.Advance(2 * time.Second)
	p := one(t, collect(t, c), "net", "interface", "eth0")
	wantNoFields(t, p, "bytes_recv_per_sec", "packets_recv_per_sec")
	wantFields(t, p, map[string]any{"bytes_recv": int64(1000), "bytes_sent_per_sec": 1000.0, "packets_sent_per_sec": 10.0})
}

func TestMissingSourcesLogOnce(t *testing.T) {
	var logs logBuffer
	root := t.TempDir()
	c := New(Config{ProcRoot: root, SysRoot: root, JobID: "42", NvidiaSMI: filepath.Join(root, "no-such-nvidia-smi"), Logger: logs.logger()})
	for range 3 {
		out, err := c.Collect(context.Background(), []byte("keep\n"))
		if err != nil {
			t.Fatalf("Collect with nothing to read: %v", err)
		}
		if string(out) != "keep\n" {
			t.Fatalf("Collect with nothing to read: got %q, want only what dst held", out)
		}
	}
	for _, src := range []string{"stat", "meminfo", "loadavg", "uptime", "net/dev", "diskstats", "slurm_job", "gpu"} {
		if n := logs.count("collector source skipped", "source="+src+" "); n != 1 {
			t.Errorf("source %s: got %d debug lines after 3 calls, want 1\n%s", src, n, logs.String())
		}
	}
	// A source that comes back and fails again is logged again.
	writeFile(t, filepath.Join(root, "loadavg"), "0.1 0.2 0.3 1/1 1\n")
	collect(t, c)
	os.Remove(filepath.Join(root, "loadavg"))
	collect(t, c)
	if n := logs.count("collector source skipped", "source=loadavg"); n != 2 {
		t.Errorf("loadavg: got %d debug lines, want 2", n)
	}
}

func TestCollectAppendsAndStopsOnCancel(t *testing.T) {
	c, _, _ := snapshotCollector(t, Config{})
	out, err := c.Collect(context.Background(), []byte("x v=1i 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	pts := decodeLines(t, out)
	if pts[0].measurement != "x" || len(pts) < 2 {
		t.Errorf("Collect did not append to dst: %q", out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, err = c.Collect(ctx, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Collect with a cancelled context: err = %v, want context.Canceled", err)
	}
	if len(out) != 0 {
		t.Errorf("Collect with a cancelled context wrote %q", out)
	}
}

func TestCollectConcurrent(t *testing.T) {
	c, _, clk := snapshotCollector(t, Config{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var buf []byte
			for range 20 {
				clk.Advance(time.Second)
				var err error
				buf, err = c.Collect(context.Background(), buf[:0])
				if err != nil {
					t.Error(err)
					return
				}
				decodeLines(t, buf)
			}
		})
	}
	wg.Wait()
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{JobID: "123", UID: "1000"}, true},
		{Config{JobID: "12/../3"}, false},
		{Config{JobID: "123", UID: "root"}, false},
		{Config{GPUTimeout: -time.Second}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
}

func TestLooksLikePartition(t *testing.T) {
	for name, want := range map[string]bool{
		"sda": false, "sda1": true, "sdab12": true, "vda": false, "vdb3": true, "xvda1": true, "hdc": false,
		"nvme0n1": false, "nvme0n1p1": true, "mmcblk0": false, "mmcblk0p2": true, "md0": false, "md127p1": true,
		"dm-0": false, "sr0": false, "nbd0": false, "sd": false, "p1": false, "loop0p3": true,
	} {
		if got := looksLikePartition(name); got != want {
			t.Errorf("looksLikePartition(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestPartitionFromSysfs(t *testing.T) {
	// sysfs knows better than names: "data1" (a whole disk named by a
	// driver) and "weird" (a partition) would fool the naming rules.
	sys := t.TempDir()
	writeFile(t, filepath.Join(sys, "class/block/data1/size"), "100\n")
	writeFile(t, filepath.Join(sys, "class/block/weird/partition"), "1\n")
	writeFile(t, filepath.Join(sys, "class/block/cciss!c0d0/size"), "100\n")
	var s diskState
	s.init(nil, filepath.Join(sys, "class/block"))
	for name, want := range map[string]bool{"data1": true, "weird": false, "cciss/c0d0": true, "sdb2": false, "sdb": true} {
		if got := s.included(name); got != want {
			t.Errorf("included(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestTagValue(t *testing.T) {
	for in, want := range map[string]string{
		"eth0":             "eth0",
		"a b,c=d":          "a b,c=d", // the encoder escapes these
		"tab\there":        "tab_here",
		`trailing\`:        "trailing_",
		"":                 "_",
		"bad\xffutf8":      "bad\uFFFDutf8",
		"del\x7f":          "del_",
		"NVIDIA A100, x=1": "NVIDIA A100, x=1",
	} {
		if got := tagValue(in); got != want {
			t.Errorf("tagValue(%q) = %q, want %q", in, got, want)
		}
	}
}
