package bench

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

// The fixtures in testdata/proc were read from a running agent (Linux 6.18),
// with the command name in stat changed to hold spaces and parentheses.

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/proc/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseProcStat(t *testing.T) {
	got, err := parseProcStat(readFixture(t, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (procCPU{UserTicks: 1122, SysTicks: 302, Threads: 11}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"",
		"3584 simtel S 1 2 3", // no parentheses
		"3584 (simtel) S 1 3572 28668 0 -1 4194304 1",                                // cut short
		"3584 (simtel) S 1 3572 28668 0 -1 4194304 127095 0 0 0 x 302 0 0 20 0 11 0", // utime not a number
	} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q): got no error", bad)
		}
	}
}

func TestParseProcStatus(t *testing.T) {
	got, err := parseProcStatus(readFixture(t, "status"))
	if err != nil {
		t.Fatal(err)
	}
	want := procMem{RSS: 135464 << 10, HWM: 217496 << 10, Anon: 120480 << 10, File: 14984 << 10}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// A zombie's status has no Vm lines.
	zombie := "Name:\tsimtel\nState:\tZ (zombie)\nThreads:\t1\n"
	if _, err := parseProcStatus([]byte(zombie)); err == nil {
		t.Error("zombie status: got no error")
	}
	if _, err := parseProcStatus([]byte("VmHWM:\t 10 kB\nVmRSS:\t 12 MB\n")); err == nil {
		t.Error("VmRSS in MB: got no error")
	}
}

func TestParseMachineStat(t *testing.T) {
	got, err := parseMachineStat(readFixture(t, "machine-stat"))
	if err != nil {
		t.Fatal(err)
	}
	// user nice system idle iowait irq softirq steal: busy leaves out
	// idle and iowait; guest and guest_nice are inside user and nice.
	want := machineCPU{Busy: 304687 + 0 + 124758 + 0 + 8216 + 976, Total: 304687 + 124758 + 446329 + 11654 + 8216 + 976}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := parseMachineStat([]byte("cpu0 1 2 3 4 5\n")); err == nil {
		t.Error("a per-CPU line first: got no error")
	}
}

func TestParseProcNetUDP(t *testing.T) {
	v4, v6 := readFixture(t, "net-udp"), readFixture(t, "net-udp6")
	for _, c := range []struct {
		table []byte
		port  int
		want  udpSocket
	}{
		{v4, 41089, udpSocket{Found: true, Drops: 35190}},
		{v4, 8081, udpSocket{Found: true, RxQueue: 0xA00, Drops: 3}},
		{v4, 9999, udpSocket{}},
		{v6, 41089, udpSocket{Found: true, RxQueue: 0x400, Drops: 7}},
	} {
		got, err := parseProcNetUDP(c.table, c.port)
		if err != nil {
			t.Fatalf("port %d: %v", c.port, err)
		}
		if got != c.want {
			t.Errorf("port %d: got %+v, want %+v", c.port, got, c.want)
		}
	}
	bad := strings.Replace(string(v4), "0100007F:A081", "0100007F:XYZ1", 1)
	if _, err := parseProcNetUDP([]byte(bad), 41089); err == nil {
		t.Error("a port that is not hexadecimal: got no error")
	}
}

func TestParseAuxvClkTck(t *testing.T) {
	var b []byte
	for _, kv := range [][2]uint64{{6, 4096}, {atClkTck, 250}, {0, 0}, {atClkTck, 1000}} {
		b = binary.LittleEndian.AppendUint64(b, kv[0])
		b = binary.LittleEndian.AppendUint64(b, kv[1])
	}
	if hz, ok := parseAuxvClkTck(b); !ok || hz != 250 {
		t.Errorf("got %d, %v; want 250, true", hz, ok)
	}
	// The entry after AT_NULL does not count.
	if _, ok := parseAuxvClkTck(b[32:]); ok {
		t.Error("found AT_CLKTCK after AT_NULL")
	}
	if _, ok := parseAuxvClkTck(b[:20]); ok {
		t.Error("found AT_CLKTCK in a vector without it")
	}
	if hz := clockTicks(); hz < 1 {
		t.Errorf("clockTicks() = %d", hz)
	}
}

