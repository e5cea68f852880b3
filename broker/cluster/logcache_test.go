package cluster

import (
	"testing"

	"github.com/hashicorp/raft"
)

// countingStore counts the reads that reach it.
type countingStore struct {
	*raft.InmemStore
	reads int
}

func (s *countingStore) GetLog(i uint64, out *raft.Log) error {
	s.reads++
	return s.InmemStore.GetLog(i, out)
}

func TestLogCacheBounds(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newLogCache(store, 4, 100)
	entry := func(i uint64, size int) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: make([]byte, size)}
	}
	// get reads entry i and reports whether it came from the cache.
	get := func(i uint64) bool {
		t.Helper()
		before := store.reads
		var l raft.Log
		if err := c.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if l.Index != i {
			t.Fatalf("asked for entry %d, got %d", i, l.Index)
		}
		return store.reads == before
	}
	for i := uint64(1); i <= 6; i++ {
		if err := c.StoreLogs([]*raft.Log{entry(i, 10)}); err != nil {
			t.Fatal(err)
		}
	}
	// By count: the newest four.
	for i, want := range map[uint64]bool{1: false, 2: false, 3: true, 6: true} {
		if got := get(i); got != want {
			t.Errorf("small entries: entry %d cached %v, want %v", i, got, want)
		}
	}
	// By bytes: 60 + 60 > 100 keeps the newest only; one entry over the
	// bound is still kept.
	if err := c.StoreLogs([]*raft.Log{entry(7, 60), entry(8, 60)}); err != nil {
		t.Fatal(err)
	}
	for i, want := range map[uint64]bool{6: false, 7: false, 8: true} {
		if got := get(i); got != want {
			t.Errorf("large entries: entry %d cached %v, want %v", i, got, want)
		}
	}
	if err := c.StoreLogs([]*raft.Log{entry(9, 500)}); err != nil {
		t.Fatal(err)
	}
	if !get(9) || get(8) {
		t.Error("an entry over the byte bound: want it alone cached")
	}
	// A deletion empties the cache; entries stored after it, at other
	// indexes, are cached again.
	if err := c.DeleteRange(8, 9); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := c.GetLog(9, &l); err != raft.ErrLogNotFound {
		t.Fatalf("a deleted entry: %v, want not found", err)
	}
	if err := c.StoreLogs([]*raft.Log{entry(8, 10), entry(9, 10)}); err != nil {
		t.Fatal(err)
	}
	if !get(8) || !get(9) {
		t.Error("entries stored after a deletion are not cached")
	}
	if c.bytes != 20 {
		t.Errorf("cached bytes %d, want 20", c.bytes)
	}
}
