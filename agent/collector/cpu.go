package collector

import (
	"errors"
	"time"
)

// Columns of a cpu line in /proc/stat, in file order. Older kernels print
// fewer; the missing ones read as zero.
const (
	tUser = iota
	tNice
	tSystem
	tIdle
	tIowait
	tIrq
	tSoftirq
	tSteal
	tGuest
	tGuestNice
	numCPUTimes
)

// cpuTimes holds one cpu line of /proc/stat in USER_HZ ticks.
type cpuTimes [numCPUTimes]uint64

// userHZ is the unit of /proc/stat CPU times. The kernel fixes it at 100 for
// every architecture userspace still runs on, independent of CONFIG_HZ.
const userHZ = 100

// cpuSample is one per-core line: cpu<id>.
type cpuSample struct {
	id int
	t  cpuTimes
}

// maxCPUID bounds the core numbers accepted from /proc/stat, so a corrupt
// file cannot make the name cache grow without limit.
const maxCPUID = 1 << 16

// Bits of statSample.has.
const (
	hasTotal = 1 << iota
	hasCtxt
	hasIntr
	hasBtime
	hasForks
)

// statSample is what Collect uses of /proc/stat.
type statSample struct {
	has   uint8
	total cpuTimes
	cpus  []cpuSample
	ctxt  uint64 // context switches since boot
	intr  uint64 // interrupts since boot
	btime uint64 // boot time, Unix seconds
	forks uint64 // processes created since boot
}

var errNoCPUTotal = errors.New("no cpu line")

// parseStat parses /proc/stat into s, reusing s's memory. It returns an
// error when the aggregate cpu line is missing; malformed lines are skipped.
func parseStat(b []byte, s *statSample) error {
	s.has = 0
	s.cpus = s.cpus[:0]
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		f := fields{line}
		key, ok := f.next()
		if !ok {
			continue
		}
		switch string(key) {
		case "ctxt":
			s.ctxt, ok = f.nextUint()
			s.has |= flag(ok, hasCtxt)
			continue
		case "intr":
			s.intr, ok = f.nextUint() // the total; per-IRQ counts follow
			s.has |= flag(ok, hasIntr)
			continue
		case "btime":
			s.btime, ok = f.nextUint()
			s.has |= flag(ok, hasBtime)
			continue
		case "processes":
			s.forks, ok = f.nextUint()
			s.has |= flag(ok, hasForks)
			continue
		}
		if len(key) < 3 || string(key[:3]) != "cpu" {
			continue
		}
		var t cpuTimes
		if f.uints(t[:]) < 4 { // user nice system idle exist since Linux 2.4
			continue
		}
		if len(key) == 3 {
			s.total = t
			s.has |= hasTotal
			continue
		}
		id, ok := parseUint(key[3:])
		if !ok || id >= maxCPUID {
			continue
		}
		s.cpus = append(s.cpus, cpuSample{id: int(id), t: t})
	}
	if s.has&hasTotal == 0 {
		return errNoCPUTotal
	}
	return nil
}

func flag(ok bool, bit uint8) uint8 {
	if ok {
		return bit
	}
	return 0
}

// cpuState carries /proc/stat between calls.
type cpuState struct {
	cur, prev statSample
	havePrev  bool
	names     []string // "cpu0", "cpu1", ... by core number
}

