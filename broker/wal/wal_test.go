package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

func openT(t *testing.T, dir string, opts Options) *WAL {
	t.Helper()
	w, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return w
}

func entry(i, term uint64, data string) *raft.Log {
	return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(data)}
}

func entries(lo, hi, term uint64, tag string) []*raft.Log {
	var out []*raft.Log
	for i := lo; i <= hi; i++ {
		out = append(out, entry(i, term, fmt.Sprintf("%s-%d", tag, i)))
	}
	return out
}

func mustStore(t *testing.T, s *Store, logs []*raft.Log) {
	t.Helper()
	if err := s.StoreLogs(logs); err != nil {
		t.Fatalf("store %d-%d: %v", logs[0].Index, logs[len(logs)-1].Index, err)
	}
}

func bounds(t *testing.T, s *Store) (uint64, uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return f, l
}

func TestStoreBasics(t *testing.T) {
	dir := t.TempDir()
	w := openT(t, dir, Options{})
	a, b := w.Store(1), w.Store(2)
	if f, l := bounds(t, a); f != 0 || l != 0 {
		t.Fatalf("empty store: first %d last %d, want 0 0", f, l)
	}
	if _, err := a.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("get of a missing key: got %v, want \"not found\"", err)
	}
	mustStore(t, a, entries(1, 10, 1, "a"))
	mustStore(t, b, entries(1, 3, 1, "b"))
	if err := a.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := a.Set([]byte("LastVoteCand"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := a.StoreLogs(entries(12, 12, 1, "a")); err == nil {
		t.Fatal("storing entry 12 after 10 succeeded, want an error")
	}
	if err := a.DeleteRange(1, 4); err != nil { // prefix
		t.Fatal(err)
	}
	if err := a.DeleteRange(9, 10); err != nil { // suffix
		t.Fatal(err)
	}
	if err := a.DeleteRange(6, 7); err == nil {
		t.Fatal("deleting from the middle succeeded, want an error")
	}
	mustStore(t, a, entries(9, 9, 2, "a2"))
	check := func(w *WAL) {
		t.Helper()
		a, b := w.Store(1), w.Store(2)
		if f, l := bounds(t, a); f != 5 || l != 9 {
			t.Fatalf("group 1: first %d last %d, want 5 9", f, l)
		}
		if f, l := bounds(t, b); f != 1 || l != 3 {
			t.Fatalf("group 2: first %d last %d, want 1 3", f, l)
		}
		var got raft.Log
		if err := a.GetLog(9, &got); err != nil || string(got.Data) != "a2-9" || got.Term != 2 {
			t.Fatalf("entry 9: got %q term %d (%v), want a2-9 term 2", got.Data, got.Term, err)
		}
		if err := a.GetLog(4, &got); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("deleted entry 4: got %v, want ErrLogNotFound", err)
		}
		if err := b.GetLog(2, &got); err != nil || string(got.Data) != "b-2" {
			t.Fatalf("group 2 entry 2: got %q (%v)", got.Data, err)
		}
		if v, err := a.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
			t.Fatalf("CurrentTerm: got %d (%v), want 7", v, err)
		}
		if v, err := a.Get([]byte("LastVoteCand")); err != nil || string(v) != "2" {
			t.Fatalf("LastVoteCand: got %q (%v), want 2", v, err)
		}
	}
	check(w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.StoreLogs(entries(10, 10, 2, "x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("store after close: got %v, want ErrClosed", err)
	}
	w = openT(t, dir, Options{})
	defer w.Close()
	check(w)
	if err := w.DropGroup(1); err != nil {
		t.Fatal(err)
	}
	if f, l := bounds(t, w.Store(1)); f != 0 || l != 0 {
		t.Fatalf("dropped group: first %d last %d, want 0 0", f, l)
	}
	if _, err := w.Store(1).Get([]byte("LastVoteCand")); err == nil {
		t.Fatal("dropped group still has its stable values")
	}
}

// TestSegmentsCompaction: with small segments, segments are deleted once
// every group has compacted past them, and a reopened WAL has the same
// state.
func TestSegmentsCompaction(t *testing.T) {
	dir := t.TempDir()
	w := openT(t, dir, Options{SegmentBytes: 4096})
	groups := []*Store{w.Store(10), w.Store(11), w.Store(12)}
	for i := uint64(1); i <= 200; i++ {
		for gi, s := range groups {
			mustStore(t, s, []*raft.Log{entry(i, 1, fmt.Sprintf("g%d-%d-%s", gi, i, bytes.Repeat([]byte("x"), 40)))})
		}
	}
	if err := groups[0].SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	before := w.Stats().Segments
	if before < 10 {
		t.Fatalf("got %d segments, want many with 4 KiB segments", before)
	}
	// Two groups compact; the third still pins the oldest segments.
	for _, s := range groups[:2] {
		if err := s.DeleteRange(1, 190); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.Stats().Segments; got != before {
		t.Fatalf("segments after compacting two of three groups: got %d, want %d (group 12 still needs them)", got, before)
	}
	if err := groups[2].DeleteRange(1, 190); err != nil {
		t.Fatal(err)
	}
	after := w.Stats().Segments
	if after >= before/2 {
		t.Fatalf("segments after compacting every group: got %d, had %d", after, before)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	if len(files) != after {
		t.Fatalf("%d segment files on disk, the index says %d", len(files), after)
	}
	w.Close()
	w = openT(t, dir, Options{SegmentBytes: 4096})
	defer w.Close()
	for gi := range groups {
		s := w.Store(uint64(10 + gi))
		if f, l := bounds(t, s); f != 191 || l != 200 {
			t.Fatalf("group %d after reopen: first %d last %d, want 191 200", 10+gi, f, l)
		}
		var got raft.Log
		if err := s.GetLog(195, &got); err != nil || !bytes.HasPrefix(got.Data, fmt.Appendf(nil, "g%d-195-", gi)) {
			t.Fatalf("group %d entry 195: got %q (%v)", 10+gi, got.Data, err)
		}
	}
	if v, err := w.Store(10).GetUint64([]byte("CurrentTerm")); err != nil || v != 3 {
		t.Fatalf("CurrentTerm after its segment was deleted: got %d (%v), want 3 (from the checkpoint)", v, err)
	}
}

// TestGroupCommitConcurrent: writers of many groups at once; every entry
// is readable afterwards and after a reopen.
func TestGroupCommitConcurrent(t *testing.T) {
	dir := t.TempDir()
	w := openT(t, dir, Options{SegmentBytes: 256 << 10})
	const groups, per = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g := range groups {
		wg.Go(func() {
			s := w.Store(uint64(g + 1))
			for i := uint64(1); i <= per; i++ {
				if err := s.StoreLogs([]*raft.Log{entry(i, 1, fmt.Sprintf("%d/%d", g, i))}); err != nil {
					errs <- err
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
	st := w.Stats()
	t.Logf("%d appends, %d fsyncs", st.Appends, st.Syncs)
	w.Close()
	w = openT(t, dir, Options{SegmentBytes: 256 << 10})
	defer w.Close()
	for g := range groups {
		s := w.Store(uint64(g + 1))
		for i := uint64(1); i <= per; i++ {
			var got raft.Log
			if err := s.GetLog(i, &got); err != nil || string(got.Data) != fmt.Sprintf("%d/%d", g, i) {
				t.Fatalf("group %d entry %d: got %q (%v)", g+1, i, got.Data, err)
			}
		}
	}
}

// TestCorruptOlderSegment: a bad record in a segment that is not the last
// one fails Open with an error naming the segment.
func TestCorruptOlderSegment(t *testing.T) {
	dir := t.TempDir()
	w := openT(t, dir, Options{SegmentBytes: 1024})
	s := w.Store(1)
	for i := uint64(1); i <= 50; i++ {
		mustStore(t, s, []*raft.Log{entry(i, 1, string(bytes.Repeat([]byte("y"), 100)))})
	}
	w.Close()
	first := filepath.Join(dir, fmt.Sprintf("%016x%s", 1, segmentSuffix))
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(first, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{SegmentBytes: 1024}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("corrupt")) {
		t.Fatalf("open with a corrupt older segment: got %v, want a corruption error", err)
	}
}

// TestIdleGroupDoesNotPinSegments: a group that wrote once and never
// compacts must not keep every later segment on disk while another group
// writes and compacts: its live entries are relocated forward.
func TestIdleGroupDoesNotPinSegments(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 8192}
	w := openT(t, dir, opts)
	idle, busy := w.Store(1), w.Store(2)
	mustStore(t, idle, entries(1, 3, 1, "idle"))
	if err := idle.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	big := string(bytes.Repeat([]byte("b"), 1000))
	for i := uint64(1); i <= 2000; i++ {
		mustStore(t, busy, []*raft.Log{entry(i, 1, big)})
		if i%50 == 0 {
			f, _ := busy.FirstIndex()
			if err := busy.DeleteRange(f, i-10); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := w.Stats()
	if st.Segments > 10 {
		t.Fatalf("%d segments of 8 KiB for %d live bytes: the idle group pins them", st.Segments, st.LiveBytes)
	}
	if st.RelocatedBytes == 0 {
		t.Fatal("nothing was relocated")
	}
	t.Logf("segments %d, live %d bytes, written %d, relocated %d", st.Segments, st.LiveBytes, st.Bytes, st.RelocatedBytes)
	w.Close()
	w = openT(t, dir, opts)
	defer w.Close()
	idle = w.Store(1)
	if f, l := bounds(t, idle); f != 1 || l != 3 {
		t.Fatalf("idle group after reopen: first %d last %d, want 1 3", f, l)
	}
	for i := uint64(1); i <= 3; i++ {
		var got raft.Log
		if err := idle.GetLog(i, &got); err != nil || string(got.Data) != fmt.Sprintf("idle-%d", i) {
			t.Fatalf("idle entry %d: got %q (%v)", i, got.Data, err)
		}
	}
	if v, err := idle.GetUint64([]byte("CurrentTerm")); err != nil || v != 4 {
		t.Fatalf("idle CurrentTerm: got %d (%v), want 4", v, err)
	}
	if f, l := bounds(t, w.Store(2)); f != 1991 || l != 2000 {
		t.Fatalf("busy group after reopen: first %d last %d, want 1991 2000", f, l)
	}
}

// TestConcurrentReadsDuringCompaction: readers of every group run while
// writers append, compact and so roll, relocate and delete segments; a
// read returns the entry's data or ErrLogNotFound (compacted meanwhile),
// never another error or other data. Run it with -race.
func TestConcurrentReadsDuringCompaction(t *testing.T) {
	w := openT(t, t.TempDir(), Options{SegmentBytes: 16 << 10})
	defer w.Close()
	const groups, per = 4, 400
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 2*groups)
	payload := func(g int, i uint64) string { return fmt.Sprintf("%d/%d/%s", g, i, bytes.Repeat([]byte("p"), 200)) }
	for g := range groups {
		wg.Go(func() {
			s := w.Store(uint64(g + 1))
			for i := uint64(1); i <= per; i++ {
				if err := s.StoreLogs([]*raft.Log{entry(i, 1, payload(g, i))}); err != nil {
					errs <- err
					return
				}
				// The first group keeps everything: relocation has to
				// move it for segments to go.
				if g > 0 && i%20 == 0 {
					f, _ := s.FirstIndex()
					if err := s.DeleteRange(f, i-5); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	var readers sync.WaitGroup
	for g := range groups {
		readers.Go(func() {
			s := w.Store(uint64(g + 1))
			for k := uint64(0); ; k++ {
				select {
				case <-done:
					return
				default:
				}
				f, _ := s.FirstIndex()
				l, _ := s.LastIndex()
				if l == 0 {
					continue
				}
				i := f + k%(l-f+1)
				var got raft.Log
				err := s.GetLog(i, &got)
				if errors.Is(err, raft.ErrLogNotFound) {
					continue
				}
				if err != nil || string(got.Data) != payload(g, i) {
					errs <- fmt.Errorf("group %d entry %d: got %.20q (%v)", g+1, i, got.Data, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := w.Stats()
	t.Logf("segments %d, deleted %d, relocated %d bytes", st.Segments, st.DeletedSegments, st.RelocatedBytes)
}

// TestSetSameValueNotWritten: setting a stable value the group already
// has (hashicorp/raft sets the current term it just read whenever a group
// starts) writes no record, also after a reopen; a new value is written
// and survives the reopen.
func TestSetSameValueNotWritten(t *testing.T) {
	dir := t.TempDir()
	w := openT(t, dir, Options{})
	s := w.Store(1)
	key := []byte("CurrentTerm")
	if err := s.SetUint64(key, 4); err != nil {
		t.Fatal(err)
	}
	appends := w.stats.appends.Load()
	if err := s.SetUint64(key, 4); err != nil {
		t.Fatal(err)
	}
	if got := w.stats.appends.Load(); got != appends {
		t.Fatalf("setting the same value wrote %d records", got-appends)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = openT(t, dir, Options{})
	defer w.Close()
	s = w.Store(1)
	if err := s.SetUint64(key, 4); err != nil {
		t.Fatal(err)
	}
	if got := w.stats.appends.Load(); got != 0 {
		t.Fatalf("after a reopen, setting the same value wrote %d records", got)
	}
	if err := s.SetUint64(key, 5); err != nil {
		t.Fatal(err)
	}
	if got := w.stats.appends.Load(); got != 1 {
		t.Fatalf("a new value wrote %d records, want 1", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = openT(t, dir, Options{})
	defer w.Close()
	if v, err := w.Store(1).GetUint64(key); err != nil || v != 5 {
		t.Fatalf("after a reopen: %d, %v; want 5", v, err)
	}
}

// Setting a value a group already has waits only for the write that set
// it, not for other groups' writes not yet durable: thousands of groups
// starting at once each set their term to what it was.
func TestSetSameValueWaitsOnlyForItsWrite(t *testing.T) {
	dir := t.TempDir()
	w := openT(t, dir, Options{})
	key := []byte("CurrentTerm")
	if err := w.Store(1).SetUint64(key, 4); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = openT(t, dir, Options{})
	defer w.Close()
	// Another group's entry, written and not synced yet.
	wait, err := w.Store(2).StoreLogsDeferred([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	syncs := w.stats.syncs.Load()
	if err := w.Store(1).SetUint64(key, 4); err != nil {
		t.Fatal(err)
	}
	if got := w.stats.syncs.Load(); got != syncs {
		t.Fatalf("setting the replayed value again made %d fsyncs", got-syncs)
	}
	// A value set in this run is durable once its own write is.
	if err := w.Store(1).SetUint64(key, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Store(2).StoreLogsDeferred([]*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	syncs = w.stats.syncs.Load()
	if err := w.Store(1).SetUint64(key, 5); err != nil {
		t.Fatal(err)
	}
	if got := w.stats.syncs.Load(); got != syncs {
		t.Fatalf("setting a durable value again made %d fsyncs", got-syncs)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}
