package partition

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/storage"
)

// txnBatch is a transactional batch of n records from producer pid at
// epoch and sequence seq, as a transactional client sends it.
func txnBatch(pid int64, epoch int16, seq int32, n int, tag string) []byte {
	return testBatch(pid, epoch, seq, n, tag, 0x10)
}

// TestReplicaFSMTransactions applies the same raft entries (transactional
// batches and the coordinator's markers) on two replicas and checks that
// both end with the same log, the same open and aborted transactions and
// the same producer epochs: a marker carrying a bumped epoch fences the
// old producer on every replica, and a marker needs no sequence.
func TestReplicaFSMTransactions(t *testing.T) {
	type replica struct {
		p *Partition
		f *replicaFSM
	}
	var rs []replica
	for range 2 {
		p := newTestPartition(t, t.TempDir())
		defer p.Close()
		rs = append(rs, replica{p, &replicaFSM{p: p}})
	}
	entries := []struct {
		data    []byte
		wantErr error
	}{
		{txnBatch(5, 0, 0, 2, "a"), nil},                                          // 0-1: pid 5 opens a transaction
		{idemBatch(6, 0, 1, "plain"), nil},                                        // 2
		{txnBatch(5, 0, 2, 1, "b"), nil},                                          // 3
		{storage.AppendControlBatch(nil, 5, 0, storage.ControlCommit, 0, 1), nil}, // 4: commit
		{txnBatch(5, 0, 3, 1, "c"), nil},                                          // 5: next transaction
		// The coordinator aborts it with the epoch bumped (a timeout).
		{storage.AppendControlBatch(nil, 5, 1, storage.ControlAbort, 0, 1), nil}, // 6
		// The fenced producer's late batch is refused on every replica.
		{txnBatch(5, 0, 4, 1, "late"), kerr.InvalidProducerEpoch},
		{txnBatch(7, 0, 0, 1, "open"), nil}, // 7: left open
	}
	for _, r := range rs {
		for i, e := range entries {
			res := applyEntry(r.f, uint64(i+1), 2, e.data)
			if !errors.Is(res.Err, e.wantErr) || (e.wantErr == nil && res.Err != nil) {
				t.Fatalf("entry %d: err %v, want %v", i, res.Err, e.wantErr)
			}
		}
	}
	for i, r := range rs {
		p := r.p
		if got := p.log.EndOffset(); got != 8 {
			t.Fatalf("replica %d: end offset %d, want 8", i, got)
		}
		if first, ok := p.log.FirstUnstableOffset(); !ok || first != 7 {
			t.Fatalf("replica %d: first unstable offset %d (%v), want 7", i, first, ok)
		}
		if got := p.LastStableOffset(p.HighWatermark()); got != 7 {
			t.Fatalf("replica %d: last stable offset %d, want 7", i, got)
		}
		if _, open := p.log.OngoingTxn(5); open {
			t.Fatalf("replica %d: producer 5 still has an open transaction after its markers", i)
		}
		ab := p.log.AbortedTxns(0, 8)
		if len(ab) != 1 || ab[0].ProducerID != 5 || ab[0].FirstOffset != 5 {
			t.Fatalf("replica %d: aborted transactions %+v, want producer 5 from offset 5", i, ab)
		}
		p.mu.Lock()
		epoch := p.mu.producers[5].epoch
		p.mu.Unlock()
		if epoch != 1 {
			t.Fatalf("replica %d: producer 5 epoch %d, want 1 (the abort marker's)", i, epoch)
		}
	}
	if !bytes.Equal(logBytes(t, rs[0].p, 0), logBytes(t, rs[1].p, 0)) {
		t.Fatal("the two replicas' logs differ")
	}
}