// TestProcReaderSelf reads this test process the way the generator reads
// the agent.
func TestProcReaderSelf(t *testing.T) {
	r := newProcReader(os.Getpid())
	a, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 50_000_000 {
		x ^= i * i
	}
	_ = x
	b, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	if a.Mem.RSS <= 0 || a.Mem.HWM < a.Mem.RSS || a.CPU.Threads < 1 {
		t.Errorf("implausible sample %+v", a)
	}
	if s := r.cpuSeconds(a, b); s < 0.01 {
		t.Errorf("a busy loop of 50M iterations measured %g s of CPU", s)
	}
	if a.CPU.RunNs <= 0 || b.CPU.RunNs <= a.CPU.RunNs {
		t.Errorf("threads' run time: %d ns, then %d ns", a.CPU.RunNs, b.CPU.RunNs)
	}
	if b.Host.Total <= 0 {
		t.Errorf("no machine CPU time: %+v", b.Host)
	}
	gone := newProcReader(1 << 30)
	if _, err := gone.read(); !errors.Is(err, ErrProcessGone) {
		t.Errorf("a pid that does not exist: got %v, want ErrProcessGone", err)
	}
}

// TestCPUSecondsFallsBack checks when the threads' run time is used and
// when utime + stime is.
func TestCPUSecondsFallsBack(t *testing.T) {
	r := &procReader{hz: 100}
	at := func(ticks, ns int64) procSample { return procSample{CPU: procCPU{UserTicks: ticks, RunNs: ns}} }
	for _, c := range []struct {
		name string
		a, b procSample
		want float64
	}{
		{"agree: run time", at(10, 100_000_000), at(25, 253_000_000), 0.153},
		{"within two ticks: run time", at(10, 100_000_000), at(11, 125_000_000), 0.025},
		{"thread exited: ticks", at(10, 100_000_000), at(60, 120_000_000), 0.5},
		{"run time went back: ticks", at(10, 100_000_000), at(20, 50_000_000), 0.1},
		{"no run time: ticks", at(10, -1), at(20, 200_000_000), 0.1},
	} {
		if got := r.cpuSeconds(c.a, c.b); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: %g s, want %g", c.name, got, c.want)
		}
	}
	if v, err := parseSchedstat([]byte("123456789 2345 17\n")); err != nil || v != 123456789 {
		t.Errorf("parseSchedstat: %d, %v", v, err)
	}
	for _, bad := range []string{"", "x 1 2", "-5 1 2"} {
		if _, err := parseSchedstat([]byte(bad)); err == nil {
			t.Errorf("parseSchedstat(%q): no error", bad)
		}
	}
}

// FuzzProcParsers feeds the /proc parsers arbitrary bytes: they return an
// error or a value, never panic.
func FuzzProcParsers(f *testing.F) {
	for _, name := range []string{"stat", "status", "net-udp", "net-udp6", "machine-stat"} {
		f.Add(readFixture(f, name))
	}
	f.Add([]byte("1 ()) S"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseProcStat(b)
		_, _ = parseProcStatus(b)
		_, _ = parseMachineStat(b)
		_, _ = parseProcNetUDP(b, 41089)
		_, _ = parseAuxvClkTck(b)
	})
}

func TestParsePss(t *testing.T) {
	rollup := "00400000-7ffd1000 ---p 00000000 00:00 0 [rollup]\nRss:               52168 kB\nPss:               49854 kB\nPss_Anon:          34004 kB\n"
	got, err := parsePss([]byte(rollup))
	if err != nil || got != 49854<<10 {
		t.Fatalf("got %d, %v; want %d", got, err, 49854<<10)
	}
	for _, bad := range []string{"Rss: 1 kB\n", "Pss: lots kB\n", "Pss: 12 MB\n"} {
		if _, err := parsePss([]byte(bad)); err == nil {
			t.Errorf("%q: got no error", bad)
		}
	}
}
