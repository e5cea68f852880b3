package tune

import (
	"runtime"
	"testing"
)

const smapsSample = `00400000-00a9a000 r--p 00000000 fe:00 123 /opt/simtel/bin/simtel
Size:               6760 kB
Rss:                6760 kB
Anonymous:             0 kB
00a9a000-04365000 r-xp 0069a000 fe:00 123 /opt/simtel/bin/simtel
Size:              58156 kB
Rss:               24340 kB
Anonymous:             0 kB
0674c000-067cb000 r--p 0634b000 fe:00 123 /opt/simtel/bin/simtel
Size:                508 kB
Rss:                 384 kB
Anonymous:           304 kB
067cb000-068e8000 rw-p 063ca000 fe:00 123 /opt/simtel/bin/simtel
Size:               1140 kB
Rss:                 732 kB
Anonymous:           168 kB
7f6429800000-7f6429899000 r--p 00000000 fe:00 456 /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30
Size:                612 kB
Rss:                 612 kB
Anonymous:             0 kB
7ffd1000-7ffd3000 r-xp 00000000 00:00 0 [vdso]
Rss:                   8 kB
Anonymous:             0 kB
`

func TestParseExecMappings(t *testing.T) {
	maps, err := parseExecMappings([]byte(smapsSample), "/opt/simtel/bin/simtel")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		start      uint64
		rss, anon  int64
		releasable bool
	}{
		{0x400000, 6760, 0, true},
		{0xa9a000, 24340, 0, true},
		// Read-only now, but written once (relocations): copy-on-write
		// pages that the file does not hold. Dropping them would undo
		// the relocations.
		{0x674c000, 384, 304, false},
		{0x67cb000, 732, 168, false}, // writable
	}
	if len(maps) != len(want) {
		t.Fatalf("got %d mappings of the executable, want %d: %+v", len(maps), len(want), maps)
	}
	for i, w := range want {
		m := maps[i]
		if m.start != w.start || m.rssKiB != w.rss || m.anonKiB != w.anon || m.releasable() != w.releasable {
			t.Errorf("mapping %d: got start %x rss %d anon %d releasable %v, want %x %d %d %v",
				i, m.start, m.rssKiB, m.anonKiB, m.releasable(), w.start, w.rss, w.anon, w.releasable)
		}
	}
}

func TestParseExecMappingsBad(t *testing.T) {
	if _, err := parseExecMappings([]byte("zz-00 r--p 0 fe:00 1 /x\nRss: 1 kB\n"), "/x"); err == nil {
		t.Fatal("got no error for a bad address range")
	}
	if _, err := parseExecMappings([]byte("00-10 r--p 0 fe:00 1 /x\nRss: many kB\n"), "/x"); err == nil {
		t.Fatal("got no error for a bad size")
	}
}

// TestReleaseExecPages releases the test binary's own pages: the process
// must keep working (its code and read-only data are read again from the
// file) and fewer of the executable's pages must be resident.
func TestReleaseExecPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	before, after, err := ReleaseExecPages()
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 || after >= before {
		t.Fatalf("got %d KiB of the executable resident before and %d KiB after, want fewer after", before, after)
	}
	// Code and read-only data that were dropped are read again on use:
	// the same parse gives the same answer as before the release.
	maps, err := parseExecMappings([]byte(smapsSample), "/opt/simtel/bin/simtel")
	if err != nil || len(maps) != 4 || maps[1].rssKiB != 24340 || !maps[1].releasable() || maps[2].releasable() {
		t.Fatalf("after release: got %+v, %v", maps, err)
	}
	t.Logf("executable resident: %d KiB before, %d KiB after", before, after)
}
