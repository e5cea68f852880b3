package storage

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// rollTo appends filler batches under their own keys until the log has
// rolled, so earlier data is in closed segments.
func rollTo(t *testing.T, l *Log, ts int64) {
	t.Helper()
	segs := l.Stats().Segments
	for i := 0; l.Stats().Segments == segs; i++ {
		appendSpec(t, l, batchSpec{recs: []rec{kv(fmt.Sprint("filler", ts, "-", i), string(make([]byte, 300)), ts)}})
	}
}

func latestByKey(recs []gotRecord) map[string]gotRecord {
	m := map[string]gotRecord{}
	for _, r := range recs {
		m[string(r.key)] = r
	}
	return m
}

func TestCompactionKeepsLatestPerKey(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	cfg := Config{Dir: dir, SegmentBytes: 2048, Compact: true, RetentionMs: -1, Now: clk.Now}
	l := openTest(t, cfg)
	var written []gotRecord
	for i := range 120 {
		k := fmt.Sprint("key", i%7)
		v := fmt.Sprint("value", i)
		recs := []rec{kv(k, v, int64(i))}
		if i%10 == 3 {
			recs = append(recs, kv("", "nullkey", int64(i)))
		}
		first, _, _ := appendSpec(t, l, batchSpec{recs: recs})
		for j, r := range recs {
			written = append(written, gotRecord{offset: first + int64(j), key: r.key, value: r.value, ts: r.ts})
		}
	}
	rollTo(t, l, 200)
	activeBase := func() int64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.mu.segs[len(l.mu.segs)-1].base
	}()
	before := readAllRecords(t, l)
	sizeBefore, endBefore := l.Size(), l.EndOffset()
	st, err := l.Compact()
	if err != nil {
		t.Fatal(err)
	}
	if st.SegmentsCleaned == 0 || st.RecordsRemoved == 0 || l.Size() >= sizeBefore {
		t.Fatalf("compaction did nothing: %+v", st)
	}
	after := readAllRecords(t, l)
	// Expected: for records below the active segment, only the latest per
	// key (null keys dropped); active segment records untouched.
	want := latestByKey(nil)
	for _, r := range before {
		if r.offset < activeBase && r.key != nil {
			want[string(r.key)] = r
		}
	}
	var wantList []gotRecord
	for _, r := range before {
		if r.offset >= activeBase {
			wantList = append(wantList, r)
		} else if r.key != nil && want[string(r.key)].offset == r.offset {
			wantList = append(wantList, r)
		}
	}
	if fmt.Sprint(after) != fmt.Sprint(wantList) {
		t.Fatalf("after compaction\n got %v\nwant %v", after, wantList)
	}
	// Offsets preserved: every surviving record has its original offset.
	orig := map[int64]gotRecord{}
	for _, r := range written {
		orig[r.offset] = r
	}
	for _, r := range after {
		if o, ok := orig[r.offset]; ok && string(o.value) != string(r.value) {
			t.Fatalf("offset %d now holds %q, was %q", r.offset, r.value, o.value)
		}
	}
	if l.EndOffset() != endBefore {
		t.Fatalf("end offset changed from %d to %d", endBefore, l.EndOffset())
	}
	// Reads at any offset still work, including offsets removed.
	for off := int64(0); off < l.EndOffset(); off += 5 {
		r, err := l.Read(off, 1, math.MaxInt64)
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		if len(r.Chunks) > 0 && r.LastOffset < off {
			t.Fatalf("read %d returned batch ending %d", off, r.LastOffset)
		}
		r.Release()
	}
	// Nothing dirty: a second run is a no-op.
	st2, err := l.Compact()
	if err != nil || st2.SegmentsCleaned != 0 {
		t.Fatalf("second compaction: %+v %v", st2, err)
	}
	// More updates of the same keys, compacted again: the old values go.
	for i := range 7 {
		appendSpec(t, l, batchSpec{recs: []rec{kv(fmt.Sprint("key", i), "final", 300)}})
	}
	rollTo(t, l, 300)
	compactNow(t, l)
	count := map[string]int{}
	for _, r := range readAllRecords(t, l) {
		count[string(r.key)]++
		if len(r.key) == 4 && string(r.value) != "final" {
			t.Fatalf("key %s kept stale value %s", r.key, r.value)
		}
	}
	for i := range 7 {
		if c := count[fmt.Sprint("key", i)]; c != 1 {
			t.Fatalf("key%d appears %d times", i, c)
		}
	}
	end := l.EndOffset()
	recs := readAllRecords(t, l)
	mustClose(t, l)
	if left, _ := filepath.Glob(filepath.Join(dir, "*.cleaned")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	l2 := openTest(t, cfg)
	if l2.EndOffset() != end || fmt.Sprint(readAllRecords(t, l2)) != fmt.Sprint(recs) {
		t.Fatal("compacted log differs after reopen")
	}
}

