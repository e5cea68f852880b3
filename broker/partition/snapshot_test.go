package partition

import (
	"bytes"
	"io"
	"testing"
)

// TestReplicaSnapshotCarriesData: a replica that is empty, or lags, gets
// the leader's log up to the snapshot's end from the snapshot (while the
// leader kept appending after it), then applies the later entries like the
// leader did: both logs end byte for byte equal and the producer state
// came along.
func TestReplicaSnapshotCarriesData(t *testing.T) {
	var entries [][]byte
	for i := range 40 {
		entries = append(entries, idemBatch(int64(1+i%3), int32(i/3*2), 2, "v"))
	}
	for _, lagging := range []int{0, 5} {
		lp := newTestPartition(t, t.TempDir())
		lf := &replicaFSM{p: lp}
		fp := newTestPartition(t, t.TempDir())
		ff := &replicaFSM{p: fp}
		for i := range lagging {
			applyEntry(ff, uint64(i+1), 1, entries[i])
		}
		const snapAt = 30
		var end int64
		for i, e := range entries {
			if res := applyEntry(lf, uint64(i+1), 1, e); res.Err != nil {
				t.Fatal(res.Err)
			}
			if i == 9 {
				// Retention moved the leader's start: the snapshot starts
				// with the batch holding it.
				if _, err := lp.log.DeleteRecords(6); err != nil {
					t.Fatal(err)
				}
			}
			if i == snapAt-1 {
				end = lp.log.EndOffset()
			}
		}
		size, rc, err := lp.openSnapshotData(end)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || int64(len(data)) != size {
			t.Fatalf("lagging %d: snapshot read %d bytes (%v), announced %d", lagging, len(data), err, size)
		}
		if err := ff.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			t.Fatalf("lagging %d: restore: %v", lagging, err)
		}
		if fp.log.EndOffset() != end || fp.HighWatermark() != end {
			t.Fatalf("lagging %d: after restore end %d hw %d, want %d", lagging, fp.log.EndOffset(), fp.HighWatermark(), end)
		}
		for i := snapAt; i < len(entries); i++ {
			if res := applyEntry(ff, uint64(i+1), 1, entries[i]); res.Err != nil || res.Duplicate {
				t.Fatalf("lagging %d: entry %d after the snapshot: %+v", lagging, i, res)
			}
		}
		if fp.log.StartOffset() != lp.log.StartOffset() {
			t.Fatalf("lagging %d: follower starts at %d, leader at %d", lagging, fp.log.StartOffset(), lp.log.StartOffset())
		}
		want, got := logBytes(t, lp, lp.log.StartOffset()), logBytes(t, fp, fp.log.StartOffset())
		if !bytes.Equal(got, want) {
			t.Fatalf("lagging %d: follower log (%d bytes from %d) differs from the leader's (%d bytes from %d)",
				lagging, len(got), fp.log.StartOffset(), len(want), lp.log.StartOffset())
		}
		// The producer state came along: a retry of an entry from before
		// the snapshot is a duplicate on the follower too.
		if res := applyEntry(ff, 99, 1, entries[snapAt-1]); !res.Duplicate {
			t.Fatalf("lagging %d: retry of an entry before the snapshot: %+v, want duplicate", lagging, res)
		}
		fp.Close()
		lp.Close()
	}
}
