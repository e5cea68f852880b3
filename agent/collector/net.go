package collector

import (
	"bytes"
	"time"
)

// netCounters are the /proc/net/dev columns Collect reports, in netKeys order.
type netCounters [8]uint64

var netKeys = [8]string{"bytes_recv", "packets_recv", "err_in", "drop_in", "bytes_sent", "packets_sent", "err_out", "drop_out"}

// netRateKeys name the per-second rates of netCounters[0], [1], [4] and [5].
var netRateKeys = [...]rateKey{
	{0, "bytes_recv_per_sec"},
	{1, "packets_recv_per_sec"},
	{4, "bytes_sent_per_sec"},
	{5, "packets_sent_per_sec"},
}

// netLine is one interface of /proc/net/dev. name points into the file
// buffer.
type netLine struct {
	name []byte
	c    netCounters
}

// parseNetDev appends the interfaces of /proc/net/dev to dst[:0]. Lines look
// like "  eth0: 275217867 18713 0 0 0 0 0 0 1395282 12677 0 0 0 0 0 0": eight
// receive columns (bytes packets errs drop fifo frame compressed multicast)
// then eight transmit columns (bytes packets errs drop fifo colls carrier
// compressed). Header and malformed lines are skipped. Interface names cannot
// contain ':' (dev_valid_name), so the first colon ends the name.
func parseNetDev(b []byte, dst []netLine) []netLine {
	dst = dst[:0]
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			continue
		}
		name := bytes.Trim(line[:colon], " \t")
		if len(name) == 0 {
			continue
		}
		f := fields{line[colon+1:]}
		var v [16]uint64
		n := 0
		for n < len(v) {
			x, ok := f.nextUint()
			if !ok {
				break
			}
			v[n] = x
			n++
		}
		if n < 12 {
			continue
		}
		dst = append(dst, netLine{name: name, c: netCounters{v[0], v[1], v[2], v[3], v[8], v[9], v[10], v[11]}})
	}
	return dst
}

type netState struct {
	deviceTable[netCounters] // only holds Config.Interfaces

	lines []netLine
}

func (s *netState) init(only []string) { s.deviceTable.init(only, s.included) }

func (s *netState) included(name string) bool {
	if s.only != nil {
		return s.only[name]
	}
	return name != "lo"
}

// collectNetLocked writes one net line per interface: totals, and rates over
// dt seconds for an interface also seen by the previous call.
func (c *Collector) collectNetLocked(now time.Time, dt float64) {
	s := &c.mu.net
	s.gen++
	b, err := c.readLocked(c.netDevPath)
	if err != nil {
		c.failLocked(srcNetDev, err)
		return
	}
	c.okLocked(srcNetDev)
	s.lines = parseNetDev(b, s.lines)
	for i := range s.lines {
		l := &s.lines[i]
		ifc, prev, havePrev := s.see(l.name, l.c)
		if !ifc.include || (s.only == nil && l.c[1] == 0 && l.c[5] == 0) {
			continue // an interface that never moved a packet is noise unless asked for
		}
		c.beginLocked("net")
		c.mu.enc.AddTag("interface", ifc.name)
		c.addCountersLocked(netKeys[:], l.c[:], prev[:], netRateKeys[:], dt, havePrev)
		c.endLocked(now)
	}
	s.forget(len(s.lines))
}
