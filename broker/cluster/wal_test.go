package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/simtel/simtel/broker/wal"
)

// TestClaimGroupWAL: a group directory without the marker (new, or
// deleted by hand) starts from an empty raft log even if the WAL still
// has entries under the group id; with the marker the entries stay.
func TestClaimGroupWAL(t *testing.T) {
	root := t.TempDir()
	w, err := wal.Open(filepath.Join(root, walDirName), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	dir := filepath.Join(root, "t-0", "raft")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const group = 42
	last := func() uint64 {
		t.Helper()
		i, err := w.Store(group).LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	if err := claimGroupWAL(w, dir, group); err != nil {
		t.Fatal(err)
	}
	if err := w.Store(group).StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}, {Index: 2, Term: 1, Data: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Store(group).SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	if err := claimGroupWAL(w, dir, group); err != nil {
		t.Fatal(err)
	}
	if got := last(); got != 2 {
		t.Fatalf("after claiming a directory with its marker: last index %d, want 2", got)
	}
	// The partition directory is deleted by hand and re-created.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := claimGroupWAL(w, dir, group); err != nil {
		t.Fatal(err)
	}
	if got := last(); got != 0 {
		t.Fatalf("after claiming a directory without a marker: last index %d, want 0 (stale entries dropped)", got)
	}
	if _, err := w.Store(group).GetUint64([]byte("CurrentTerm")); err == nil {
		t.Fatal("the stale group's term survived")
	}
	if _, err := os.Stat(filepath.Join(dir, walMarker)); err != nil {
		t.Fatalf("marker not written: %v", err)
	}
}
