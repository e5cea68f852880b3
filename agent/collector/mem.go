package collector

import (
	"errors"
	"time"
)

// Keys of /proc/meminfo that Collect reports, in the order of memKeys.
const (
	miMemTotal = iota
	miMemFree
	miMemAvailable
	miBuffers
	miCached
	miSReclaimable
	miActive
	miInactive
	miSlab
	miShmem
	miDirty
	miWriteback
	miSwapTotal
	miSwapFree
	miSwapCached
	miCommitted
	miHugePagesTotal
	miHugePagesFree
	numMeminfo
)

// meminfo holds /proc/meminfo values in bytes (HugePages_* are counts).
type meminfo struct {
	v   [numMeminfo]uint64
	has uint32 // bit i set when v[i] was read
}

var errNoMemTotal = errors.New("no MemTotal")

// parseMeminfo parses /proc/meminfo into m. Lines look like
// "MemTotal:       24684092 kB"; values with a kB unit become bytes.
func parseMeminfo(b []byte, m *meminfo) error {
	m.has = 0
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		f := fields{line}
		key, ok := f.next()
		if !ok || key[len(key)-1] != ':' {
			continue
		}
		var i int
		switch string(key[:len(key)-1]) {
		case "MemTotal":
			i = miMemTotal
		case "MemFree":
			i = miMemFree
		case "MemAvailable":
			i = miMemAvailable
		case "Buffers":
			i = miBuffers
		case "Cached":
			i = miCached
		case "SReclaimable":
			i = miSReclaimable
		case "Active":
			i = miActive
		case "Inactive":
			i = miInactive
		case "Slab":
			i = miSlab
		case "Shmem":
			i = miShmem
		case "Dirty":
			i = miDirty
		case "Writeback":
			i = miWriteback
		case "SwapTotal":
			i = miSwapTotal
		case "SwapFree":
			i = miSwapFree
		case "SwapCached":
			i = miSwapCached
		case "Committed_AS":
			i = miCommitted
		case "HugePages_Total":
			i = miHugePagesTotal
		case "HugePages_Free":
			i = miHugePagesFree
		default:
			continue
		}
		v, ok := f.nextUint()
		if !ok {
			continue
		}
		if unit, ok := f.next(); ok && string(unit) == "kB" {
			if v > 1<<53 { // beyond any real machine; keep the product in range
				continue
			}
			v *= 1024
		}
		m.v[i] = v
		m.has |= 1 << i
	}
	if m.has&(1<<miMemTotal) == 0 || m.v[miMemTotal] == 0 {
		return errNoMemTotal
	}
	return nil
}

func (m *meminfo) get(i int) (uint64, bool) {
	return m.v[i], m.has&(1<<i) != 0
}

// Field names of the extra meminfo values, as Telegraf's mem input names them.
var memExtraKeys = [...]struct {
	i   int
	key string
}{
	{miActive, "active"},
	{miInactive, "inactive"},
	{miSlab, "slab"},
	{miSReclaimable, "sreclaimable"},
	{miShmem, "shared"},
	{miDirty, "dirty"},
	{miWriteback, "write_back"},
	{miSwapTotal, "swap_total"},
	{miSwapFree, "swap_free"},
	{miSwapCached, "swap_cached"},
	{miCommitted, "committed_as"},
	{miHugePagesTotal, "huge_pages_total"},
	{miHugePagesFree, "huge_pages_free"},
}

// collectMemLocked writes the mem line. Derived values follow Telegraf
// (gopsutil): cached includes reclaimable slab, used = total - free -
// buffered - cached, and available falls back to free + buffered + cached on
// kernels without MemAvailable (before 3.14).
func (c *Collector) collectMemLocked(now time.Time) {
	m := &c.mu.mem
	if !c.readSourceLocked(srcMeminfo, c.meminfoPath, func(b []byte) error { return parseMeminfo(b, m) }) {
		return
	}

	total := m.v[miMemTotal]
	free, _ := m.get(miMemFree)
	buffered, _ := m.get(miBuffers)
	cached, _ := m.get(miCached)
	sreclaimable, _ := m.get(miSReclaimable)
	cached += sreclaimable
	available, ok := m.get(miMemAvailable)
	if !ok {
		available = free + buffered + cached
	}
	var used uint64
	if s := free + buffered + cached; s < total {
		used = total - s
	}

	c.beginLocked("mem")
	c.addUint("total", total)
	c.addUint("available", available)
	c.addUint("used", used)
	c.addUint("free", free)
	c.addUint("cached", cached)
	c.addUint("buffered", buffered)
	c.addFloat("used_percent", 100*float64(used)/float64(total))
	c.addFloat("available_percent", 100*float64(available)/float64(total))
	for _, k := range memExtraKeys {
		if v, ok := m.get(k.i); ok {
			c.addUint(k.key, v)
		}
	}
	c.endLocked(now)
}