// cpuUsage returns the percentage of time cur-prev spent in each state, the
// way Telegraf's cpu input computes it: guest time is already counted in
// user and nice, so the total leaves it out and usage_user excludes it.
// A counter that went backwards (seen for iowait on idle cores) counts as no
// change. ok is false when no time passed or the core was reset (hotplug).
func cpuUsage(cur, prev *cpuTimes) (pct [numCPUTimes]float64, ok bool) {
	var d cpuTimes
	for i := range d {
		if cur[i] > prev[i] {
			d[i] = cur[i] - prev[i]
		}
	}
	if sumTotal(cur) < sumTotal(prev) {
		return pct, false
	}
	// Sums are taken in float64 so that no input can overflow them; a sum of
	// non-negative floats is never below one of its terms, so no percentage
	// exceeds 100.
	total := sumTotal(&d)
	if total == 0 {
		return pct, false
	}
	user := d[tUser] - min(d[tGuest], d[tUser])
	nice := d[tNice] - min(d[tGuestNice], d[tNice])
	pct[tUser] = 100 * float64(user) / total
	pct[tNice] = 100 * float64(nice) / total
	for _, i := range [...]int{tSystem, tIdle, tIowait, tIrq, tSoftirq, tSteal, tGuest, tGuestNice} {
		pct[i] = min(100*float64(d[i])/total, 100)
	}
	return pct, true
}

// sumTotal is the time a core existed: every state but guest and guest_nice,
// which the kernel already counts in user and nice.
func sumTotal(t *cpuTimes) float64 {
	return float64(t[tUser]) + float64(t[tNice]) + float64(t[tSystem]) + float64(t[tIdle]) +
		float64(t[tIowait]) + float64(t[tIrq]) + float64(t[tSoftirq]) + float64(t[tSteal])
}

var (
	usageKeys = [numCPUTimes]string{"usage_user", "usage_nice", "usage_system", "usage_idle", "usage_iowait",
		"usage_irq", "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"}
	timeKeys = [numCPUTimes]string{"time_user", "time_nice", "time_system", "time_idle", "time_iowait",
		"time_irq", "time_softirq", "time_steal", "time_guest", "time_guest_nice"}
)

// collectStatLocked writes the cpu and kernel lines from /proc/stat. It
// returns the number of online cores, 0 when unknown.
func (c *Collector) collectStatLocked(now time.Time) int {
	st := &c.mu.cpu
	if !c.readSourceLocked(srcStat, c.statPath, func(b []byte) error { return parseStat(b, &st.cur) }) {
		return 0
	}
	cur, prev := &st.cur, &st.prev

	c.cpuLineLocked(now, "cpu-total", &cur.total, &prev.total, st.havePrev && prev.has&hasTotal != 0)
	for i := range cur.cpus {
		cs := &cur.cpus[i]
		// Cores are listed in the same order each time; search only when a
		// core came or went.
		var p *cpuTimes
		if st.havePrev {
			if i < len(prev.cpus) && prev.cpus[i].id == cs.id {
				p = &prev.cpus[i].t
			} else {
				for j := range prev.cpus {
					if prev.cpus[j].id == cs.id {
						p = &prev.cpus[j].t
						break
					}
				}
			}
		}
		c.cpuLineLocked(now, cpuName(&st.names, cs.id), &cs.t, p, p != nil)
	}

	if cur.has&(hasCtxt|hasIntr|hasBtime|hasForks) != 0 {
		c.beginLocked("kernel")
		if cur.has&hasBtime != 0 {
			c.addUint("boot_time", cur.btime)
		}
		if cur.has&hasCtxt != 0 {
			c.addUint("context_switches", cur.ctxt)
		}
		if cur.has&hasIntr != 0 {
			c.addUint("interrupts", cur.intr)
		}
		if cur.has&hasForks != 0 {
			c.addUint("processes_forked", cur.forks)
		}
		c.endLocked(now)
	}

	n := len(cur.cpus)
	st.cur, st.prev = st.prev, st.cur
	st.havePrev = true
	return n
}

func (c *Collector) cpuLineLocked(now time.Time, name string, cur, prev *cpuTimes, havePrev bool) {
	c.beginLocked("cpu")
	c.mu.enc.AddTag("cpu", name)
	if havePrev {
		if pct, ok := cpuUsage(cur, prev); ok {
			for i, v := range pct {
				c.addFloat(usageKeys[i], v)
			}
		}
	}
	for i, v := range cur {
		c.addFloat(timeKeys[i], float64(v)/userHZ)
	}
	c.endLocked(now)
}
