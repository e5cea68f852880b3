package partition

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/internal/batchtest"
	"github.com/simtel/simtel/broker/storage"
)

// idemBatch is a valid magic-2 batch of n records from producer pid at
// sequence seq, as a client sends it (base offset 0).
func idemBatch(pid int64, seq int32, n int, tag string) []byte {
	return testBatch(pid, 0, seq, n, tag, 0)
}

// testBatch encodes a record batch of n records valued tag from producer
// pid at epoch and sequence seq with the given attributes, as a client
// sends it (base offset 0).
func testBatch(pid int64, epoch int16, seq int32, n int, tag string, attrs int16) []byte {
	return batchtest.Encode(kmsg.RecordBatch{Magic: 2, Attributes: attrs, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
		FirstTimestamp: 1, MaxTimestamp: 1, PartitionLeaderEpoch: -1}, slices.Repeat([]string{tag}, n)...)
}

// newTestPartition opens a partition of topic "r" in dir with the
// default settings.
func newTestPartition(t testing.TB, dir string) *Partition {
	t.Helper()
	l, err := storage.Open(storage.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Open(l, Config{Topic: "r", Settings: Settings{MaxMessageBytes: 1 << 20}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	return p
}

type memSink struct {
	bytes.Buffer
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// testStores gives each test partition its raft log store, over an
// in-memory store where the broker has its WAL.
var testStores sync.Map

func storeOf(p *Partition) *dataLogStore {
	v, _ := testStores.LoadOrStore(p, &dataLogStore{inner: raft.NewInmemStore(), p: p})
	return v.(*dataLogStore)
}

// applyEntry stores a command entry and applies it, as raft does once it
// is committed.
func applyEntry(f *replicaFSM, index, term uint64, data []byte) AppendResult {
	l := &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: data}
	if err := storeOf(f.p).StoreLogs([]*raft.Log{l}); err != nil {
		return AppendResult{Err: err}
	}
	res, _ := f.Apply(l).(AppendResult)
	return res
}

// replicaAfterOneEntry is a partition, its replica FSM having applied
// entry 1 (term 1: producer 1's first two records), and its raft log
// store; the partition closes when the test ends.
func replicaAfterOneEntry(t *testing.T) (*Partition, *replicaFSM, *dataLogStore) {
	t.Helper()
	p := newTestPartition(t, t.TempDir())
	t.Cleanup(func() { p.Close() })
	f := &replicaFSM{p: p}
	if res := applyEntry(f, 1, 1, idemBatch(1, 0, 2, "a")); res.Err != nil {
		t.Fatal(res.Err)
	}
	return p, f, storeOf(p)
}

// logBytes is p's log from from to its end, as stored.
func logBytes(t *testing.T, p *Partition, from int64) []byte {
	t.Helper()
	res, err := p.log.Read(from, 1<<40, p.log.EndOffset())
	if err != nil {
		t.Fatalf("%s: read from offset %d: %v", p, from, err)
	}
	defer res.Release()
	chunks := make([]io.Reader, 0, len(res.Chunks))
	for _, c := range res.Chunks {
		chunks = append(chunks, io.NewSectionReader(c.File, c.Pos, c.Size))
	}
	out, err := io.ReadAll(io.MultiReader(chunks...))
	if err != nil {
		t.Fatalf("%s: read the segments: %v", p, err)
	}
	return out
}

func TestReplicaFSMApply(t *testing.T) {
	dir := t.TempDir()
	p := newTestPartition(t, dir)
	defer p.Close()
	f := &replicaFSM{p: p}

	entries := [][]byte{idemBatch(7, 0, 2, "a"), idemBatch(7, 2, 3, "b"), idemBatch(8, 0, 1, "c")}
	// Non-command entries take no offsets.
	if r := f.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogNoop}); r != nil {
		t.Fatalf("no-op apply returned %v", r)
	}
	wantBase := []int64{0, 2, 5}
	for i, e := range entries {
		res := applyEntry(f, uint64(i+2), 3, e)
		if res.Err != nil || res.Base != wantBase[i] || res.Duplicate {
			t.Fatalf("entry %d: %+v, want base %d", i, res, wantBase[i])
		}
	}
	if p.log.EndOffset() != 6 || p.HighWatermark() != 6 {
		t.Fatalf("end %d hw %d, want 6 and 6", p.log.EndOffset(), p.HighWatermark())
	}
	// The stored batches carry the entry's term as leader epoch.
	if err := p.log.ScanBatches(0, func(h storage.BatchHeader) error {
		if h.PartitionLeaderEpoch != 3 {
			t.Errorf("batch at %d has leader epoch %d, want 3", h.BaseOffset, h.PartitionLeaderEpoch)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A retried batch (same producer and sequences) is a duplicate with
	// its original offset, written nowhere.
	res := applyEntry(f, 10, 3, idemBatch(7, 2, 3, "b"))
	if !res.Duplicate || res.Base != 2 || res.Err != nil {
		t.Fatalf("retry: %+v, want duplicate at 2", res)
	}
	// A gap is refused the same way on every replica.
	res = applyEntry(f, 11, 3, idemBatch(7, 9, 1, "x"))
	if !errors.Is(res.Err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("gap: %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", res.Err)
	}
	if p.log.EndOffset() != 6 {
		t.Fatalf("end %d after a duplicate and a refused batch, want 6", p.log.EndOffset())
	}
}

// TestReplicaFSMRestart restarts a replica the way the broker does: the
// raft log store is reconciled with the partition log, raft restores the
// snapshot (or none), then applies the entries after it from its log.
// The log is byte for byte what it was: no duplicate, no missing batch,
// dedup state intact.
func TestReplicaFSMRestart(t *testing.T) {
	entries := [][]byte{idemBatch(1, 0, 2, "a"), idemBatch(1, 2, 2, "b"), idemBatch(2, 0, 4, "c"), idemBatch(1, 4, 1, "d")}
	for _, withSnap := range []bool{true, false} {
		dir := t.TempDir()
		p := newTestPartition(t, dir)
		f := &replicaFSM{p: p}
		var snap memSink
		var snapEnd int64
		for i, e := range entries {
			applyEntry(f, uint64(i+1), 2, e)
			if i == 1 && withSnap {
				s, err := f.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Persist(&snap); err != nil {
					t.Fatal(err)
				}
				snapEnd = p.HighWatermark()
			}
		}
		want := logBytes(t, p, 0)
		inner := storeOf(p).inner
		p.Close()

		p2 := newTestPartition(t, dir)
		s2 := &dataLogStore{inner: inner, p: p2}
		testStores.Store(p2, s2)
		f2 := &replicaFSM{p: p2}
		from := 0
		if withSnap {
			from = 2
		}
		if err := s2.reconcile(uint64(from), snapEnd); err != nil {
			t.Fatal(err)
		}
		if p2.HighWatermark() != snapEnd {
			t.Fatalf("snapshot=%v: hw %d before raft applies anything, want %d", withSnap, p2.HighWatermark(), snapEnd)
		}
		if withSnap {
			if err := f2.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err != nil {
				t.Fatal(err)
			}
		}
		for i := from; i < len(entries); i++ {
			var l raft.Log
			if err := s2.GetLog(uint64(i+1), &l); err != nil {
				t.Fatal(err)
			}
			if res, _ := f2.Apply(&l).(AppendResult); res.Err != nil || res.Duplicate {
				t.Fatalf("snapshot=%v apply of entry %d after the restart: %+v", withSnap, i, res)
			}
		}
		if got := logBytes(t, p2, 0); !bytes.Equal(got, want) {
			t.Fatalf("snapshot=%v: log after the restart differs (%d bytes, want %d)", withSnap, len(got), len(want))
		}
		if p2.HighWatermark() != 9 {
			t.Fatalf("snapshot=%v: hw %d, want 9", withSnap, p2.HighWatermark())
		}
		// Dedup state survives the restart.
		if res := applyEntry(f2, 5, 2, idemBatch(1, 4, 1, "d")); !res.Duplicate || res.Base != 8 {
			t.Fatalf("snapshot=%v: retry after restart: %+v, want duplicate at 8", withSnap, res)
		}
		// A snapshot beyond the local log cannot be used.
		if withSnap {
			big := []byte(`{"end_offset":100}`)
			if err := f2.Restore(io.NopCloser(bytes.NewReader(big))); err == nil {
				t.Fatal("restore of a snapshot past the local log succeeded")
			}
		}
		p2.Close()
	}
}

// TestReplicaConflictTruncates: entries a follower stored but raft never
// committed are deleted when a new leader's entries conflict; the
// partition log loses their batches, the producer state forgets them, and
// the new leader's entries take the same offsets.
func TestReplicaConflictTruncates(t *testing.T) {
	p, f, s := replicaAfterOneEntry(t)
	// Stored in term 1, never committed.
	stale := []*raft.Log{
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: idemBatch(1, 2, 3, "old")},
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: idemBatch(2, 0, 1, "old")},
	}
	if err := s.StoreLogs(stale); err != nil {
		t.Fatal(err)
	}
	if p.log.EndOffset() != 6 || p.HighWatermark() != 2 {
		t.Fatalf("end %d hw %d, want 6 and 2", p.log.EndOffset(), p.HighWatermark())
	}
	// The term 2 leader has other entries from index 2 on.
	if err := s.DeleteRange(2, 3); err != nil {
		t.Fatal(err)
	}
	if p.log.EndOffset() != 2 {
		t.Fatalf("end %d after the conflicting entries were deleted, want 2", p.log.EndOffset())
	}
	// Producer 1's sequence 2 is free again, producer 2 unknown.
	if res := applyEntry(f, 2, 2, idemBatch(1, 2, 1, "new")); res.Err != nil || res.Duplicate || res.Base != 2 {
		t.Fatalf("new leader's entry: %+v, want written at 2", res)
	}
	var l raft.Log
	if err := s.GetLog(2, &l); err != nil {
		t.Fatal(err)
	}
	hdrs, err := storage.ParseBatches(l.Data, 0)
	if err != nil || len(hdrs) != 1 || hdrs[0].BaseOffset != 2 || hdrs[0].PartitionLeaderEpoch != 2 {
		t.Fatalf("entry 2 read back: %+v %v, want one batch at offset 2 epoch 2", hdrs, err)
	}
	// A prefix deletion (after a snapshot) leaves the data alone.
	if err := s.DeleteRange(1, 1); err != nil {
		t.Fatal(err)
	}
	if p.log.EndOffset() != 3 || p.log.StartOffset() != 0 {
		t.Fatalf("log %d-%d after a prefix deletion, want 0-3", p.log.StartOffset(), p.log.EndOffset())
	}
}

// TestReplicaReconcileAfterCrash: after a crash the partition log and
// the raft log can disagree about the last entries (one was on disk, the
// other not); reconcile cuts whichever is ahead.
func TestReplicaReconcileAfterCrash(t *testing.T) {
	dir := t.TempDir()
	p := newTestPartition(t, dir)
	f := &replicaFSM{p: p}
	for i := range 3 {
		if res := applyEntry(f, uint64(i+1), 1, idemBatch(1, int32(i), 1, "a")); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	inner := storeOf(p).inner
	// Batches on disk whose references never were: offsets 3-4.
	extra := idemBatch(1, 3, 2, "lost")
	hdrs, _ := storage.ParseBatches(extra, 0)
	if _, _, err := p.log.Append(extra, hdrs, 1); err != nil {
		t.Fatal(err)
	}
	p.Close()
	p2 := newTestPartition(t, dir)
	s2 := &dataLogStore{inner: inner, p: p2}
	if err := s2.reconcile(0, 0); err != nil {
		t.Fatal(err)
	}
	if p2.log.EndOffset() != 3 {
		t.Fatalf("end %d after reconcile, want 3 (the batches without a raft entry cut)", p2.log.EndOffset())
	}
	// References whose batches are gone: offsets 2 and up.
	if err := p2.log.Truncate(2); err != nil {
		t.Fatal(err)
	}
	if err := s2.reconcile(0, 0); err != nil {
		t.Fatal(err)
	}
	if last, _ := inner.LastIndex(); last != 2 || p2.log.EndOffset() != 2 {
		t.Fatalf("last raft entry %d, log end %d after reconcile; want 2 and 2", last, p2.log.EndOffset())
	}
	p2.Close()
}

// TestReplicaOldEntriesStoredAgain: a raft log written by a version that
// kept the batches in the WAL (raft.LogCommand entries) is stored again
// with the data in the partition log, at the offsets the old state
// machine gave them.
func TestReplicaOldEntriesStoredAgain(t *testing.T) {
	p := newTestPartition(t, t.TempDir())
	defer p.Close()
	inner := raft.NewInmemStore()
	var old []*raft.Log
	for i := range 3 {
		old = append(old, &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: idemBatch(1, int32(i*2), 2, "x")})
	}
	old = append(old, &raft.Log{Index: 4, Term: 1, Type: raft.LogCommand, Data: idemBatch(1, 2, 2, "x")}) // a retry
	if err := inner.StoreLogs(old); err != nil {
		t.Fatal(err)
	}
	s := &dataLogStore{inner: inner, p: p}
	if err := s.reconcile(0, 0); err != nil {
		t.Fatal(err)
	}
	if p.log.EndOffset() != 6 || p.HighWatermark() != 0 {
		t.Fatalf("end %d hw %d, want 6 and 0", p.log.EndOffset(), p.HighWatermark())
	}
	f := &replicaFSM{p: p}
	for i := uint64(1); i <= 4; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		res, _ := f.Apply(&l).(AppendResult)
		if res.Err != nil || res.Duplicate != (i == 4) {
			t.Fatalf("entry %d: %+v", i, res)
		}
	}
	if p.HighWatermark() != 6 {
		t.Fatalf("hw %d, want 6", p.HighWatermark())
	}
}

// BenchmarkReplicaFSMApply: a replica applies committed entries of about
// 440 KiB (a produce request's 1 KiB records for one partition), as a
// replica catching up does back to back; reports MB/s applied.
func BenchmarkReplicaFSMApply(b *testing.B) {
	p := newTestPartition(b, b.TempDir())
	defer p.Close()
	f := &replicaFSM{p: p}
	data := testBatch(-1, 0, 0, 430, string(bytes.Repeat([]byte("v"), 1000)), 0)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := range b.N {
		if res := applyEntry(f, uint64(i+1), 1, data); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}

// failingStore is a raft log store whose StoreLogs fails.
type failingStore struct{ raft.LogStore }

func (failingStore) StoreLogs([]*raft.Log) error { return errors.New("disk full") }

// TestReplicaStoreFailureTakesBack: entries raft could not store leave
// nothing in the partition log, so storing them again puts them at the
// same offsets.
func TestReplicaStoreFailureTakesBack(t *testing.T) {
	p, f, s := replicaAfterOneEntry(t)
	bad := &dataLogStore{inner: failingStore{s.inner}, p: p}
	entries := func() []*raft.Log {
		return []*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: idemBatch(1, 2, 3, "b")}}
	}
	if err := bad.StoreLogs(entries()); err == nil {
		t.Fatal("StoreLogs succeeded over a failing store")
	}
	if p.log.EndOffset() != 2 {
		t.Fatalf("end %d after a failed store, want 2", p.log.EndOffset())
	}
	l := entries()
	if err := s.StoreLogs(l); err != nil {
		t.Fatal(err)
	}
	if res, _ := f.Apply(l[0]).(AppendResult); res.Err != nil || res.Duplicate || res.Base != 2 {
		t.Fatalf("stored again: %+v, want written at 2", res)
	}
}