func TestCompactionTombstones(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	cfg := Config{Dir: dir, SegmentBytes: 2048, Compact: true, RetentionMs: -1, DeleteRetentionMs: 60_000, Now: clk.Now}
	l := openTest(t, cfg)
	appendSpec(t, l, batchSpec{recs: []rec{kv("a", "1", 1), kv("b", "1", 1)}})
	appendSpec(t, l, batchSpec{recs: []rec{kv("a", "", 2)}}) // tombstone for a
	appendSpec(t, l, batchSpec{recs: []rec{kv("c", "", 3)}}) // tombstone without value
	rollTo(t, l, 4)
	compactNow(t, l)
	has := func(l *Log, key string, tomb bool) bool {
		for _, r := range readAllRecords(t, l) {
			if string(r.key) == key && (r.value == nil) == tomb {
				return true
			}
		}
		return false
	}
	if has(l, "a", false) || !has(l, "a", true) || !has(l, "c", true) || !has(l, "b", false) {
		t.Fatalf("after first compaction: %v", readAllRecords(t, l))
	}
	// Before DeleteRetentionMs the tombstones stay, also across a reopen.
	clk.Advance(30 * time.Second)
	compactNow(t, l)
	if !has(l, "a", true) || !has(l, "c", true) {
		t.Fatal("tombstones removed too early")
	}
	mustClose(t, l)
	l = openTest(t, cfg)
	clk.Advance(31 * time.Second)
	st, err := l.Compact()
	if err != nil {
		t.Fatal(err)
	}
	if st.TombstonesRemoved != 2 || has(l, "a", true) || has(l, "c", true) || !has(l, "b", false) {
		t.Fatalf("tombstones not removed: %+v %v", st, readAllRecords(t, l))
	}
	// Nothing left to do.
	if st, _ := l.Compact(); st.SegmentsCleaned != 0 {
		t.Fatalf("extra compaction %+v", st)
	}
}

