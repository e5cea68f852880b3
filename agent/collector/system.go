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
	var load [3]float64
	haveLoad := c.readSourceLocked(srcLoadavg, c.loadavgPath, func(b []byte) (err error) {
		load, err = parseLoadavg(b)
		return err
	})
	var up float64
	haveUp := c.readSourceLocked(srcUptime, c.uptimePath, func(b []byte) (err error) {
		up, err = parseUptime(b)
		return err
	})

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
