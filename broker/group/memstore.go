package group

import (
	"slices"
	"sync"
)

// MemStore is a Store that keeps everything in memory: for tests, and for
// brokers that do not need offsets to survive a restart.
type MemStore struct {
	mu struct {
		sync.Mutex
		state  *storeState
		closed bool
	}
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore {
	s := &MemStore{}
	s.mu.state = newStoreState()
	return s
}

// applyRecord applies r, cloning it first so that the store never aliases
// its caller's slices (the coordinator reuses nothing, but a Store must
// not rely on that).
func (s *MemStore) applyRecord(r record) error {
	r.offsets = slices.Clone(r.offsets)
	r.tps = slices.Clone(r.tps)
	r.meta = cloneMeta(r.meta)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrStoreClosed
	}
	s.mu.state.apply(&r)
	return nil
}

// Commit implements Store.
func (s *MemStore) Commit(group string, offsets []CommittedOffset) error {
	return s.applyRecord(record{kind: recCommit, group: group, offsets: offsets})
}

// DeleteOffsets implements Store.
func (s *MemStore) DeleteOffsets(group string, tps []TopicPartition) error {
	return s.applyRecord(record{kind: recDeleteOffsets, group: group, tps: tps})
}

// DeleteGroup implements Store.
func (s *MemStore) DeleteGroup(group string) error {
	return s.applyRecord(record{kind: recDeleteGroup, group: group})
}

// SaveGroup implements Store.
func (s *MemStore) SaveGroup(meta GroupMeta) error {
	return s.applyRecord(record{kind: recSaveGroup, group: meta.Group, meta: meta})
}

// Load implements Store.
func (s *MemStore) Load() (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return State{}, ErrStoreClosed
	}
	return s.mu.state.snapshot(), nil
}

// Close implements Store. A closed MemStore keeps its content for Reopen.
func (s *MemStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.closed = true
	return nil
}

// Reopen returns a new open MemStore holding a copy of s's content, as a
// restarted process would find it in a durable store.
func (s *MemStore) Reopen() *MemStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := NewMemStore()
	for _, r := range s.mu.state.records() {
		n.mu.state.apply(&r)
	}
	return n
}
