package cluster

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// TestListCache: List is read from the directory once, and again after
// each snapshot written or cancelled; what it returns is always what the
// file store itself lists then.
func TestListCache(t *testing.T) {
	dir := t.TempDir()
	files, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := newListCache(files)
	ids := func(l []*raft.SnapshotMeta) []string {
		var out []string
		for _, m := range l {
			out = append(out, m.ID)
		}
		return out
	}
	same := func(step string) {
		t.Helper()
		got, err := c.List()
		if err != nil {
			t.Fatal(err)
		}
		want, err := files.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(got) > 0 && got[0].ID != want[0].ID {
			t.Fatalf("%s: cached list %v, the directory's %v", step, ids(got), ids(want))
		}
	}
	write := func(index uint64, cancel bool) {
		t.Helper()
		sink, err := c.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write([]byte("state")); err != nil {
			t.Fatal(err)
		}
		if cancel {
			err = sink.Cancel()
		} else {
			err = sink.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	same("empty")
	write(10, false)
	same("after one snapshot")
	write(20, false)
	write(30, false) // the file store keeps two: the first is removed
	same("after three snapshots")
	write(40, true)
	same("after a cancelled one")

	// Cached: a snapshot removed behind the store's back still shows
	// until the next one is written.
	l, _ := c.List()
	if err := os.RemoveAll(filepath.Join(dir, "snapshots", l[0].ID)); err != nil {
		t.Fatal(err)
	}
	if again, _ := c.List(); len(again) != len(l) {
		t.Fatalf("List read the directory again: %v, was %v", ids(again), ids(l))
	}
	write(50, false)
	same("after a snapshot written again")
}
