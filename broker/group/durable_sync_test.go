package group

import (
	"testing"
	"testing/synctest"
)

// gatedStore is a MemStore whose SaveGroup waits until the test opens the
// gate, standing for a replicated write waiting for a majority.
type gatedStore struct {
	*MemStore
	gate chan struct{}
}

func (s *gatedStore) SaveGroup(meta GroupMeta) error {
	<-s.gate
	return s.MemStore.SaveGroup(meta)
}

// TestDurableSync: with DurableSync, SyncGroup answers only once the
// generation's metadata is stored, so that a coordinator loading the
// store afterwards knows the generation the member was told about.
func TestDurableSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gatedStore{MemStore: NewMemStore(), gate: make(chan struct{})}
		h := newHarnessWith(t, store, func(c *Config) { c.DurableSync = true })
		a := h.client("g", "a")
		a.prepareJoin()
		a.applyJoin(a.joinAsync().wait())
		s := a.syncAsync(map[string][]byte{a.memberID: []byte("assign-a")})
		if _, done := s.poll(); done {
			t.Fatal("SyncGroup answered before its generation's metadata was stored")
		}
		close(store.gate)
		resp := s.wait()
		if resp.ErrorCode != 0 || string(resp.MemberAssignment) != "assign-a" {
			t.Fatalf("SyncGroup after the save: error %d, assignment %q", resp.ErrorCode, resp.MemberAssignment)
		}
		st, err := store.MemStore.Load()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Groups) != 1 || st.Groups[0].Meta.Generation != a.gen || len(st.Groups[0].Meta.Members) != 1 {
			t.Fatalf("stored %+v, want generation %d with member %s", st.Groups, a.gen, a.memberID)
		}
	})
}

// TestSyncWithoutDurableSync: by default SyncGroup does not wait for the
// background save (the single-node behaviour).
func TestSyncWithoutDurableSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gatedStore{MemStore: NewMemStore(), gate: make(chan struct{})}
		h := newHarnessWith(t, store, nil)
		a := h.client("g", "a")
		a.prepareJoin()
		a.applyJoin(a.joinAsync().wait())
		s := a.syncAsync(map[string][]byte{a.memberID: []byte("x")})
		resp, done := s.poll()
		if !done || resp.ErrorCode != 0 {
			t.Fatalf("SyncGroup without DurableSync: done %v, response %+v", done, resp)
		}
		close(store.gate)
	})
}