// TestReplicaFSMMarkerCoordinatorEpoch: a marker from a deposed
// transaction coordinator (a lower coordinator epoch than a marker
// already written for the producer) arriving late must not end the
// producer's next transaction. It is refused with
// TRANSACTION_COORDINATOR_FENCED, also after the producer state was
// rebuilt from the log (a restart or a snapshot install).
func TestReplicaFSMMarkerCoordinatorEpoch(t *testing.T) {
	p := newTestPartition(t, t.TempDir())
	defer p.Close()
	f := &replicaFSM{p: p}
	idx := uint64(0)
	apply := func(data []byte, want error) {
		t.Helper()
		idx++
		res := applyEntry(f, idx, 2, data)
		if !errors.Is(res.Err, want) || (want == nil && res.Err != nil) {
			t.Fatalf("entry %d: err %v, want %v", idx, res.Err, want)
		}
	}
	open := func() bool {
		_, ok := p.log.OngoingTxn(5)
		return ok
	}
	apply(txnBatch(5, 0, 0, 1, "a"), nil)                                          // 0
	apply(storage.AppendControlBatch(nil, 5, 0, storage.ControlCommit, 3, 1), nil) // 1: coordinator epoch 3 commits
	apply(txnBatch(5, 0, 1, 1, "b"), nil)                                          // 2: the next transaction
	// The coordinator of epoch 2 (deposed) sends its abort late.
	apply(storage.AppendControlBatch(nil, 5, 0, storage.ControlAbort, 2, 1), kerr.TransactionCoordinatorFenced)
	if !open() {
		t.Fatal("a stale coordinator's marker ended the producer's next transaction")
	}
	// From the log again, as after a restart.
	if err := p.resetReplicaLog(p.log.EndOffset()); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	ce := p.mu.producers[5].coordEpoch
	p.mu.Unlock()
	if ce != 3 {
		t.Fatalf("rebuilt coordinator epoch %d, want 3", ce)
	}
	apply(storage.AppendControlBatch(nil, 5, 0, storage.ControlAbort, 2, 1), kerr.TransactionCoordinatorFenced)
	if !open() {
		t.Fatal("after the rebuild, a stale coordinator's marker ended the transaction")
	}
	// The current coordinator (same or newer epoch) ends it.
	apply(storage.AppendControlBatch(nil, 5, 0, storage.ControlCommit, 4, 1), nil) // 3
	if open() {
		t.Fatal("the current coordinator's marker did not end the transaction")
	}
	if got := p.log.EndOffset(); got != 4 {
		t.Fatalf("end offset %d, want 4 (refused markers are not written)", got)
	}
}

// TestReplicaUncommittedMarkerKeepsTxnOpen: a transaction's marker stored
// but not yet committed by raft may still be removed (a new leader's
// entries conflict), so read_committed consumers must not read past the
// transaction's first batch until the marker is below the high watermark.
func TestReplicaUncommittedMarkerKeepsTxnOpen(t *testing.T) {
	p := newTestPartition(t, t.TempDir())
	defer p.Close()
	f := &replicaFSM{p: p}
	if res := applyEntry(f, 1, 1, idemBatch(6, 0, 1, "plain")); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := applyEntry(f, 2, 1, txnBatch(5, 0, 0, 2, "a")); res.Err != nil { // 1-2
		t.Fatal(res.Err)
	}
	marker := &raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: storage.AppendControlBatch(nil, 5, 0, storage.ControlCommit, 0, 1)}
	if err := storeOf(p).StoreLogs([]*raft.Log{marker}); err != nil {
		t.Fatal(err)
	}
	if hw := p.HighWatermark(); hw != 3 || p.LastStableOffset(hw) != 1 {
		t.Fatalf("hw %d, last stable offset %d with the marker stored but not committed; want 3 and 1", hw, p.LastStableOffset(hw))
	}
	if res, _ := f.Apply(marker).(AppendResult); res.Err != nil {
		t.Fatal(res.Err)
	}
	if hw := p.HighWatermark(); hw != 4 || p.LastStableOffset(hw) != 4 {
		t.Fatalf("hw %d, last stable offset %d once the marker is committed; want 4 and 4", hw, p.LastStableOffset(hw))
	}
}
