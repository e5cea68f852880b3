package storage

import (
	"bytes"
	"context"
	"math"
	"testing"
)

// TestInstallCopy copies a log with gaps (batches left out, as compaction
// does) into another through Reset, AppendRaw and SkipTo, across segment
// rolls, and checks the copy after a reopen: same batches at the same
// offsets, the same end, and appends continuing at that end.
func TestInstallCopy(t *testing.T) {
	src := openTest(t, Config{SegmentBytes: 2048})
	for i := range 20 {
		appendBytes(t, src, simpleBatch(t, 3, 40, int64(i)))
	}
	all := readAll(t, src, 0)
	dir := t.TempDir()
	dst := openTest(t, Config{Dir: dir, SegmentBytes: 2048})
	appendBytes(t, dst, simpleBatch(t, 1, 10, 0)) // replaced by the copy
	if err := dst.Reset(6); err != nil {
		t.Fatal(err)
	}
	if dst.StartOffset() != 6 || dst.EndOffset() != 6 {
		t.Fatalf("after Reset(6): start %d end %d", dst.StartOffset(), dst.EndOffset())
	}
	// Copy batches 2..17, leaving out 5 and 9 (a compacted source).
	var want [][]byte
	for i := 2; i < 18; i++ {
		if i == 5 || i == 9 {
			continue
		}
		hs, err := ParseStoredBatches(all[i])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dst.AppendRaw(bytes.Clone(all[i]), hs); err != nil {
			t.Fatalf("append raw batch %d: %v", i, err)
		}
		want = append(want, all[i])
	}
	// Going backwards is refused.
	hs, _ := ParseStoredBatches(all[3])
	if _, err := dst.AppendRaw(bytes.Clone(all[3]), hs); !isOutOfRange(err) {
		t.Fatalf("append raw below the end: %v, want ErrOffsetOutOfRange", err)
	}
	// The source's end is past its last batch kept: 60.
	if err := dst.SkipTo(60); err != nil {
		t.Fatal(err)
	}
	if err := dst.Sync(context.Background(), math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	mustClose(t, dst)
	dst = openTest(t, Config{Dir: dir, SegmentBytes: 2048})
	if dst.StartOffset() != 6 || dst.EndOffset() != 60 {
		t.Fatalf("reopened copy: start %d end %d, want 6 and 60", dst.StartOffset(), dst.EndOffset())
	}
	got := readAll(t, dst, 6)
	if len(got) != len(want) {
		t.Fatalf("copy holds %d batches, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs from the source's", i)
		}
	}
	if first, _, _ := appendBytes(t, dst, simpleBatch(t, 2, 10, 0)); first != 60 {
		t.Fatalf("append after the copy at %d, want 60", first)
	}
	// Reading a gap's offset starts at the next batch.
	r, err := dst.Read(15, 1<<20, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if r.FirstOffset > 18 {
		t.Fatalf("read in a gap starts at %d", r.FirstOffset)
	}
}
