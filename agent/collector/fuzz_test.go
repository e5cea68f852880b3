package collector

import (
	"bytes"
	"os"
	"testing"

	"github.com/simtel/simtel/internal/lineproto"
)

// The fuzz targets feed arbitrary file contents to the /proc parsers. They
// must never panic, must only return what the input holds, and whatever
// they return must encode as valid line protocol.

func addSeeds(f *testing.F, files ...string) {
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// checkDevNames checks the device names parsed from b: each is a
// non-empty piece of b and round-trips as a tag value.
func checkDevNames[C any](t *testing.T, b []byte, lines []devLine[C]) {
	t.Helper()
	for _, l := range lines {
		if len(l.name) == 0 || !bytes.Contains(b, l.name) {
			t.Fatalf("name %q not from the input", l.name)
		}
		encodeTag(t, l.name)
	}
}

// encodeTag checks that a parsed name, made a tag value, encodes and decodes
// back to itself.
func encodeTag(t *testing.T, name []byte) {
	var enc lineproto.Encoder
	v := tagValue(string(name))
	enc.StartLine("m")
	enc.AddTag("t", v)
	enc.AddInt("f", 1)
	enc.EndLine(1)
	if err := enc.Err(); err != nil {
		t.Fatalf("name %q as tag %q: %v", name, v, err)
	}
	var d lineproto.Decoder
	out := enc.Bytes()
	if err := d.Decode(out[:len(out)-1]); err != nil || len(d.Tags) != 1 || string(d.Tags[0].Value) != v {
		t.Fatalf("tag %q round-tripped as %+v (%v)", v, d.Tags, err)
	}
}

// FuzzParseProcStat parses two /proc/stat contents and computes CPU
// percentages between them, as two Collects would.
func FuzzParseProcStat(f *testing.F) {
	snap1, err := os.ReadFile("testdata/proc/snap1/stat")
	if err != nil {
		f.Fatal(err)
	}
	snap2, err := os.ReadFile("testdata/proc/snap2/stat")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(snap1, snap2)
	f.Add([]byte("cpu 1 2 3\ncpu0 1 2 3 4 5 6 7 8 9 10 11 12\ncpu99999999999999999999 1 2 3 4\nintr\nctxt x\n"), snap1)
	f.Add([]byte("cpu  0 0 0 0 0 0 0 0 0 0\n"),
		[]byte("cpu  18446744073709551615 18446744073709551615 18446744073709551615 18446744073709551615 1 1 1 1 1 1\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var prev, cur statSample
		errA := parseStat(a, &prev)
		errB := parseStat(b, &cur)
		for _, s := range []*statSample{&prev, &cur} {
			for _, c := range s.cpus {
				if c.id < 0 || c.id >= maxCPUID {
					t.Fatalf("core id %d out of range", c.id)
				}
			}
		}
		if errA != nil || errB != nil {
			return
		}
		if pct, ok := cpuUsage(&cur.total, &prev.total); ok {
			for i, v := range pct {
				if !(v >= 0 && v <= 100) {
					t.Fatalf("%s = %v", usageKeys[i], v)
				}
			}
		}
	})
}

func FuzzParseDiskstats(f *testing.F) {
	fuzzDevLines(f, parseDiskstats, func(t *testing.T, name []byte) { looksLikePartition(string(name)) },
		" 8 0 sd\\a 1 2 3 4 5 6 7 8 9 10 11\n1 2 3\n 8 1 sda1 1 2 3 4\n",
		"testdata/proc/snap1/diskstats", "testdata/proc/snap2/diskstats")
}

func FuzzParseNetDev(f *testing.F) {
	fuzzDevLines(f, parseNetDev, func(t *testing.T, name []byte) {
		if bytes.IndexByte(name, ':') >= 0 {
			t.Fatalf("interface name %q holds a colon", name)
		}
	}, "a b,c=d\\: 1 2 3 4 5 6 7 8 9 10 11 12\n:\n x:1 2\n", "testdata/proc/snap1/net/dev", "testdata/proc/snap2/net/dev")
}

// fuzzDevLines fuzzes a parser of a file of one line per device, seeded
// with files and seed: the names it returns are checked by checkDevNames
// and then by check.
func fuzzDevLines[C any](f *testing.F, parse func([]byte, []devLine[C]) []devLine[C], check func(t *testing.T, name []byte), seed string, files ...string) {
	addSeeds(f, files...)
	f.Add([]byte(seed))
	f.Fuzz(func(t *testing.T, b []byte) {
		lines := parse(b, nil)
		checkDevNames(t, b, lines)
		for _, l := range lines {
			check(t, l.name)
		}
	})
}

func FuzzParseMeminfo(f *testing.F) {
	addSeeds(f, "testdata/proc/snap1/meminfo")
	f.Add([]byte("MemTotal: 99999999999999999 kB\n:\nCached:\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m meminfo
		if err := parseMeminfo(b, &m); err == nil && m.v[miMemTotal] == 0 {
			t.Fatal("nil error with MemTotal 0")
		}
	})
}

func FuzzParseNvidiaSMI(f *testing.F) {
	f.Add([]byte("0, GPU-a, NVIDIA A100, 1, 2, 3, 4, 5, 6.5\n1, GPU-b, x,y, [N/A], 2, 3, 4, 5, [Not Supported]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, r := range parseNvidiaSMI(b, nil) {
			encodeTag(t, []byte(r.index))
			encodeTag(t, []byte(r.name))
		}
	})
}
