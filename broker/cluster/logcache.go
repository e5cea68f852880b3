package cluster

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// logCache keeps a group's most recent raft entries in memory, for the
// leader's replication and the followers' state machine, which read
// entries soon after they are stored. It is raft.LogCache bounded by
// bytes as well as by count: a partition's entries are whole produce
// batches of up to a MiB or more, and raft.LogCache's 64 of them per
// group held hundreds of MiB on a broker with a few busy partitions,
// each fresh heap page a page fault on the produce path. Entries that
// left the cache are read from the store.
type logCache struct {
	store raft.LogStore

	mu    sync.RWMutex
	ring  []*raft.Log
	bytes int // data and extensions of the entries in ring
	max   int
	// first and next: ring holds entries first..next-1 (slot i%len),
	// some of the oldest possibly evicted (nil) for the byte bound.
	first, next uint64
}

var (
	_ raft.LogStore          = (*logCache)(nil)
	_ raft.MonotonicLogStore = (*logCache)(nil)
)

// newLogCache caches at most count entries of store and, beyond its
// newest entry, at most maxBytes.
func newLogCache(store raft.LogStore, count, maxBytes int) *logCache {
	return &logCache{store: store, ring: make([]*raft.Log, count), max: maxBytes}
}

func entryBytes(l *raft.Log) int { return len(l.Data) + len(l.Extensions) }

func (c *logCache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (c *logCache) GetLog(index uint64, out *raft.Log) error {
	c.mu.RLock()
	var l *raft.Log
	if index >= c.first && index < c.next {
		l = c.ring[index%uint64(len(c.ring))]
	}
	c.mu.RUnlock()
	if l != nil && l.Index == index {
		*out = *l
		return nil
	}
	return c.store.GetLog(index, out)
}

func (c *logCache) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return fmt.Errorf("cannot store raft entries: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		if l.Index != c.next || c.next == 0 {
			// Not contiguous with what is cached: start over.
			c.clearLocked()
			c.first, c.next = l.Index, l.Index
		}
		n := uint64(len(c.ring))
		if c.next-c.first == n {
			c.evictLocked()
		}
		c.ring[l.Index%n] = l
		c.bytes += entryBytes(l)
		c.next = l.Index + 1
	}
	for c.bytes > c.max && c.next-c.first > 1 {
		c.evictLocked()
	}
	return nil
}

// evictLocked drops the oldest cached entry.
func (c *logCache) evictLocked() {
	slot := c.first % uint64(len(c.ring))
	if l := c.ring[slot]; l != nil {
		c.bytes -= entryBytes(l)
		c.ring[slot] = nil
	}
	c.first++
}

func (c *logCache) clearLocked() {
	clear(c.ring)
	c.bytes, c.first, c.next = 0, 0, 0
}

func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }
func (c *logCache) LastIndex() (uint64, error)  { return c.store.LastIndex() }

func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	c.clearLocked()
	c.mu.Unlock()
	return c.store.DeleteRange(lo, hi)
}
