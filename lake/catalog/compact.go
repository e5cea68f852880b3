package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/simtel/simtel/lake/store"
)

// CompactionKey is the catalog key of a compaction record.
func CompactionKey(id string) string { return compactPrefix + id + ".json" }

// newCompactionID sorts by time of creation and is unique across processes.
func newCompactionID(now time.Time) string {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%020d-%s", now.UnixNano(), hex.EncodeToString(r[:]))
}

// CommitCompaction records that cp.Objects replace the objects in
// cp.Replaced. Every new object must already be durable: it is checked with
// Stat, and a missing one refuses the commit. After it returns, Load hides
// the replaced keys; deleting their objects is the caller's business (once
// no reader may still hold an older snapshot). An empty cp.ID is replaced
// by a fresh one that sorts by time.
func (c *Catalog) CommitCompaction(ctx context.Context, cp Compaction) error {
	if len(cp.Replaced) == 0 {
		return errors.New("cannot commit a compaction that replaces nothing")
	}
	if len(cp.Objects) == 0 {
		return errors.New("cannot commit a compaction without new objects: it would hide data")
	}
	newKeys := map[string]bool{}
	for i, o := range cp.Objects {
		if o.Key == "" || o.Kind == "" {
			return fmt.Errorf("cannot commit compaction: new object %d has no key or kind", i)
		}
		newKeys[o.Key] = true
		if _, err := c.s.Stat(ctx, o.Key); err != nil {
			return fmt.Errorf("cannot commit compaction: new object %s is not in the lake (upload it first): %w", o.Key, err)
		}
	}
	for _, k := range cp.Replaced {
		if newKeys[k] {
			return fmt.Errorf("cannot commit compaction: %s is both replaced and new", k)
		}
	}
	now := time.Now().UTC()
	if cp.ID == "" {
		cp.ID = newCompactionID(now)
	} else if strings.ContainsAny(cp.ID, "/\\") || strings.HasPrefix(cp.ID, ".") {
		return fmt.Errorf("cannot commit compaction: id %q may not contain slashes or start with a dot", cp.ID)
	}
	if cp.Written.IsZero() {
		cp.Written = now
	}
	if err := c.putJSON(ctx, CompactionKey(cp.ID), cp); err != nil {
		return fmt.Errorf("cannot commit compaction %s: %w", cp.ID, err)
	}
	return nil
}

// CompactStats tells what CompactEntries did.
type CompactStats struct {
	Partitions int // partitions whose catalog files were merged
	Merged     int // catalog files merged (and then deleted)
	Entries    int // flush entries now held in snapshots written
}

// CompactEntries merges the catalog files of every partition that has at
// least two into one snapshot; see CompactEntriesWith.
func (c *Catalog) CompactEntries(ctx context.Context) error {
	_, err := c.CompactEntriesWith(ctx, 2)
	return err
}

// CompactEntriesWith merges, per partition, the flush entries and earlier
// snapshots into one snapshot object (_catalog/snap/<topic>/<partition>/
// <first>-<last>.json), then deletes what it merged. Partitions with fewer
// than minFiles catalog files are left alone (minFiles < 2 means 2).
//
// Readers never see a gap or a duplicate: the snapshot is durable before
// any merged file is deleted, readers list flush entries before snapshots,
// Load deduplicates entries by topic, partition and first offset, and a
// reader that finds a listed file gone starts over. Flushes committed while
// this runs are not in the listing, so they are neither merged nor deleted.
func (c *Catalog) CompactEntriesWith(ctx context.Context, minFiles int) (CompactStats, error) {
	if minFiles < 2 {
		minFiles = 2
	}
	var st CompactStats
	flushes, err := c.s.List(ctx, flushPrefix)
	if err != nil {
		return st, fmt.Errorf("cannot compact the catalog: %w", err)
	}
	snaps, err := c.s.List(ctx, snapPrefix)
	if err != nil {
		return st, fmt.Errorf("cannot compact the catalog: %w", err)
	}
	// Group by <topic>/<partition>/, the path between the prefix and the name.
	type group struct{ flushes, snaps []string }
	groups := map[string]*group{}
	add := func(prefix, key string, snap bool) {
		rel := strings.TrimPrefix(key, prefix)
		i := strings.LastIndexByte(rel, '/')
		if i < 0 {
			return
		}
		if _, _, ok := parseRange(key); !ok {
			return
		}
		g := groups[rel[:i+1]]
		if g == nil {
			g = &group{}
			groups[rel[:i+1]] = g
		}
		if snap {
			g.snaps = append(g.snaps, key)
		} else {
			g.flushes = append(g.flushes, key)
		}
	}
	for _, o := range flushes {
		add(flushPrefix, o.Key, false)
	}
	for _, o := range snaps {
		add(snapPrefix, o.Key, true)
	}
	dirs := make([]string, 0, len(groups))
	for d := range groups {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		g := groups[dir]
		if len(g.flushes)+len(g.snaps) < minFiles {
			continue
		}
		n, err := c.compactPartition(ctx, dir, g.flushes, g.snaps)
		if err != nil {
			return st, fmt.Errorf("cannot compact the catalog entries under %s: %w", dir, err)
		}
		st.Partitions++
		st.Merged += len(g.flushes) + len(g.snaps)
		st.Entries += n
	}
	return st, nil
}

func (c *Catalog) compactPartition(ctx context.Context, dir string, flushKeys, snapKeys []string) (int, error) {
	b := newBuilder()
	for _, k := range flushKeys {
		var e Entry
		if err := c.getJSON(ctx, k, &e); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return 0, fmt.Errorf("%s vanished (another compaction is running?): %w", k, err)
			}
			return 0, err
		}
		if err := e.validate(); err != nil {
			return 0, fmt.Errorf("catalog file %s is not valid (move it away to compact this partition): %w", k, err)
		}
		b.addEntry(e)
	}
	for _, k := range snapKeys {
		var sn snapFile
		if err := c.getJSON(ctx, k, &sn); err != nil {
			return 0, err
		}
		for _, e := range sn.Entries {
			b.addEntry(e)
		}
	}
	snap := b.build()
	if len(snap.Entries) == 0 {
		return 0, nil
	}
	first, last := snap.Entries[0].FirstOffset, snap.Entries[0].LastOffset
	for _, e := range snap.Entries {
		first, last = min(first, e.FirstOffset), max(last, e.LastOffset)
	}
	sf := snapFile{Topic: snap.Entries[0].Topic, Partition: snap.Entries[0].Partition, Entries: snap.Entries}
	key := snapPrefix + dir + rangeName(first, last)
	if err := c.putJSON(ctx, key, sf); err != nil {
		return 0, err
	}
	// The snapshot is durable: the merged files are now redundant.
	for _, k := range append(flushKeys, snapKeys...) {
		if k == key {
			continue
		}
		if err := c.s.Delete(ctx, k); err != nil {
			return 0, err
		}
	}
	return len(sf.Entries), nil
}
