package collector

// rateKey names the per-second rate of counter i of a device.
type rateKey struct {
	i   int
	key string
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

// see returns the device called name, made on its first sight, with the
// counters it had at the call just before this one (havePrev false when it
// was missing from that call: its rates start over), and remembers cur as
// its counters now.
func (t *deviceTable[C]) see(name []byte, cur C) (d *device[C], prev C, havePrev bool) {
	d = t.devs[string(name)]
	if d == nil {
		n := string(name)
		d = &device[C]{name: tagValue(n), include: t.included(n)}
		t.devs[n] = d
	}
	havePrev = d.seen != 0 && d.seen == t.gen-1
	d.seen = t.gen
	prev, d.prev = d.prev, cur
	return d, prev, havePrev
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
