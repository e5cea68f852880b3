package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/fsutil"
)

func TestAppendReadRoundTrip(t *testing.T) {
	l := openTest(t, Config{})
	var want []byte
	var wantRecs []gotRecord
	for i := range 3 {
		recs := []rec{kv(fmt.Sprint("k", i), fmt.Sprint("v", i), 1000+int64(i)), kv("", "null-key", 1001+int64(i))}
		first, last, b := appendSpec(t, l, batchSpec{recs: recs})
		if first != int64(2*i) || last != int64(2*i+1) {
			t.Fatalf("append %d: offsets %d..%d", i, first, last)
		}
		want = append(want, b...)
		for j, r := range recs {
			wantRecs = append(wantRecs, gotRecord{offset: first + int64(j), key: r.key, value: r.value, ts: r.ts})
		}
	}
	if l.EndOffset() != 6 {
		t.Fatalf("end offset %d", l.EndOffset())
	}
	r, err := l.Read(0, 1<<20, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	got := chunkBytes(t, r)
	if !bytes.Equal(got, want) {
		t.Fatalf("read bytes differ from appended bytes")
	}
	if r.FirstOffset != 0 || r.LastOffset != 5 {
		t.Fatalf("result covers %d..%d", r.FirstOffset, r.LastOffset)
	}
	var gotRecs []gotRecord
	for _, b := range splitStored(t, got) {
		rb, rs := decodeBatch(t, b)
		if rb.PartitionLeaderEpoch != 7 {
			t.Fatalf("leader epoch %d", rb.PartitionLeaderEpoch)
		}
		gotRecs = append(gotRecs, rs...)
	}
	if fmt.Sprint(gotRecs) != fmt.Sprint(wantRecs) {
		t.Fatalf("records\n got %v\nwant %v", gotRecs, wantRecs)
	}
	// The stored batches still pass producer-side validation.
	if _, err := ParseBatches(got, 0); err != nil {
		t.Fatal(err)
	}
	// offset == end: empty; beyond end and below start: out of range.
	r2, err := l.Read(6, 100, math.MaxInt64)
	if err != nil || len(r2.Chunks) != 0 {
		t.Fatalf("read at end: %v %v", r2, err)
	}
	if _, err := l.Read(7, 100, math.MaxInt64); !isOutOfRange(err) {
		t.Fatalf("read past end: %v", err)
	}
	if _, err := l.Read(-1, 100, math.MaxInt64); !isOutOfRange(err) {
		t.Fatalf("read below start: %v", err)
	}
	// Read from inside a batch returns the whole batch.
	r3, err := l.Read(3, 1, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if r3.FirstOffset != 2 || r3.LastOffset != 3 || len(r3.Chunks) != 1 {
		t.Fatalf("mid-batch read: %+v", r3)
	}
	r3.Release()
	// maxOffset (high watermark) excludes batches reaching it.
	r4, err := l.Read(0, 1<<20, 4)
	if err != nil {
		t.Fatal(err)
	}
	if r4.LastOffset != 3 {
		t.Fatalf("read below hw 4 ended at %d", r4.LastOffset)
	}
	r4.Release()
}

func TestOffsetsAcrossManyAppends(t *testing.T) {
	l := openTest(t, Config{SegmentBytes: 64 << 10})
	rng := rand.New(rand.NewPCG(1, 2))
	var bases []int64
	next := int64(0)
	for i := range 500 {
		var b []byte
		nb := 1 + rng.IntN(3)
		for range nb {
			b = append(b, simpleBatch(t, 1+rng.IntN(10), 1+rng.IntN(200), int64(i))...)
		}
		hs, err := ParseBatches(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		first, last, err := l.Append(b, hs, 0)
		if err != nil {
			t.Fatal(err)
		}
		if first != next {
			t.Fatalf("append %d got first %d want %d", i, first, next)
		}
		for _, h := range hs {
			bases = append(bases, next)
			next += int64(h.NumRecords)
		}
		if last != next-1 {
			t.Fatalf("append %d got last %d want %d", i, last, next-1)
		}
	}
	if l.EndOffset() != next {
		t.Fatalf("end %d want %d", l.EndOffset(), next)
	}
	got := readAll(t, l, 0)
	if len(got) != len(bases) {
		t.Fatalf("read %d batches, appended %d", len(got), len(bases))
	}
	for i, b := range got {
		h, _ := ParseBatchHeader(b)
		if h.BaseOffset != bases[i] {
			t.Fatalf("batch %d base %d want %d", i, h.BaseOffset, bases[i])
		}
	}
	if l.Stats().Segments < 2 {
		t.Fatalf("expected several segments, got %d", l.Stats().Segments)
	}
}

func TestSegmentRoll(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	l := openTest(t, Config{Dir: dir, SegmentBytes: 4096, SegmentMs: 60_000, RetentionMs: -1, Now: clk.Now})
	appendBatches(t, l, 40, 2, 200)
	st := l.Stats()
	if st.Segments < 5 {
		t.Fatalf("segments %d", st.Segments)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(names) != st.Segments {
		t.Fatalf("%d files for %d segments", len(names), st.Segments)
	}
	if filepath.Base(names[0]) != "00000000000000000000.log" {
		t.Fatalf("first segment %s", names[0])
	}
	for _, n := range names {
		fi, _ := os.Stat(n)
		if fi.Size() > 4096 {
			t.Fatalf("segment %s is %d bytes", n, fi.Size())
		}
	}
	if got := len(readAll(t, l, 0)); got != 40 {
		t.Fatalf("read %d batches", got)
	}
	// Age-based roll on append.
	segs := l.Stats().Segments
	clk.Advance(2 * time.Minute)
	appendBytes(t, l, simpleBatch(t, 1, 10, 0))
	if l.Stats().Segments != segs+1 {
		t.Fatalf("no roll by age: %d segments", l.Stats().Segments)
	}
	// Age-based roll by EnforceRetention with no appends.
	clk.Advance(2 * time.Minute)
	if _, err := l.EnforceRetention(math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if l.Stats().Segments != segs+2 {
		t.Fatalf("no roll by retention pass: %d segments", l.Stats().Segments)
	}
	end := l.EndOffset()
	mustClose(t, l)

	l2 := openTest(t, Config{Dir: dir, SegmentBytes: 4096})
	if l2.EndOffset() != end || len(readAll(t, l2, 0)) != 41 {
		t.Fatalf("after reopen end %d", l2.EndOffset())
	}
}

func TestReadMaxBytes(t *testing.T) {
	l := openTest(t, Config{})
	var sizes []int64
	for i := range 5 {
		_, _, b := appendSpec(t, l, batchSpec{recs: []rec{kv("k", string(bytes.Repeat([]byte("x"), 2000)), int64(i))}})
		sizes = append(sizes, int64(len(b)))
	}
	r, err := l.Read(0, 100, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != sizes[0] || r.FirstOffset != 0 || r.LastOffset != 0 {
		t.Fatalf("maxBytes below one batch: %+v", r)
	}
	r.Release()
	r, err = l.Read(1, sizes[1]+sizes[2]+sizes[3]/2, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != sizes[1]+sizes[2] || r.LastOffset != 2 {
		t.Fatalf("maxBytes 2.5 batches: %+v", r)
	}
	r.Release()
	r, err = l.Read(0, 0, math.MaxInt64)
	if err != nil || r.Bytes != sizes[0] {
		t.Fatalf("maxBytes 0: %+v %v", r, err)
	}
	r.Release()
}

func TestIndexLookupRandomOffsets(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, SegmentBytes: 16 << 10, IndexIntervalBytes: 256}
	l := openTest(t, cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	type span struct{ base, last int64 }
	var spans []span
	for range 1500 {
		first, last, _ := appendBytes(t, l, simpleBatch(t, 1+rng.IntN(8), 1+rng.IntN(120), 0))
		spans = append(spans, span{first, last})
	}
	if l.Stats().Segments < 10 {
		t.Fatalf("want many segments, have %d", l.Stats().Segments)
	}
	check := func(l *Log) {
		t.Helper()
		for range 3000 {
			off := rng.Int64N(l.EndOffset())
			r, err := l.Read(off, 1, math.MaxInt64)
			if err != nil {
				t.Fatal(err)
			}
			i := 0
			for spans[i].last < off {
				i++
			}
			if r.FirstOffset != spans[i].base || r.LastOffset != spans[i].last {
				t.Fatalf("offset %d: got batch %d..%d want %d..%d", off, r.FirstOffset, r.LastOffset, spans[i].base, spans[i].last)
			}
			h, err := ParseBatchHeader(chunkBytes(t, r))
			if err != nil || h.BaseOffset != spans[i].base {
				t.Fatalf("offset %d: chunk holds %d (%v)", off, h.BaseOffset, err)
			}
			r.Release()
		}
	}
	check(l)
	mustClose(t, l)
	idx, _ := filepath.Glob(filepath.Join(dir, "*.index"))
	if len(idx) < 10 {
		t.Fatalf("only %d index files persisted", len(idx))
	}
	// Reopen: closed segments now use the persisted indexes.
	l2 := openTest(t, cfg)
	check(l2)
	mustClose(t, l2)
	// Corrupt some index files: they must be detected and rebuilt.
	os.WriteFile(idx[1], []byte("garbage!"), 0o644)
	os.WriteFile(idx[2], nil, 0o644)
	ti, _ := filepath.Glob(filepath.Join(dir, "*.timeindex"))
	os.Remove(ti[3])
	l3 := openTest(t, cfg)
	check(l3)
}

func TestOffsetForTimestamp(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, SegmentBytes: 8 << 10, IndexIntervalBytes: 200}
	l := openTest(t, cfg)
	rng := rand.New(rand.NewPCG(5, 6))
	var all []gotRecord
	ts := int64(10_000)
	for i := range 400 {
		n := 1 + rng.IntN(5)
		recs := make([]rec, n)
		for j := range recs {
			// Mostly increasing, sometimes going back in time.
			ts += int64(rng.IntN(20))
			rts := ts
			if rng.IntN(10) == 0 {
				rts -= int64(rng.IntN(500))
			}
			recs[j] = kv(fmt.Sprint("k", i, j), "v", rts)
		}
		first, _, _ := appendSpec(t, l, batchSpec{recs: recs, codec: int8(i % 5)})
		for j, r := range recs {
			all = append(all, gotRecord{offset: first + int64(j), ts: r.ts})
		}
	}
	check := func(l *Log) {
		t.Helper()
		for range 500 {
			target := 9_000 + rng.Int64N(ts-9_000+200)
			want := -1
			for i, r := range all {
				if r.ts >= target {
					want = i
					break
				}
			}
			off, rts, ok := l.OffsetForTimestamp(target)
			if want < 0 {
				if ok {
					t.Fatalf("ts %d: got %d, want none", target, off)
				}
				continue
			}
			if !ok || off != all[want].offset || rts != all[want].ts {
				t.Fatalf("ts %d: got (%d,%d,%v) want (%d,%d)", target, off, rts, ok, all[want].offset, all[want].ts)
			}
		}
		maxI := 0
		for i, r := range all {
			if r.ts > all[maxI].ts {
				maxI = i
			}
		}
		off, mts := l.MaxTimestamp()
		if off != all[maxI].offset || mts != all[maxI].ts {
			t.Fatalf("max timestamp (%d,%d) want (%d,%d)", off, mts, all[maxI].offset, all[maxI].ts)
		}
	}
	check(l)
	mustClose(t, l)
	check(openTest(t, cfg))
}

func TestRetentionBySize(t *testing.T) {
	l := openTest(t, Config{SegmentBytes: 4096, RetentionBytes: 10_000, RetentionMs: -1})
	appendBatches(t, l, 60, 2, 200)
	before := l.Size()
	end := l.EndOffset()
	// A floor at offset 0 protects everything.
	if n, err := l.EnforceRetention(0); err != nil || n != 0 {
		t.Fatalf("retention with keepFrom 0 deleted %d (%v)", n, err)
	}
	deleted, err := l.EnforceRetention(math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if deleted == 0 || l.Size() != before-deleted {
		t.Fatalf("deleted %d, size %d -> %d", deleted, before, l.Size())
	}
	if l.Size() < 10_000 || l.Size() > 10_000+4096 {
		t.Fatalf("size after retention %d", l.Size())
	}
	start := l.StartOffset()
	if start == 0 || l.EndOffset() != end {
		t.Fatalf("start %d end %d", start, l.EndOffset())
	}
	if _, err := l.Read(start-1, 100, math.MaxInt64); !isOutOfRange(err) {
		t.Fatalf("read below start: %v", err)
	}
	got := readAll(t, l, start)
	h, _ := ParseBatchHeader(got[0])
	if h.BaseOffset != start {
		t.Fatalf("first batch %d, start %d", h.BaseOffset, start)
	}
	// Idempotent.
	if n, _ := l.EnforceRetention(math.MaxInt64); n != 0 {
		t.Fatalf("second pass deleted %d", n)
	}
}

func TestRetentionByTime(t *testing.T) {
	clk := newFakeClock()
	now := clk.Now().UnixMilli()
	l := openTest(t, Config{SegmentBytes: 2048, RetentionMs: 3_600_000, Now: clk.Now})
	// Old data: timestamps two hours ago; new data: now.
	for i := range 20 {
		appendBytes(t, l, simpleBatch(t, 2, 200, now-7_200_000+int64(i)))
	}
	oldEnd := l.EndOffset()
	for i := range 20 {
		appendBytes(t, l, simpleBatch(t, 2, 200, now+int64(i)))
	}
	if _, err := l.EnforceRetention(math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	start := l.StartOffset()
	if start == 0 || start > oldEnd {
		t.Fatalf("start %d, old data ended at %d", start, oldEnd)
	}
	// Every remaining batch but those sharing a segment with new data is new.
	for _, b := range readAll(t, l, start) {
		h, _ := ParseBatchHeader(b)
		if h.BaseOffset >= oldEnd && h.MaxTimestamp < now {
			t.Fatalf("old batch after new data")
		}
	}
	// Later, everything expires except the active segment.
	clk.Advance(3 * time.Hour)
	l.UpdateConfig(Config{SegmentBytes: 2048, RetentionMs: 3_600_000, SegmentMs: 10 * 3_600_000})
	if _, err := l.EnforceRetention(math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if l.Stats().Segments != 1 {
		t.Fatalf("%d segments left", l.Stats().Segments)
	}
}

func TestDeleteRecordsPersisted(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, SegmentBytes: 4096}
	l := openTest(t, cfg)
	appendBatches(t, l, 40, 3, 200)
	segs := l.Stats().Segments
	start, err := l.DeleteRecords(50)
	if err != nil || start != 50 {
		t.Fatalf("delete records: %d %v", start, err)
	}
	if l.Stats().Segments >= segs {
		t.Fatalf("no segment deleted")
	}
	if _, err := l.Read(49, 100, math.MaxInt64); !isOutOfRange(err) {
		t.Fatalf("read below new start: %v", err)
	}
	r, err := l.Read(50, 1, math.MaxInt64)
	if err != nil || r.FirstOffset != 48 {
		t.Fatalf("read at start: %+v %v", r, err)
	}
	r.Release()
	// Going backwards is a no-op.
	if s, _ := l.DeleteRecords(10); s != 50 {
		t.Fatalf("start moved back to %d", s)
	}
	mustClose(t, l)
	l2 := openTest(t, cfg)
	if l2.StartOffset() != 50 {
		t.Fatalf("start after reopen %d", l2.StartOffset())
	}
	// Deleting everything rolls the active segment and removes the rest.
	end := l2.EndOffset()
	if s, err := l2.DeleteRecords(math.MaxInt64); err != nil || s != end {
		t.Fatalf("delete all: %d %v", s, err)
	}
	if l2.Size() != 0 || l2.Stats().Segments != 1 {
		t.Fatalf("after deleting all: size %d segments %d", l2.Size(), l2.Stats().Segments)
	}
	first, _, _ := appendBytes(t, l2, simpleBatch(t, 1, 10, 0))
	if first != end {
		t.Fatalf("append after delete-all got %d want %d", first, end)
	}
	mustClose(t, l2)
	l3 := openTest(t, cfg)
	if l3.StartOffset() != end || l3.EndOffset() != end+1 {
		t.Fatalf("reopen: start %d end %d", l3.StartOffset(), l3.EndOffset())
	}
}

func TestTruncate(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, SegmentBytes: 4096}
	l := openTest(t, cfg)
	appendBatches(t, l, 40, 2, 200)
	// Truncate in the middle of a batch [20,21]: the whole batch goes.
	if err := l.Truncate(21); err != nil {
		t.Fatal(err)
	}
	if l.EndOffset() != 20 || l.SyncedOffset() > 20 {
		t.Fatalf("end %d synced %d", l.EndOffset(), l.SyncedOffset())
	}
	if got := len(readAll(t, l, 0)); got != 10 {
		t.Fatalf("%d batches after truncate", got)
	}
	first, _, _ := appendBytes(t, l, simpleBatch(t, 2, 200, 0))
	if first != 20 {
		t.Fatalf("append after truncate at %d", first)
	}
	if err := l.Sync(context.Background(), 21); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	l = openTest(t, cfg)
	if l.EndOffset() != 22 || len(readAll(t, l, 0)) != 11 {
		t.Fatalf("reopen after truncate: end %d", l.EndOffset())
	}
	// Truncate below the start offset empties the log.
	if _, err := l.DeleteRecords(10); err != nil {
		t.Fatal(err)
	}
	if err := l.Truncate(4); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != 4 || l.EndOffset() != 4 || l.Size() != 0 {
		t.Fatalf("full truncate: start %d end %d size %d", l.StartOffset(), l.EndOffset(), l.Size())
	}
	first, _, _ = appendBytes(t, l, simpleBatch(t, 2, 200, 0))
	if first != 4 {
		t.Fatalf("append after full truncate at %d", first)
	}
	mustClose(t, l)
	l = openTest(t, cfg)
	if l.StartOffset() != 4 || l.EndOffset() != 6 {
		t.Fatalf("reopen after full truncate: start %d end %d", l.StartOffset(), l.EndOffset())
	}
}

func TestReadConcurrentWithRetention(t *testing.T) {
	l := openTest(t, Config{SegmentBytes: 4096, RetentionBytes: 16 << 10, RetentionMs: -1})
	appendBatches(t, l, 50, 2, 300)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var reads, oor sync.Map
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			n, o := 0, 0
			for ctx.Err() == nil {
				start, end := l.StartOffset(), l.EndOffset()
				off := start + rng.Int64N(end-start+1)
				r, err := l.Read(off, 1<<20, math.MaxInt64)
				if isOutOfRange(err) {
					o++
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				// Let retention run while the result is held.
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				b := chunkBytes(t, r)
				for _, bb := range splitStored(t, b) {
					decodeBatch(t, bb)
				}
				r.Release()
				n++
			}
			reads.Store(g, n)
			oor.Store(g, o)
		})
	}
	for i := 0; ctx.Err() == nil; i++ {
		appendBytes(t, l, simpleBatch(t, 2, 300, int64(i)))
		if _, err := l.EnforceRetention(math.MaxInt64); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	total := 0
	reads.Range(func(_, v any) bool { total += v.(int); return true })
	if total == 0 {
		t.Fatal("no successful reads")
	}
	if l.StartOffset() == 0 {
		t.Fatal("retention never ran")
	}
}

func TestGroupCommit(t *testing.T) {
	l := openTest(t, Config{})
	// A disk with a realistic fsync latency, whatever the test machine has.
	l.mu.Lock()
	l.syncFile = func(f *os.File) error { time.Sleep(time.Millisecond); return fsutil.Fdatasync(f) }
	l.mu.Unlock()
	const goroutines, perG = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*perG)
	for range goroutines {
		wg.Go(func() {
			for range perG {
				b := simpleBatch(t, 4, 100, 0)
				hs, err := ParseBatches(b, 0)
				if err != nil {
					errs <- err
					return
				}
				_, last, err := l.Append(b, hs, 0)
				if err != nil {
					errs <- err
					return
				}
				if err := l.Sync(context.Background(), last); err != nil {
					errs <- err
					return
				}
				if l.SyncedOffset() <= last {
					errs <- fmt.Errorf("synced offset %d does not cover %d", l.SyncedOffset(), last)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.SyncedOffset != st.EndOffset || st.EndOffset != goroutines*perG*4 {
		t.Fatalf("synced %d end %d", st.SyncedOffset, st.EndOffset)
	}
	t.Logf("%d Sync calls, %d fsyncs", goroutines*perG, st.Fsyncs)
	if st.Fsyncs*2 > goroutines*perG {
		t.Fatalf("no group commit: %d fsyncs for %d Sync calls", st.Fsyncs, goroutines*perG)
	}
}

func TestSyncErrorIsSticky(t *testing.T) {
	l := openTest(t, Config{})
	appendBytes(t, l, simpleBatch(t, 1, 10, 0))
	if err := l.Sync(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.syncFile = func(*os.File) error { return syscall.EIO }
	l.mu.Unlock()
	_, last, _ := appendBytes(t, l, simpleBatch(t, 1, 10, 0))
	if err := l.Sync(context.Background(), last); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync: %v", err)
	}
	if l.SyncedOffset() > last {
		t.Fatalf("failed data reported durable")
	}
	l.mu.Lock()
	l.syncFile = syncFileData
	l.mu.Unlock()
	b := simpleBatch(t, 1, 10, 0)
	hs, _ := ParseBatches(b, 0)
	if _, _, err := l.Append(b, hs, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append after failed fsync: %v", err)
	}
	if err := l.Sync(context.Background(), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync after failed fsync: %v", err)
	}
}

func TestSyncContextCancel(t *testing.T) {
	l := openTest(t, Config{})
	release := make(chan struct{})
	l.mu.Lock()
	l.syncFile = func(f *os.File) error { <-release; return fsutil.Fdatasync(f) }
	l.mu.Unlock()
	_, last, _ := appendBytes(t, l, simpleBatch(t, 1, 10, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Sync(ctx, last); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("sync: %v", err)
	}
	close(release)
	if err := l.Sync(context.Background(), last); err != nil {
		t.Fatal(err)
	}
}

func TestReadResultOutlivesClose(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, Config{Dir: dir})
	_, _, want := appendBytes(t, l, simpleBatch(t, 3, 50, 0))
	r, err := l.Read(0, 1<<20, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory still there: %v", err)
	}
	if got := chunkBytes(t, r); !bytes.Equal(got, want) {
		t.Fatal("held chunk changed")
	}
	r.Release()
	if _, err := l.Read(0, 1, math.MaxInt64); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	b := simpleBatch(t, 1, 1, 0)
	hs, _ := ParseBatches(b, 0)
	if _, _, err := l.Append(b, hs, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

func TestScanBatches(t *testing.T) {
	l := openTest(t, Config{SegmentBytes: 2048})
	var bases []int64
	for i := range 30 {
		first, _, _ := appendSpec(t, l, batchSpec{recs: []rec{kv("a", "b", int64(i)), kv("c", "d", int64(i))}, producerID: 42})
		bases = append(bases, first)
	}
	var got []int64
	if err := l.ScanBatches(15, func(h BatchHeader) error {
		if h.ProducerID != 42 {
			return fmt.Errorf("producer %d", h.ProducerID)
		}
		got = append(got, h.BaseOffset)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(bases[7:]) {
		t.Fatalf("scan got %v want %v", got, bases[7:])
	}
	stop := errors.New("stop")
	if err := l.ScanBatches(0, func(BatchHeader) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("scan error: %v", err)
	}
}
