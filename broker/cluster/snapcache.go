package cluster

import (
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// listCache is a group's snapshot store whose List reads the snapshot
// directory once and again only after a snapshot was written. Starting a
// group lists its snapshots three times (StartGroup for the prepare
// step, raft's restore, trackedFSM after the restore), each a directory
// read and a JSON decode of every retained snapshot's meta file: with
// thousands of groups opening at a broker's start that was a sixth of its
// CPU. Every snapshot of the group is written through this store (raft's
// own and those installed from a leader), and the file store removes old
// ones only when a new one is closed, so the cached list is the
// directory's.
type listCache struct {
	raft.SnapshotStore
	mu    sync.Mutex
	list  []*raft.SnapshotMeta
	valid bool
}

func newListCache(s raft.SnapshotStore) *listCache { return &listCache{SnapshotStore: s} }

func (c *listCache) List() ([]*raft.SnapshotMeta, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid {
		l, err := c.SnapshotStore.List()
		if err != nil {
			return nil, err
		}
		c.list, c.valid = l, true
	}
	return slices.Clone(c.list), nil
}

func (c *listCache) forget() {
	c.mu.Lock()
	c.valid = false
	c.list = nil
	c.mu.Unlock()
}

func (c *listCache) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	c.forget()
	sink, err := c.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &listCacheSink{SnapshotSink: sink, c: c}, nil
}

// listCacheSink forgets the cached list once the snapshot is written or
// given up (a List between Create and Close reads the directory again,
// without the snapshot in progress, as the file store's own List does).
type listCacheSink struct {
	raft.SnapshotSink
	c *listCache
}

func (s *listCacheSink) Close() error {
	defer s.c.forget()
	return s.SnapshotSink.Close()
}

func (s *listCacheSink) Cancel() error {
	defer s.c.forget()
	return s.SnapshotSink.Cancel()
}