func TestCompactionCompressed(t *testing.T) {
	codecs := []struct {
		name string
		spec batchSpec
	}{
		{"gzip", batchSpec{codec: CompressionGzip}},
		{"snappy-xerial", batchSpec{codec: CompressionSnappy}},
		{"snappy-raw", batchSpec{codec: CompressionSnappy, snappyRaw: true}},
		{"lz4", batchSpec{codec: CompressionLZ4}},
		{"zstd", batchSpec{codec: CompressionZstd}},
	}
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			l := openTest(t, Config{SegmentBytes: 4096, Compact: true, RetentionMs: -1})
			var want []gotRecord
			for i := range 6 {
				s := c.spec
				s.recs = nil
				for j := range 8 {
					s.recs = append(s.recs, kv(fmt.Sprint("k", j%3), fmt.Sprintf("v%d-%d", i, j), int64(100*i+j)))
				}
				if i == 5 {
					// Keys unique to the last batch keep their records.
					s.recs = append(s.recs, kv("solo", "x", 999))
				}
				first, _, _ := appendSpec(t, l, s)
				want = nil
				for j := 0; j < len(s.recs); j++ {
					if j >= len(s.recs)-3-boolInt(i == 5) {
						want = append(want, gotRecord{offset: first + int64(j), key: s.recs[j].key, value: s.recs[j].value, ts: s.recs[j].ts})
					}
				}
			}
			rollTo(t, l, 1000)
			compactNow(t, l)
			var got []gotRecord
			for _, b := range readAll(t, l, 0) {
				rb, rs := decodeBatch(t, b)
				if len(rs) > 0 && !startsWith(string(rs[0].key), "filler") && int8(rb.Attributes&7) != c.spec.codec {
					t.Fatalf("codec changed to %d", rb.Attributes&7)
				}
				for _, r := range rs {
					if !startsWith(string(r.key), "filler") {
						got = append(got, r)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("got %v\nwant %v", got, want)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func startsWith(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

func TestCompactionIdempotentProducerKeepsEmptyBatch(t *testing.T) {
	l := openTest(t, Config{SegmentBytes: 2048, Compact: true, RetentionMs: -1})
	appendSpec(t, l, batchSpec{recs: []rec{kv("a", "1", 1)}, producerID: 5})
	appendSpec(t, l, batchSpec{recs: []rec{kv("a", "2", 2)}, producerID: 6})
	last, _, _ := appendSpec(t, l, batchSpec{recs: []rec{kv("b", "1", 3)}, producerID: 6})
	appendSpec(t, l, batchSpec{recs: []rec{kv("a", "3", 4), kv("b", "2", 4)}, producerID: 7})
	rollTo(t, l, 5)
	compactNow(t, l)
	var pids []string
	for _, b := range readAll(t, l, 0) {
		rb, rs := decodeBatch(t, b)
		if rb.ProducerID > 0 {
			pids = append(pids, fmt.Sprintf("%d@%d:%d/%d", rb.ProducerID, rb.FirstOffset, len(rs), rb.LastOffsetDelta))
		}
	}
	// Producer 5's only batch is its last: kept empty. Producer 6's first
	// batch is dropped, its last kept empty. Producer 7's batch is intact.
	want := fmt.Sprint([]string{"5@0:0/0", fmt.Sprintf("6@%d:0/0", last), "7@3:2/1"})
	if fmt.Sprint(pids) != want {
		t.Fatalf("batches %v want %v", pids, want)
	}
	// A newer batch of producer 5 makes its empty batch useless.
	appendSpec(t, l, batchSpec{recs: []rec{kv("z", "1", 6)}, producerID: 5})
	rollTo(t, l, 7)
	st, err := l.Compact()
	if err != nil {
		t.Fatal(err)
	}
	if st.BatchesRemoved != 1 {
		t.Fatalf("stats %+v", st)
	}
	for _, b := range readAll(t, l, 0) {
		rb, _ := decodeBatch(t, b)
		if rb.ProducerID == 5 && rb.NumRecords == 0 {
			t.Fatal("stale empty batch kept")
		}
	}
}

func TestCompactionCrashLeftovers(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, SegmentBytes: 2048, Compact: true, RetentionMs: -1}
	l := openTest(t, cfg)
	for i := range 30 {
		appendSpec(t, l, batchSpec{recs: []rec{kv(fmt.Sprint("k", i%3), "v", int64(i))}})
	}
	end := l.EndOffset()
	recs := readAllRecords(t, l)
	mustClose(t, l)
	// A crash mid-compaction leaves a partial .cleaned file.
	os.WriteFile(filepath.Join(dir, segmentName(0, logSuffix+cleanedSuffix)), []byte("partial"), 0o644)
	l = openTest(t, cfg)
	if l.EndOffset() != end || fmt.Sprint(readAllRecords(t, l)) != fmt.Sprint(recs) {
		t.Fatal("log changed by leftover")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.cleaned")); len(left) != 0 {
		t.Fatalf("leftover not removed: %v", left)
	}
}
