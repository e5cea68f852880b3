package storage

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// writeValidLog creates a log with n batches and returns the batches as
// stored and the directory.
func writeValidLog(t *testing.T, dir string, n int, cfg Config) [][]byte {
	t.Helper()
	cfg.Dir = dir
	l := openTest(t, cfg)
	var out [][]byte
	for i := range n {
		_, _, b := appendSpec(t, l, batchSpec{recs: []rec{kv(fmt.Sprint("k", i), fmt.Sprint("value-", i), int64(i)), kv("x", "y", int64(i))}, codec: int8(i % 5)})
		out = append(out, append([]byte(nil), b...))
	}
	mustClose(t, l)
	return out
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(names) == 0 {
		t.Fatal("no segments")
	}
	return names[len(names)-1]
}

func TestRecoveryDamagedTail(t *testing.T) {
	cases := []struct {
		name string
		// damage modifies the tail segment's bytes; it returns how many
		// of the original batches must survive.
		damage func(b []byte, batches [][]byte) ([]byte, int)
	}{
		{"cut mid-batch", func(b []byte, bs [][]byte) ([]byte, int) {
			return b[:len(b)-len(bs[len(bs)-1])/2], len(bs) - 1
		}},
		{"cut mid-header", func(b []byte, bs [][]byte) ([]byte, int) {
			return b[:len(b)-len(bs[len(bs)-1])+5], len(bs) - 1
		}},
		{"garbage appended", func(b []byte, bs [][]byte) ([]byte, int) {
			return append(b, bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 100)...), len(bs)
		}},
		{"zeros appended", func(b []byte, bs [][]byte) ([]byte, int) {
			return append(b, make([]byte, 4096)...), len(bs)
		}},
		{"flipped crc byte in last batch", func(b []byte, bs [][]byte) ([]byte, int) {
			b[len(b)-len(bs[len(bs)-1])+offCRC+1] ^= 0xff
			return b, len(bs) - 1
		}},
		{"flipped payload byte in middle batch", func(b []byte, bs [][]byte) ([]byte, int) {
			pos := 0
			for _, x := range bs[:3] {
				pos += len(x)
			}
			b[pos+len(bs[3])-1] ^= 0x01
			return b, 3
		}},
		{"huge length in last batch", func(b []byte, bs [][]byte) ([]byte, int) {
			p := len(b) - len(bs[len(bs)-1])
			b[p+offBatchLength] = 0x7f
			return b, len(bs) - 1
		}},
		{"duplicate batch appended", func(b []byte, bs [][]byte) ([]byte, int) {
			// Valid CRC but offsets going backwards.
			return append(b, bs[0]...), len(bs)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			batches := writeValidLog(t, dir, 8, Config{})
			seg := lastSegment(t, dir)
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			b, keep := c.damage(b, batches)
			if err := os.WriteFile(seg, b, 0o644); err != nil {
				t.Fatal(err)
			}
			l := openTest(t, Config{Dir: dir})
			got := readAll(t, l, 0)
			if len(got) != keep {
				t.Fatalf("kept %d batches, want %d", len(got), keep)
			}
			for i := range got {
				if !bytes.Equal(got[i], batches[i]) {
					t.Fatalf("batch %d differs", i)
				}
			}
			wantEnd := int64(2 * keep)
			if l.EndOffset() != wantEnd || l.SyncedOffset() != wantEnd {
				t.Fatalf("end %d synced %d want %d", l.EndOffset(), l.SyncedOffset(), wantEnd)
			}
			first, _, _ := appendSpec(t, l, batchSpec{recs: []rec{kv("after", "crash", 1)}})
			if first != wantEnd {
				t.Fatalf("append after recovery at %d want %d", first, wantEnd)
			}
			if err := l.Sync(context.Background(), first); err != nil {
				t.Fatal(err)
			}
			mustClose(t, l)
			l2 := openTest(t, Config{Dir: dir})
			if n := len(readAll(t, l2, 0)); n != keep+1 {
				t.Fatalf("after reopen %d batches", n)
			}
		})
	}
}

