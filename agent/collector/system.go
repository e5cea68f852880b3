package collector

import (
	"errors"
	"time"
)

var errBadLoadavg = errors.New("malformed loadavg")

// parseLoadavg parses the first three fields of /proc/loadavg
// ("0.10 1.70 2.87 1/106 19372").
func parseLoadavg(b []byte) (load [3]float64, err error) {
	line, _ := nextLine(b)
	f := fields{line}
	for i := range load {
		tok, ok := f.next()
		if !ok {
			return load, errBadLoadavg
		}
		if load[i], ok = parseFloat(tok); !ok {
			return load, errBadLoadavg
		}
	}
	return load, nil
}

var errBadUptime = errors.New("malformed uptime")

// parseUptime parses the first field of /proc/uptime ("3436.38 3389.10"),
// the seconds since boot.
func parseUptime(b []byte) (float64, error) {
	line, _ := nextLine(b)
	f := fields{line}
	tok, ok := f.next()
	if !ok {
		return 0, errBadUptime
	}
	v, ok := parseFloat(tok)
	if !ok || v < 0 || v > 1e15 {
		return 0, errBadUptime
	}
	return v, nil
}

// collectSystemLocked writes the system line: load averages, uptime in whole
// seconds (as Telegraf) and n_cpus, the online cores counted in /proc/stat
// (left out when that could not be read).
func (c *Collector) collectSystemLocked(now time.Time, nCPU int) {
	b, err := c.readLocked(c.loadavgPath)
	var load [3]float64
	if err == nil {
		load, err = parseLoadavg(b)
	}
	haveLoad := err == nil
	if haveLoad {
		c.okLocked(srcLoadavg)
	} else {
		c.failLocked(srcLoadavg, err)
	}

	b, err = c.readLocked(c.uptimePath)
	var up float64
	if err == nil {
		up, err = parseUptime(b)
	}
	haveUp := err == nil
	if haveUp {
		c.okLocked(srcUptime)
	} else {
		c.failLocked(srcUptime, err)
	}

	if !haveLoad && !haveUp && nCPU == 0 {
		return
	}
	c.beginLocked("system")
	if haveLoad {
		c.addFloat("load1", load[0])
		c.addFloat("load5", load[1])
		c.addFloat("load15", load[2])
	}
	if nCPU > 0 {
		c.addInt("n_cpus", int64(nCPU))
	}
	if haveUp {
		c.addUint("uptime", uint64(up))
	}
	c.endLocked(now)
}
