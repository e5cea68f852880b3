package storage

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func txnBatch(t *testing.T, pid int64, n int) []byte {
	recs := make([]rec, n)
	for i := range recs {
		recs[i] = kv("k", "v", 1000)
	}
	return buildBatch(t, batchSpec{recs: recs, producerID: pid, txn: true})
}

func marker(t *testing.T, l *Log, pid int64, ct ControlType) int64 {
	t.Helper()
	first, _, _ := appendBytes(t, l, AppendControlBatch(nil, pid, 0, ct, 3, 1000))
	return first
}

func TestControlBatchRoundTrip(t *testing.T) {
	for _, ct := range []ControlType{ControlAbort, ControlCommit} {
		b := AppendControlBatch(nil, 42, 7, ct, 9, 1234)
		hs, err := ParseBatches(b, 0)
		if err != nil {
			t.Fatalf("control batch does not validate: %v", err)
		}
		h := hs[0]
		if !h.IsControl() || !h.IsTransactional() || h.ProducerID != 42 || h.ProducerEpoch != 7 || h.NumRecords != 1 {
			t.Fatalf("header %+v", h)
		}
		got, ok := ParseControlBatch(b)
		if !ok || got != ct {
			t.Fatalf("got type %d ok %v, want %d", got, ok, ct)
		}
		_, recs := decodeBatch(t, b)
		if len(recs) != 1 || len(recs[0].key) != 4 || len(recs[0].value) != 6 {
			t.Fatalf("control record %+v", recs)
		}
	}
	if _, ok := ParseControlBatch(simpleBatch(t, 1, 3, 0)); ok {
		t.Fatal("a data batch parsed as a control batch")
	}
}

// TestTxnIndex checks the first unstable offset and the aborted list as
// transactions open and end, after a reopen (rebuilt by scanning), after
// DeleteRecords and after Truncate.
func TestTxnIndex(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, Config{Dir: dir, SegmentBytes: 300})
	appendBytes(t, l, simpleBatch(t, 2, 5, 0))      // 0-1
	a, _, _ := appendBytes(t, l, txnBatch(t, 1, 2)) // 2-3, producer 1
	b, _, _ := appendBytes(t, l, txnBatch(t, 2, 1)) // 4, producer 2
	appendBytes(t, l, txnBatch(t, 1, 1))            // 5, producer 1 again
	if off, ok := l.FirstUnstableOffset(); !ok || off != a {
		t.Fatalf("first unstable = %d %v, want %d", off, ok, a)
	}
	abort1 := marker(t, l, 1, ControlAbort) // 6
	if off, ok := l.FirstUnstableOffset(); !ok || off != b {
		t.Fatalf("after abort of 1: first unstable = %d %v, want %d", off, ok, b)
	}
	marker(t, l, 2, ControlCommit) // 7
	if _, ok := l.FirstUnstableOffset(); ok {
		t.Fatal("no transaction is open, yet there is a first unstable offset")
	}
	c, _, _ := appendBytes(t, l, txnBatch(t, 3, 1)) // 8
	abort3 := marker(t, l, 3, ControlAbort)         // 9
	marker(t, l, 3, ControlAbort)                   // 10: no open transaction, no entry
	d, _, _ := appendBytes(t, l, txnBatch(t, 4, 1)) // 11, stays open

	want := []AbortedTxn{{1, a, abort1}, {3, c, abort3}}
	check := func(what string, l *Log, want []AbortedTxn) {
		t.Helper()
		if got := l.AbortedTxns(0, 100); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: aborted = %+v, want %+v", what, got, want)
		}
		if off, ok := l.FirstUnstableOffset(); !ok || off != d {
			t.Fatalf("%s: first unstable = %d %v, want %d", what, off, ok, d)
		}
	}
	check("live", l, want)
	if got := l.AbortedTxns(abort1+1, 100); !reflect.DeepEqual(got, want[1:]) {
		t.Fatalf("aborted from %d = %+v", abort1+1, got)
	}
	if got := l.AbortedTxns(0, a-1); len(got) != 0 {
		t.Fatalf("aborted up to %d = %+v, want none", a-1, got)
	}

	mustClose(t, l)
	l = openTest(t, Config{Dir: dir, SegmentBytes: 300})
	check("reopened", l, want)

	if _, err := l.DeleteRecords(abort1 + 1); err != nil {
		t.Fatal(err)
	}
	check("after DeleteRecords", l, want[1:])

	if err := l.Truncate(abort3); err != nil {
		t.Fatal(err)
	}
	if got := l.AbortedTxns(0, 100); len(got) != 0 {
		t.Fatalf("after truncating the marker: aborted = %+v, want none", got)
	}
	if off, ok := l.FirstUnstableOffset(); !ok || off != c {
		t.Fatalf("after truncating the marker: first unstable = %d %v, want %d", off, ok, c)
	}
}