func TestRecoveryCorruptMiddleSegment(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 1024}
	batches := writeValidLog(t, dir, 30, cfg)
	names, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(names) < 4 {
		t.Fatalf("%d segments", len(names))
	}
	// Segment 1 lost its index (as if it was rolled but never synced)
	// and its second batch is damaged.
	victim := names[1]
	os.Remove(trimLog(victim) + indexSuffix)
	b, _ := os.ReadFile(victim)
	h, _ := ParseBatchHeader(b)
	b[int(h.Length)+batchHeaderSize+2] ^= 0x55
	os.WriteFile(victim, b, 0o644)
	var before int
	for _, n := range names[:1] {
		bb, _ := os.ReadFile(n)
		before += len(splitStored(t, bb))
	}
	cfg.Dir = dir
	l := openTest(t, cfg)
	got := readAll(t, l, 0)
	if len(got) != before+1 {
		t.Fatalf("kept %d batches, want %d", len(got), before+1)
	}
	for i := range got {
		if !bytes.Equal(got[i], batches[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
	if l.Stats().Segments != 2 {
		t.Fatalf("%d segments after recovery", l.Stats().Segments)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.log")); len(left) != 2 {
		t.Fatalf("files left: %v", left)
	}
	first, _, _ := appendSpec(t, l, batchSpec{recs: []rec{kv("a", "b", 0)}})
	if first != int64(2*len(got)) {
		t.Fatalf("append at %d", first)
	}
}

func TestRecoveryGarbageSegmentFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, segmentName(0, logSuffix)), bytes.Repeat([]byte{0xff}, 1000), 0o644)
	os.WriteFile(filepath.Join(dir, segmentName(0, indexSuffix)), bytes.Repeat([]byte{0xff}, 17), 0o644)
	os.WriteFile(filepath.Join(dir, segmentName(99, indexSuffix)), nil, 0o644)
	os.WriteFile(filepath.Join(dir, logStartFile), []byte("not a number"), 0o644)
	l := openTest(t, Config{Dir: dir})
	if l.EndOffset() != 0 || l.Size() != 0 {
		t.Fatalf("end %d size %d", l.EndOffset(), l.Size())
	}
	if _, err := os.Stat(filepath.Join(dir, segmentName(99, indexSuffix))); !os.IsNotExist(err) {
		t.Fatal("orphan index kept")
	}
	appendSpec(t, l, batchSpec{recs: []rec{kv("a", "b", 0)}})
	if r, err := l.Read(0, 1, math.MaxInt64); err != nil || len(r.Chunks) != 1 {
		t.Fatalf("read: %v", err)
	}
}

// A log the caller made durable (Config.Durable) opens without an fsync
// unless the open itself changes a file: a damaged tail is truncated and
// synced.
func TestOpenDurableSyncsOnlyChanges(t *testing.T) {
	dir := t.TempDir()
	batches := writeValidLog(t, dir, 8, Config{})
	l := openTest(t, Config{Dir: dir, Durable: true})
	if n := len(readAll(t, l, 0)); n != len(batches) {
		t.Fatalf("read %d batches, want %d", n, len(batches))
	}
	if st := l.Stats(); st.Fsyncs != 0 || st.SyncedOffset != st.EndOffset {
		t.Fatalf("clean durable open: %d fsyncs, synced %d of %d", st.Fsyncs, st.SyncedOffset, st.EndOffset)
	}
	mustClose(t, l)

	seg := lastSegment(t, dir)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seg, b[:len(b)-len(batches[len(batches)-1])/2], 0o644); err != nil {
		t.Fatal(err)
	}
	l = openTest(t, Config{Dir: dir, Durable: true})
	if n := len(readAll(t, l, 0)); n != len(batches)-1 {
		t.Fatalf("read %d batches after the damage, want %d", n, len(batches)-1)
	}
	if st := l.Stats(); st.Fsyncs != 1 {
		t.Fatalf("durable open that truncated: %d fsyncs, want 1", st.Fsyncs)
	}
	mustClose(t, l)

	// Without Durable every open syncs its tail segment.
	l = openTest(t, Config{Dir: dir})
	if st := l.Stats(); st.Fsyncs != 1 {
		t.Fatalf("plain open: %d fsyncs, want 1", st.Fsyncs)
	}
	mustClose(t, l)
}
