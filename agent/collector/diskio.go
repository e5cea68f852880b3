package collector

import (
	"os"
	"path/filepath"
	"strings"
)

// Indexes into diskCounters, in diskKeys order.
const (
	dReads = iota
	dWrites
	dReadBytes
	dWriteBytes
	dReadTime
	dWriteTime
	dIOTime
	dWeightedIOTime
	dInProgress
	dMergedReads
	dMergedWrites
	numDiskCounters
)

// diskCounters are the /proc/diskstats values Collect reports; times in
// milliseconds, bytes computed from 512-byte sectors (the unit of diskstats
// whatever the device's sector size).
type diskCounters [numDiskCounters]uint64

// diskKeys are Telegraf's diskio field names.
var diskKeys = [numDiskCounters]string{"reads", "writes", "read_bytes", "write_bytes", "read_time", "write_time",
	"io_time", "weighted_io_time", "iops_in_progress", "merged_reads", "merged_writes"}

var diskKind = deviceKind[diskCounters]{
	src:         srcDiskstats,
	measurement: "diskio",
	tag:         "name",
	keys:        diskKeys[:],
	rates: []rateKey{
		{dReadBytes, "read_bytes_per_sec"},
		{dWriteBytes, "write_bytes_per_sec"},
		{dReads, "reads_per_sec"},
		{dWrites, "writes_per_sec"},
	},
	parse:  parseDiskstats,
	values: func(c *diskCounters) []uint64 { return c[:] },
	used:   func(c *diskCounters) bool { return c[dReads] != 0 || c[dWrites] != 0 },
}

// parseDiskstats appends the devices of /proc/diskstats to dst[:0]. A line
// is "major minor name" and at least eleven counters (reads, merged reads,
// sectors read, ms reading, writes, merged writes, sectors written, ms
// writing, I/Os in progress, ms doing I/O, weighted ms); kernels since 4.18
// add discard and flush columns, which are ignored. Shorter lines (the
// four-counter partition lines of 2.6.24 and older) are skipped.
func parseDiskstats(b []byte, dst []devLine[diskCounters]) []devLine[diskCounters] {
	dst = dst[:0]
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		f := fields{line}
		if _, ok := f.nextUint(); !ok { // major
			continue
		}
		if _, ok := f.nextUint(); !ok { // minor
			continue
		}
		name, ok := f.next()
		if !ok {
			continue
		}
		var v [11]uint64
		if f.uints(v[:]) < len(v) {
			continue
		}
		var c diskCounters
		c[dReads] = v[0]
		c[dMergedReads] = v[1]
		c[dReadBytes] = v[2] * 512
		c[dReadTime] = v[3]
		c[dWrites] = v[4]
		c[dMergedWrites] = v[5]
		c[dWriteBytes] = v[6] * 512
		c[dWriteTime] = v[7]
		c[dInProgress] = v[8]
		c[dIOTime] = v[9]
		c[dWeightedIOTime] = v[10]
		dst = append(dst, devLine[diskCounters]{name: name, c: c})
	}
	return dst
}

type diskState struct {
	deviceTable[diskCounters] // only holds Config.Devices

	sysBlock string // SysRoot/class/block
}

func (s *diskState) init(only []string, sysBlock string) {
	s.sysBlock = sysBlock
	s.deviceTable.init(only, s.included)
}

// included decides, once per device name, whether it is reported: the
// configured list if any, else every device but partitions and virtual
// loop, ram, zram and floppy devices.
func (s *diskState) included(name string) bool {
	if s.only != nil {
		return s.only[name]
	}
	for _, p := range [...]string{"loop", "ram", "zram", "fd"} {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	return !s.isPartition(name)
}

// isPartition asks sysfs (a partition's directory holds a "partition"
// file; '/' in a device name is '!' there) and falls back to the naming
// conventions when sysfs does not know the device.
func (s *diskState) isPartition(name string) bool {
	if name != "." && name != ".." {
		dir := filepath.Join(s.sysBlock, strings.ReplaceAll(name, "/", "!"))
		if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
			return true
		}
		if _, err := os.Stat(dir); err == nil {
			return false
		}
	}
	return looksLikePartition(name)
}

// looksLikePartition recognizes the partition names the kernel gives:
// <disk><n> for sd, vd, hd and xvd disks (sda1) and <disk>p<n> for disks
// whose name ends in a digit (nvme0n1p1, mmcblk0p2, md0p1).
func looksLikePartition(name string) bool {
	if i := strings.LastIndexByte(name, 'p'); i > 0 && i < len(name)-1 &&
		isDigit(name[i-1]) && allDigits(name[i+1:]) {
		return true
	}
	for _, p := range [...]string{"sd", "vd", "hd", "xvd"} {
		rest, ok := strings.CutPrefix(name, p)
		if !ok {
			continue
		}
		j := 0
		for j < len(rest) && rest[j] >= 'a' && rest[j] <= 'z' {
			j++
		}
		return j > 0 && j < len(rest) && allDigits(rest[j:])
	}
	return false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}