// TestCompactionKeepsTransactions compacts a log holding committed and
// aborted transactions whose keys are also written non-transactionally:
// markers and transactional batches survive verbatim, superseded
// non-transactional records go, and the transaction index rebuilt from
// the compacted files is the one before.
func TestCompactionKeepsTransactions(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	cfg := Config{Dir: dir, SegmentBytes: 1024, Compact: true, RetentionMs: -1, Now: clk.Now}
	l := openTest(t, cfg)
	appendSpec(t, l, batchSpec{recs: []rec{kv("k", "plain-old", 1)}})
	appendBytes(t, l, buildBatch(t, batchSpec{recs: []rec{kv("k", "committed", 2)}, producerID: 5, txn: true}))
	marker(t, l, 5, ControlCommit)
	a, _, _ := appendBytes(t, l, buildBatch(t, batchSpec{recs: []rec{kv("k", "aborted", 3)}, producerID: 6, txn: true}))
	abortAt := marker(t, l, 6, ControlAbort)
	appendSpec(t, l, batchSpec{recs: []rec{kv("k", "plain-new", 4)}})
	rollTo(t, l, 10)
	wantAborted := []AbortedTxn{{6, a, abortAt}}
	if got := l.AbortedTxns(0, 1000); !reflect.DeepEqual(got, wantAborted) {
		t.Fatalf("before compaction: aborted %+v", got)
	}
	st, err := l.Compact()
	if err != nil {
		t.Fatal(err)
	}
	if st.RecordsRemoved == 0 {
		t.Fatal("compaction removed nothing: the superseded plain record should go")
	}
	controls := 0
	values := map[string]bool{}
	for _, b := range readAll(t, l, 0) {
		h, _ := ParseBatchHeader(b)
		if h.IsControl() {
			controls++
			continue
		}
		_, recs := decodeBatch(t, b)
		for _, r := range recs {
			values[string(r.value)] = true
		}
	}
	if controls != 2 || values["plain-old"] || !values["committed"] || !values["aborted"] || !values["plain-new"] {
		t.Fatalf("after compaction: %d control batches, values %v", controls, values)
	}
	mustClose(t, l)
	l = openTest(t, cfg)
	if got := l.AbortedTxns(0, 1000); !reflect.DeepEqual(got, wantAborted) {
		t.Fatalf("after compaction and reopen: aborted %+v, want %+v", got, wantAborted)
	}
	if _, ok := l.FirstUnstableOffset(); ok {
		t.Fatal("after compaction and reopen: a transaction is open")
	}
}

// TestTxnMarkFile checks that only a log that received a transactional
// batch is marked (and so scanned at Open), and that the mark is written
// before the batch.
func TestTxnMarkFile(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, Config{Dir: dir})
	appendBytes(t, l, simpleBatch(t, 3, 5, 0))
	if _, err := os.Stat(filepath.Join(dir, txnMarkFile)); !os.IsNotExist(err) {
		t.Fatalf("plain log is marked transactional: %v", err)
	}
	first, _, _ := appendBytes(t, l, txnBatch(t, 1, 1))
	if _, err := os.Stat(filepath.Join(dir, txnMarkFile)); err != nil {
		t.Fatalf("log with a transactional batch is not marked: %v", err)
	}
	mustClose(t, l)
	l = openTest(t, Config{Dir: dir})
	if off, ok := l.FirstUnstableOffset(); !ok || off != first {
		t.Fatalf("after reopen: first unstable %d %v, want %d", off, ok, first)
	}
}
