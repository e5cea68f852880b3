package collector

import "bytes"

// netCounters are the /proc/net/dev columns Collect reports, in netKeys order.
type netCounters [8]uint64

var netKeys = [8]string{"bytes_recv", "packets_recv", "err_in", "drop_in", "bytes_sent", "packets_sent", "err_out", "drop_out"}

var netKind = deviceKind[netCounters]{
	src:         srcNetDev,
	measurement: "net",
	tag:         "interface",
	keys:        netKeys[:],
	rates: []rateKey{
		{0, "bytes_recv_per_sec"},
		{1, "packets_recv_per_sec"},
		{4, "bytes_sent_per_sec"},
		{5, "packets_sent_per_sec"},
	},
	parse:  parseNetDev,
	values: func(c *netCounters) []uint64 { return c[:] },
	used:   func(c *netCounters) bool { return c[1] != 0 || c[5] != 0 }, // packets received or sent
}

// parseNetDev appends the interfaces of /proc/net/dev to dst[:0]. Lines look
// like "  eth0: 275217867 18713 0 0 0 0 0 0 1395282 12677 0 0 0 0 0 0": eight
// receive columns (bytes packets errs drop fifo frame compressed multicast)
// then eight transmit columns (bytes packets errs drop fifo colls carrier
// compressed). Header and malformed lines are skipped. Interface names cannot
// contain ':' (dev_valid_name), so the first colon ends the name.
func parseNetDev(b []byte, dst []devLine[netCounters]) []devLine[netCounters] {
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
		if f.uints(v[:]) < 12 {
			continue
		}
		dst = append(dst, devLine[netCounters]{name: name, c: netCounters{v[0], v[1], v[2], v[3], v[8], v[9], v[10], v[11]}})
	}
	return dst
}

type netState struct {
	deviceTable[netCounters] // only holds Config.Interfaces
}

func (s *netState) init(only []string) { s.deviceTable.init(only, s.included) }

func (s *netState) included(name string) bool {
	if s.only != nil {
		return s.only[name]
	}
	return name != "lo"
}
