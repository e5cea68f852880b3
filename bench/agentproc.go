package bench

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What `simtel bench agent` reads from /proc to measure the agent process
// (proc(5)): its CPU time and threads from /proc/<pid>/stat, its memory
// from /proc/<pid>/status, the machine's CPU time from /proc/stat, and the
// agent's UDP socket from /proc/<pid>/net/udp{,6}. The parsers take the
// file's bytes, so the tests feed them fixture files.

// procCPU is a process's CPU time from /proc/<pid>/stat and its threads'
// schedstat files.
type procCPU struct {
	UserTicks, SysTicks int64 // utime and stime, in clock ticks (CLK_TCK)
	Threads             int
	// RunNs is the sum over the process's threads of the time they ran
	// (the first field of /proc/<pid>/task/<tid>/schedstat), in
	// nanoseconds, or -1 if it could not be read. utime + stime is the
	// same time rounded to a clock tick (10 ms): too coarse for an agent
	// that uses 0.1 s of CPU in a 10 s step.
	RunNs int64
}

// parseSchedstat reads the first field of a schedstat file: the time the
// task ran, in nanoseconds.
func parseSchedstat(b []byte) (int64, error) {
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, errors.New("empty schedstat")
	}
	v, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("run time %q is not a count of nanoseconds", f[0])
	}
	return v, nil
}

// threadsRunNs sums the run time of the threads of pid; -1 if any of them
// cannot be read (other than one that exited while being read).
func threadsRunNs(pid int) int64 {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	var sum int64
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err != nil {
			return -1
		}
		v, err := parseSchedstat(b)
		if err != nil {
			return -1
		}
		sum += v
	}
	return sum
}

// parseProcStat reads utime (field 14), stime (15) and num_threads (20) of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may
// itself hold spaces and parentheses, so fields are counted from the last
// closing parenthesis.
func parseProcStat(b []byte) (procCPU, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procCPU{}, errors.New("no command name in parentheses")
	}
	// rest[0] is field 3 (state), so field n is rest[n-3].
	rest := strings.Fields(string(b[i+1:]))
	if len(rest) < 20-3+1 {
		return procCPU{}, fmt.Errorf("%d fields after the command name, want at least %d", len(rest), 20-3+1)
	}
	var c procCPU
	var err error
	if c.UserTicks, err = strconv.ParseInt(rest[14-3], 10, 64); err != nil {
		return procCPU{}, fmt.Errorf("utime: %w", err)
	}
	if c.SysTicks, err = strconv.ParseInt(rest[15-3], 10, 64); err != nil {
		return procCPU{}, fmt.Errorf("stime: %w", err)
	}
	if c.Threads, err = strconv.Atoi(rest[20-3]); err != nil {
		return procCPU{}, fmt.Errorf("num_threads: %w", err)
	}
	return c, nil
}

// procMem is a process's memory from /proc/<pid>/status, in bytes.
type procMem struct {
	RSS  int64 // VmRSS: resident now
	HWM  int64 // VmHWM: the largest VmRSS since start or since clear_refs
	Anon int64 // RssAnon: heap, stacks (what the Go runtime holds)
	File int64 // RssFile: mapped files (mostly the binary's text)
	// PSS is the proportional set size from smaps_rollup (Linux ≥ 4.14):
	// RSS with every page shared with other processes divided among them.
	// Zero when it could not be read.
	PSS int64
}

// parsePss reads the Pss line of /proc/<pid>/smaps_rollup, in bytes.
func parsePss(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || key != "Pss" {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("Pss: %q is not a size in kB", strings.TrimSpace(val))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("Pss: %w", err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("no Pss line")
}

// parseProcStatus reads VmRSS, VmHWM, RssAnon and RssFile ("kB" lines) of
// /proc/<pid>/status. VmRSS and VmHWM are required; the Rss* split exists
// since Linux 4.5.
func parseProcStatus(b []byte) (procMem, error) {
	var m procMem
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch key {
		case "VmRSS":
			dst = &m.RSS
			seen |= 1
		case "VmHWM":
			dst = &m.HWM
			seen |= 2
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return procMem{}, fmt.Errorf("%s: %q is not a size in kB", key, strings.TrimSpace(val))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return procMem{}, fmt.Errorf("%s: %w", key, err)
		}
		*dst = kb << 10
	}
	if seen != 3 {
		return procMem{}, errors.New("VmRSS or VmHWM missing (a kernel thread or a zombie has none)")
	}
	return m, nil
}

// machineCPU is the first line of /proc/stat: the time all CPUs spent, in
// clock ticks.
type machineCPU struct {
	Busy, Total int64
}

// parseMachineStat reads the "cpu" line of /proc/stat. Busy is everything
// but idle and iowait. guest and guest_nice are already counted in user
// and nice, so they are not added again.
func parseMachineStat(b []byte) (machineCPU, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("first line %q is not the cpu total", line)
	}
	var c machineCPU
	for i, s := range f[1:] {
		if i >= 8 { // guest, guest_nice
			break
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("cpu field %d: %w", i+1, err)
		}
		c.Total += v
		if i != 3 && i != 4 { // idle, iowait
			c.Busy += v
		}
	}
	return c, nil
}

// udpSocket is what /proc/net/udp says about the sockets bound to a port.
type udpSocket struct {
	Found   bool
	RxQueue int64 // bytes waiting to be read
	Drops   int64 // datagrams dropped since the socket was opened
}

