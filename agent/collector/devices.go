package collector

import "time"

// rateKey names the per-second rate of counter i of a device.
type rateKey struct {
	i   int
	key string
}

// devLine is one device's line of a per-device file (/proc/diskstats,
// /proc/net/dev). name points into the file buffer.
type devLine[C any] struct {
	name []byte
	c    C
}

// deviceKind is what differs between the per-device sources: the file's
// parser, the counters' field names and rates, and the line written.
type deviceKind[C any] struct {
	src         source
	measurement string
	tag         string // the tag that names the device
	keys        []string
	rates       []rateKey
	parse       func(b []byte, dst []devLine[C]) []devLine[C]
	values      func(c *C) []uint64
	// used reports whether a device has done any I/O since boot; unused
	// devices are noise, reported only when named in the configuration.
	used func(c *C) bool
}

// device is what Collect remembers about one disk or network interface
// between calls.
type device[C any] struct {
	name    string // tag value
	include bool   // passes the name filter
	prev    C      // counters at the last call that saw it
	seen    uint64 // generation of the last call that saw it
}

// deviceTable remembers the devices of one per-device source (diskstats,
// net/dev) from call to call: the previous counters that rates are computed
// from, and each name's filter decision, made once.
type deviceTable[C any] struct {
	only     map[string]bool // the configured names; nil for the source's default filter
	included func(name string) bool
	devs     map[string]*device[C]
	gen      uint64 // generation of the current call

	lines []devLine[C] // the lines of the current call, reused
}

// init sets the configured names (none: the default filter) and the filter
// that decides, once per name, whether a device is reported.
func (t *deviceTable[C]) init(only []string, included func(name string) bool) {
	t.devs = make(map[string]*device[C])
	t.included = included
	if len(only) > 0 {
		t.only = make(map[string]bool, len(only))
		for _, n := range only {
			t.only[n] = true
		}
	}
}

// see returns the device called name, made on its first sight, and whether
// its prev holds the counters of the call just before this one (false when
// it was missing from that call: its rates start over). The caller stores
// the counters it has now in prev once it has used the old ones.
func (t *deviceTable[C]) see(name []byte) (d *device[C], havePrev bool) {
	d = t.devs[string(name)]
	if d == nil {
		n := string(name)
		d = &device[C]{name: tagValue(n), include: t.included(n)}
		t.devs[n] = d
	}
	havePrev = d.seen != 0 && d.seen == t.gen-1
	d.seen = t.gen
	return d, havePrev
}

// forget drops the devices the current call did not see; n is how many it
// saw.
func (t *deviceTable[C]) forget(n int) {
	if len(t.devs) > n {
		for name, d := range t.devs {
			if d.seen != t.gen {
				delete(t.devs, name)
			}
		}
	}
}

// collectDevicesLocked reads the file of kind k at path and writes one line
// per reported device: totals, and rates over dt seconds for a device also
// seen by the previous call.
func collectDevicesLocked[C any](c *Collector, t *deviceTable[C], k *deviceKind[C], path string, now time.Time, dt float64) {
	t.gen++
	if !c.readSourceLocked(k.src, path, func(b []byte) error {
		t.lines = k.parse(b, t.lines)
		return nil
	}) {
		return
	}
	for i := range t.lines {
		l := &t.lines[i]
		d, havePrev := t.see(l.name)
		if d.include && (t.only != nil || k.used(&l.c)) {
			c.beginLocked(k.measurement)
			c.mu.enc.AddTag(k.tag, d.name)
			c.addCountersLocked(k.keys, k.values(&l.c), k.values(&d.prev), k.rates, dt, havePrev)
			c.endLocked(now)
		}
		d.prev = l.c
	}
	t.forget(len(t.lines))
}

// addCountersLocked adds a device's counters cur as fields named by keys
// and, when prev holds the previous call's counters (havePrev) dt seconds
// ago, the rates named by rates. A counter that went backwards (a reset or
// a wrap) has no rate this time.
func (c *Collector) addCountersLocked(keys []string, cur, prev []uint64, rates []rateKey, dt float64, havePrev bool) {
	for j, v := range cur {
		c.addUint(keys[j], v)
	}
	if havePrev && dt > 0 {
		for _, r := range rates {
			if cur, prev := cur[r.i], prev[r.i]; cur >= prev {
				c.addFloat(r.key, float64(cur-prev)/dt)
			}
		}
	}
}