// heldStore is a deferred raft log store whose entries become durable
// when the test sends their fate on release.
type heldStore struct {
	raft.LogStore
	release chan error
}

func (h heldStore) StoreLogsDeferred(logs []*raft.Log) (func() error, error) {
	if err := h.LogStore.StoreLogs(logs); err != nil {
		return nil, err
	}
	return func() error { return <-h.release }, nil
}

// applyAsync applies l on a goroutine of its own, as raft's FSM
// goroutine does, and returns its answer on the channel.
func applyAsync(f *replicaFSM, l *raft.Log) chan AppendResult {
	ch := make(chan AppendResult, 1)
	go func() {
		res, _ := f.Apply(l).(AppendResult)
		ch <- res
	}()
	return ch
}

// TestReplicaLeaderSyncsWhileItReplicates: a leader's StoreLogs returns
// before its fsync; the entry's apply (the high watermark, the
// producer's answer) waits for it, and a failed fsync answers a storage
// error, leaves the high watermark and fails every later store.
func TestReplicaLeaderSyncsWhileItReplicates(t *testing.T) {
	p, f, s := replicaAfterOneEntry(t)
	held := heldStore{LogStore: s.inner, release: make(chan error)}
	leader := &dataLogStore{inner: held, p: p, leading: func() bool { return true }}
	f = &replicaFSM{p: p, store: leader}

	l := &raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: idemBatch(1, 2, 3, "b")}
	if err := leader.StoreLogs([]*raft.Log{l}); err != nil {
		t.Fatal(err)
	}
	if p.log.EndOffset() != 5 {
		t.Fatalf("log end %d once stored, want 5", p.log.EndOffset())
	}
	applied := applyAsync(f, l)
	select {
	case res := <-applied:
		t.Fatalf("applied before the leader's fsync: %+v", res)
	case <-time.After(100 * time.Millisecond):
	}
	if hw := p.HighWatermark(); hw != 2 {
		t.Fatalf("high watermark %d before the leader's fsync, want 2", hw)
	}
	held.release <- nil
	if res := <-applied; res.Err != nil || res.Base != 2 || res.Last != 4 {
		t.Fatalf("after the fsync: %+v, want written at 2-4", res)
	}
	if hw := p.HighWatermark(); hw != 5 {
		t.Fatalf("high watermark %d after the fsync, want 5", hw)
	}

	// A follower's store is synchronous: nothing to wait for.
	follower := &dataLogStore{inner: s.inner, p: p, leading: func() bool { return false }}
	l3 := &raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: idemBatch(1, 5, 1, "c")}
	if err := follower.StoreLogs([]*raft.Log{l3}); err != nil {
		t.Fatal(err)
	}
	if res, _ := f.Apply(l3).(AppendResult); res.Err != nil || res.Base != 5 {
		t.Fatalf("follower's entry: %+v, want written at 5", res)
	}

	l4 := &raft.Log{Index: 4, Term: 1, Type: raft.LogCommand, Data: idemBatch(1, 6, 1, "d")}
	if err := leader.StoreLogs([]*raft.Log{l4}); err != nil {
		t.Fatal(err)
	}
	applied = applyAsync(f, l4)
	held.release <- errors.New("input/output error")
	res := <-applied
	if !errors.Is(res.Err, kerr.KafkaStorageError) {
		t.Fatalf("after a failed fsync: %+v, want KAFKA_STORAGE_ERROR", res)
	}
	if hw := p.HighWatermark(); hw != 6 {
		t.Fatalf("high watermark %d after a failed fsync, want 6", hw)
	}
	l5 := &raft.Log{Index: 5, Term: 1, Type: raft.LogCommand, Data: idemBatch(1, 7, 1, "e")}
	if err := leader.StoreLogs([]*raft.Log{l5}); err == nil {
		t.Fatal("a store after a failed fsync succeeded")
	}
}