// parseProcNetUDP sums rx_queue and drops over the sockets of a
// /proc/net/udp or udp6 table whose local port is port. The addresses are
// hexadecimal ("0100007F:1F91"), the queues "tx:rx" in hexadecimal, and
// drops, the last column, decimal.
func parseProcNetUDP(b []byte, port int) (udpSocket, error) {
	var s udpSocket
	sc := bufio.NewScanner(bytes.NewReader(b))
	header := true
	for sc.Scan() {
		if header { // "sl local_address rem_address ..."
			header = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 13 {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			return udpSocket{}, fmt.Errorf("local address %q has no port", f[1])
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			return udpSocket{}, fmt.Errorf("local address %q: %w", f[1], err)
		}
		if int(p) != port {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		q, err := strconv.ParseInt(rx, 16, 64)
		if err != nil {
			return udpSocket{}, fmt.Errorf("queues %q: %w", f[4], err)
		}
		d, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if err != nil {
			return udpSocket{}, fmt.Errorf("drops %q: %w", f[len(f)-1], err)
		}
		s.Found = true
		s.RxQueue += q
		s.Drops += d
	}
	return s, sc.Err()
}

// atClkTck is the auxiliary vector entry that holds sysconf(_SC_CLK_TCK).
const atClkTck = 17

// parseAuxvClkTck finds AT_CLKTCK in a 64-bit little-endian auxiliary
// vector (/proc/self/auxv): pairs of (type, value) words ending with type 0.
func parseAuxvClkTck(b []byte) (int64, bool) {
	for ; len(b) >= 16; b = b[16:] {
		typ, val := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		if typ == 0 {
			break
		}
		if typ == atClkTck && val > 0 {
			return int64(val), true
		}
	}
	return 0, false
}

// clockTicks returns the kernel's USER_HZ, the unit of the times in
// /proc/<pid>/stat and /proc/stat: 100 on every common Linux build, read
// from the auxiliary vector when it is there.
func clockTicks() int64 {
	if b, err := os.ReadFile("/proc/self/auxv"); err == nil {
		if hz, ok := parseAuxvClkTck(b); ok {
			return hz
		}
	}
	return 100
}

// procSample is one reading of a process, with the time it was taken.
type procSample struct {
	At   time.Time
	CPU  procCPU
	Mem  procMem
	Host machineCPU
}

// procReader reads one process's files. It keeps no state between reads.
type procReader struct {
	pid int
	hz  int64
}

func newProcReader(pid int) *procReader {
	return &procReader{pid: pid, hz: clockTicks()}
}

// ErrProcessGone is returned by the agent measurement when the process it
// measures no longer exists: it crashed or was stopped during the run.
var ErrProcessGone = errors.New("process is gone")

func (r *procReader) read() (procSample, error) {
	s := procSample{At: time.Now()}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.pid))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return s, fmt.Errorf("pid %d: %w", r.pid, ErrProcessGone)
	}
	if err != nil {
		return s, fmt.Errorf("cannot read /proc/%d/stat: %w", r.pid, err)
	}
	if s.CPU, err = parseProcStat(b); err != nil {
		return s, fmt.Errorf("cannot parse /proc/%d/stat: %w", r.pid, err)
	}
	s.CPU.RunNs = threadsRunNs(r.pid)
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", r.pid))
	if err != nil {
		return s, fmt.Errorf("cannot read /proc/%d/status: %w", r.pid, err)
	}
	if s.Mem, err = parseProcStatus(b); err != nil {
		// A zombie has a stat file but no memory: it has exited.
		return s, fmt.Errorf("pid %d: %w (%v)", r.pid, ErrProcessGone, err)
	}
	if b, err = os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", r.pid)); err == nil {
		s.Mem.PSS, _ = parsePss(b)
	}
	if b, err = os.ReadFile("/proc/stat"); err == nil {
		s.Host, _ = parseMachineStat(b)
	}
	return s, nil
}

// cpuSeconds is the CPU time the process used between a and b: the sum
// of its threads' run times, to the nanosecond, as long as that agrees
// with utime + stime (to two clock ticks and 5%); otherwise, as when a
// thread exited in between and took its run time along, utime + stime.
func (r *procReader) cpuSeconds(a, b procSample) float64 {
	d := (b.CPU.UserTicks + b.CPU.SysTicks) - (a.CPU.UserTicks + a.CPU.SysTicks)
	ticks := float64(d) / float64(r.hz)
	if a.CPU.RunNs < 0 || b.CPU.RunNs < 0 || b.CPU.RunNs < a.CPU.RunNs {
		return ticks
	}
	precise := float64(b.CPU.RunNs-a.CPU.RunNs) / 1e9
	if diff := precise - ticks; diff > 2/float64(r.hz)+0.05*ticks || -diff > 2/float64(r.hz)+0.05*ticks {
		return ticks
	}
	return precise
}

// resetPeak makes VmHWM start again from the current VmRSS (writing 5 to
// clear_refs, Linux ≥ 4.0; needs the right to write to the process's
// files, as its owner or root).
func (r *procReader) resetPeak() error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", r.pid), []byte("5\n"), 0)
}

// udp reads the process's UDP sockets on port, IPv4 and IPv6.
func (r *procReader) udp(port int) (udpSocket, error) {
	var all udpSocket
	for _, name := range []string{"udp", "udp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", r.pid, name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // no IPv6
			}
			return all, fmt.Errorf("cannot read /proc/%d/net/%s: %w", r.pid, name, err)
		}
		s, err := parseProcNetUDP(b, port)
		if err != nil {
			return all, fmt.Errorf("cannot parse /proc/%d/net/%s: %w", r.pid, name, err)
		}
		all.Found = all.Found || s.Found
		all.RxQueue += s.RxQueue
		all.Drops += s.Drops
	}
	return all, nil
}

// selfCPU is the CPU time this process (the load generator) has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
