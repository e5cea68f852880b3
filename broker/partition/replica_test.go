package partition

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"

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

func applyEntry(f *replicaFSM, index, term uint64, data []byte) AppendResult {
	r := f.Apply(&raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: data})
	res, _ := r.(AppendResult)
	return res
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

// TestReplicaFSMRestart replays the raft log after a restart the way raft
// does (snapshot restore, then the entries after it; or, with no
// snapshot, every entry) and checks the log is byte for byte what it was:
// no duplicate, no missing batch, dedup state intact.
func TestReplicaFSMRestart(t *testing.T) {
	entries := [][]byte{idemBatch(1, 0, 2, "a"), idemBatch(1, 2, 2, "b"), idemBatch(2, 0, 4, "c"), idemBatch(1, 4, 1, "d")}
	for _, withSnap := range []bool{true, false} {
		dir := t.TempDir()
		p := newTestPartition(t, dir)
		f := &replicaFSM{p: p}
		var snap memSink
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
			}
		}
		want := logBytes(t, p, 0)
		p.Close()

		// Restart: the log on disk has everything (applied before the
		// kill); raft restores the snapshot, then replays after it.
		p2 := newTestPartition(t, dir)
		f2 := &replicaFSM{p: p2}
		from := 0
		if withSnap {
			if err := f2.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err != nil {
				t.Fatal(err)
			}
			from = 2
		} else if err := p2.resetReplicaLog(0); err != nil {
			t.Fatal(err)
		}
		for i := from; i < len(entries); i++ {
			if res := applyEntry(f2, uint64(i+1), 2, entries[i]); res.Err != nil || res.Duplicate {
				t.Fatalf("snapshot=%v replay of entry %d: %+v", withSnap, i, res)
			}
		}
		if got := logBytes(t, p2, 0); !bytes.Equal(got, want) {
			t.Fatalf("snapshot=%v: log after replay differs (%d bytes, want %d)", withSnap, len(got), len(want))
		}
		if p2.HighWatermark() != 9 {
			t.Fatalf("snapshot=%v: hw %d, want 9", withSnap, p2.HighWatermark())
		}
		// Dedup state survives the restart.
		if res := applyEntry(f2, 9, 2, idemBatch(1, 4, 1, "d")); !res.Duplicate || res.Base != 8 {
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