// TestReplicaLeaderSyncOfDeletedEntries: entries a leader stored and raft
// then deleted (a new leader's conflict) are not waited for when other
// entries are stored at their indexes.
func TestReplicaLeaderSyncOfDeletedEntries(t *testing.T) {
	p, f, s := replicaAfterOneEntry(t)
	held := heldStore{LogStore: s.inner, release: make(chan error, 1)}
	leader := &dataLogStore{inner: held, p: p, leading: func() bool { return true }}
	f = &replicaFSM{p: p, store: leader}
	if err := leader.StoreLogs([]*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: idemBatch(1, 2, 3, "b")}}); err != nil {
		t.Fatal(err)
	}
	if err := leader.DeleteRange(2, 2); err != nil {
		t.Fatal(err)
	}
	if p.log.EndOffset() != 2 {
		t.Fatalf("log end %d after the delete, want 2", p.log.EndOffset())
	}
	follower := &dataLogStore{inner: s.inner, p: p}
	l := &raft.Log{Index: 2, Term: 2, Type: raft.LogCommand, Data: idemBatch(1, 2, 1, "x")}
	if err := follower.StoreLogs([]*raft.Log{l}); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-applyAsync(f, l):
		if res.Err != nil || res.Base != 2 {
			t.Fatalf("the new leader's entry: %+v, want written at 2", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the apply of a new entry waits for the fsync of the deleted one")
	}
	held.release <- nil
}
