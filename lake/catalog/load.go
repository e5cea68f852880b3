package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/simtel/simtel/lake/store"
)

// snapFile is a catalog snapshot: many flush entries of one partition merged
// into one object by CompactEntries.
type snapFile struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Entries   []Entry `json:"entries"`
}

// Compaction records that Objects replace the objects named in Replaced
// (the same rows, in fewer files). It is written after every new object is
// durable; from then on readers see the new objects instead of the old ones,
// which may be deleted once no reader uses them.
type Compaction struct {
	ID       string    `json:"id"` // set by CommitCompaction when empty
	Replaced []string  `json:"replaced"`
	Objects  []Object  `json:"objects"`
	Written  time.Time `json:"written"`
}

// loadAttempts bounds how often Load starts over when a listed file
// vanished before it could be read (CompactEntries ran meanwhile).
const loadAttempts = 5

// Load reads the whole catalog: every committed flush (deduplicated), the
// compactions applied, and the run states. It lists only _catalog/ and,
// with WithCacheDir, downloads each immutable catalog file once.
func (c *Catalog) Load(ctx context.Context) (*Snapshot, error) {
	var lastErr error
	for attempt := 0; attempt < loadAttempts; attempt++ {
		snap, err := c.load(ctx)
		if err == nil {
			return snap, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("cannot load the catalog of %s: %w", c.s, err)
		}
		lastErr = err
	}
	return nil, fmt.Errorf("cannot load the catalog of %s: it kept changing while being read: %w", c.s, lastErr)
}

func (c *Catalog) load(ctx context.Context) (*Snapshot, error) {
	listed, err := c.s.List(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	type file struct {
		obj  store.Object
		data []byte
		gone bool
	}
	var files []*file
	for _, o := range listed {
		if strings.HasPrefix(o.Key, pendingPrefix) || strings.HasPrefix(o.Key, RetentionPrefix) || !strings.HasSuffix(o.Key, ".json") {
			continue
		}
		files = append(files, &file{obj: o})
	}
	fetchAll := func(files []*file) (vanished []*file, err error) {
		var mu sync.Mutex
		eg, ectx := errgroup.WithContext(ctx)
		eg.SetLimit(loadWorkers)
		for _, f := range files {
			eg.Go(func() error {
				b, err := c.fetch(ectx, f.obj)
				if errors.Is(err, store.ErrNotFound) {
					mu.Lock()
					f.gone = true
					vanished = append(vanished, f)
					mu.Unlock()
					return nil
				}
				f.data = b
				return err
			})
		}
		return vanished, eg.Wait()
	}
	vanished, err := fetchAll(files)
	if err != nil {
		return nil, err
	}
	// A flush entry or snapshot that vanished between listing and reading
	// was merged by CompactEntries into a snapshot written before the
	// deletion, which the listing may have missed: list the snapshots of
	// those partitions again and read the new ones (which may vanish in
	// turn if another compaction merged them already).
	seen := map[string]bool{}
	for _, f := range files {
		seen[f.obj.Key] = true
	}
	for round := 0; len(vanished) > 0; round++ {
		if round == loadAttempts {
			return nil, fmt.Errorf("%s: %w", vanished[0].obj.Key, store.ErrNotFound)
		}
		dirs := map[string]bool{}
		for _, f := range vanished {
			if d, ok := partitionOf(f.obj.Key); ok {
				dirs[d] = true
			} else {
				return nil, fmt.Errorf("%s: %w", f.obj.Key, store.ErrNotFound)
			}
		}
		var more []*file
		for d := range dirs {
			objs, err := c.s.List(ctx, snapPrefix+d)
			if err != nil {
				return nil, err
			}
			for _, o := range objs {
				if !seen[o.Key] {
					seen[o.Key] = true
					f := &file{obj: o}
					more = append(more, f)
					files = append(files, f)
				}
			}
		}
		if vanished, err = fetchAll(more); err != nil {
			return nil, err
		}
	}
	c.pruneCache(seen)

	b := newBuilder()
	for _, f := range files {
		if f.gone {
			continue // vanished, and merged into a snapshot read instead
		}
		err := b.decode(f.obj.Key, f.data)
		if err != nil {
			msg := fmt.Sprintf("skipped corrupt catalog file %s: %v", f.obj.Key, err)
			b.problems = append(b.problems, msg)
			c.log.Warn("skipped corrupt catalog file", "key", f.obj.Key, "lake", c.s.String(), "err", err)
		}
	}
	return b.build(), nil
}

// partitionOf returns "<topic>/<partition>/" of a flush or snapshot key.
func partitionOf(key string) (string, bool) {
	var rel string
	switch {
	case strings.HasPrefix(key, flushPrefix):
		rel = strings.TrimPrefix(key, flushPrefix)
	case strings.HasPrefix(key, snapPrefix):
		rel = strings.TrimPrefix(key, snapPrefix)
	default:
		return "", false
	}
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", false
	}
	return rel[:i+1], true
}

// cacheRoot is the local directory caching this lake's catalog files, or ""
// when there is none (no cache dir, or the lake is a local directory).
func (c *Catalog) cacheRoot() string {
	if c.cacheDir == "" {
		return ""
	}
	if _, local := store.LocalPath(c.s, Prefix+"x"); local {
		return ""
	}
	sum := sha256.Sum256([]byte(c.s.String()))
	return filepath.Join(c.cacheDir, "catalog-"+hex.EncodeToString(sum[:8]))
}

// cacheable reports whether a catalog file never changes once written with
// a given size and time. Run states and expirations (marked deleted) are
// rewritten in place: always fetch.
func cacheable(key string) bool {
	return !strings.HasPrefix(key, runsPrefix) && !strings.HasPrefix(key, expirePrefix)
}

// fetch returns the bytes of a listed catalog file, from the local cache
// when it holds the same size and modification time.
func (c *Catalog) fetch(ctx context.Context, o store.Object) ([]byte, error) {
	root := c.cacheRoot()
	if root == "" || !cacheable(o.Key) {
		return c.get(ctx, o.Key)
	}
	p := filepath.Join(root, filepath.FromSlash(o.Key))
	if fi, err := os.Stat(p); err == nil && fi.Size() == o.Size && fi.ModTime().Unix() == o.ModTime.Unix() {
		if b, err := os.ReadFile(p); err == nil {
			return b, nil
		}
	}
	b, err := c.get(ctx, o.Key)
	if err != nil {
		return nil, err
	}
	// The cache is an optimisation: failing to write it is not an error.
	if err := writeCacheFile(p, b, o.ModTime); err != nil {
		c.log.Debug("cannot cache catalog file", "path", p, "err", err)
	}
	return b, nil
}

func (c *Catalog) get(ctx context.Context, key string) ([]byte, error) {
	rc, err := c.s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", key, err)
	}
	return b, nil
}

func writeCacheFile(p string, b []byte, mtime time.Time) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(f, bytes.NewReader(b))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chtimes(f.Name(), mtime, mtime)
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// pruneCache removes cached files of catalog objects that are gone from the
// lake (merged by CompactEntries), so the cache does not grow forever.
func (c *Catalog) pruneCache(keep map[string]bool) {
	root := c.cacheRoot()
	if root == "" {
		return
	}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil
		}
		if !keep[filepath.ToSlash(rel)] {
			os.Remove(p)
		}
		return nil
	})
}

// builder assembles a Snapshot from catalog files in any order.
type builder struct {
	entries     map[entryID]Entry
	compactions []Compaction
	expirations []Expiration
	runStates   map[string]RunState
	fieldTypes  map[string]map[string]string
	problems    []string
}

type entryID struct {
	topic     string
	partition int32
	first     int64
}

func newBuilder() *builder {
	return &builder{entries: map[entryID]Entry{}, runStates: map[string]RunState{}, fieldTypes: map[string]map[string]string{}}
}

// decode adds one catalog file to the snapshot being built.
func (b *builder) decode(key string, data []byte) error {
	var err error
	switch {
	case strings.HasPrefix(key, flushPrefix):
		var e Entry
		if err = json.Unmarshal(data, &e); err == nil {
			err = e.validate()
		}
		if err == nil {
			b.addEntry(e)
		}
	case strings.HasPrefix(key, snapPrefix):
		var sn snapFile
		if err = json.Unmarshal(data, &sn); err == nil {
			for _, e := range sn.Entries {
				if verr := e.validate(); verr != nil {
					err = verr
					continue
				}
				b.addEntry(e)
			}
		}
	case strings.HasPrefix(key, compactPrefix):
		var cp Compaction
		if err = json.Unmarshal(data, &cp); err == nil {
			b.compactions = append(b.compactions, cp)
		}
	case strings.HasPrefix(key, expirePrefix):
		var ex Expiration
		if err = json.Unmarshal(data, &ex); err == nil {
			if ex.ID == "" {
				err = errors.New("expiration has no id")
			} else {
				b.expirations = append(b.expirations, ex)
			}
		}
	case strings.HasPrefix(key, typesPrefix):
		var ft FieldType
		if err = json.Unmarshal(data, &ft); err == nil && ft.Field != "" && ft.Type != "" {
			m := b.fieldTypes[ft.Measurement]
			if m == nil {
				m = map[string]string{}
				b.fieldTypes[ft.Measurement] = m
			}
			m[ft.Field] = ft.Type
		}
	case strings.HasPrefix(key, runsPrefix):
		var rs RunState
		if err = json.Unmarshal(data, &rs); err == nil && rs.Run != "" {
			b.runStates[rs.Run] = rs
		}
	}
	return err
}

// addEntry keeps one entry per topic, partition and first offset: the same
// flush can be seen both as an entry and inside a snapshot while
// CompactEntries runs. The newer write wins.
func (b *builder) addEntry(e Entry) {
	id := entryID{e.Topic, e.Partition, e.FirstOffset}
	if old, ok := b.entries[id]; ok && old.Written.After(e.Written) {
		return
	}
	b.entries[id] = e
}

func (b *builder) build() *Snapshot {
	s := &Snapshot{RunStates: b.runStates, FieldTypes: b.fieldTypes, Problems: b.problems}
	for _, e := range b.entries {
		s.Entries = append(s.Entries, e)
	}
	sort.Slice(s.Entries, func(i, j int) bool {
		a, c := s.Entries[i], s.Entries[j]
		if a.Topic != c.Topic {
			return a.Topic < c.Topic
		}
		if a.Partition != c.Partition {
			return a.Partition < c.Partition
		}
		return a.FirstOffset < c.FirstOffset
	})
	visible := map[string]*visibleObject{}
	for _, e := range s.Entries {
		for _, o := range e.Objects {
			if v, ok := visible[o.Key]; ok {
				v.addTopic(e.Topic)
				continue
			}
			visible[o.Key] = &visibleObject{Object: o, topics: []string{e.Topic}}
		}
	}
	// Apply compactions and expirations oldest first (their ids sort by
	// time), so a compaction of compacted objects inherits the topics of
	// the originals. Two compactors that raced over the same objects each
	// recorded a replacement; only the older one is applied: a compaction
	// that replaces an object an applied one already replaced — or an
	// expiration already hid — is skipped whole, so no row is visible
	// twice and no expired row comes back.
	sort.Slice(b.compactions, func(i, j int) bool { return b.compactions[i].ID < b.compactions[j].ID })
	sort.Slice(b.expirations, func(i, j int) bool { return b.expirations[i].ID < b.expirations[j].ID })
	replaced := map[string]bool{}
	mergedInto := map[string][]string{} // replaced key → the objects of the applied compaction
	// expire hides k and, since a retention pass may have loaded the
	// catalog before a compaction merged k, what k was merged into.
	var expire func(ex *Expiration, k string)
	expire = func(ex *Expiration, k string) {
		if into, ok := mergedInto[k]; ok {
			delete(mergedInto, k)
			for _, n := range into {
				expire(ex, n)
			}
		}
		if _, ok := visible[k]; ok && !replaced[k] {
			ex.Hidden = append(ex.Hidden, k)
		}
		replaced[k] = true
	}
	ci, ei := 0, 0
	for ci < len(b.compactions) || ei < len(b.expirations) {
		if ei < len(b.expirations) && (ci == len(b.compactions) || b.expirations[ei].ID < b.compactions[ci].ID) {
			ex := b.expirations[ei]
			ei++
			ex.Hidden = nil
			for _, k := range ex.Keys {
				expire(&ex, k)
			}
			s.Expirations = append(s.Expirations, ex)
			continue
		}
		cp := b.compactions[ci]
		ci++
		if slices.ContainsFunc(cp.Replaced, func(k string) bool { return replaced[k] }) {
			s.Skipped = append(s.Skipped, cp)
			continue
		}
		s.Compactions = append(s.Compactions, cp)
		var topics []string
		newKeys := make([]string, len(cp.Objects))
		for i, o := range cp.Objects {
			newKeys[i] = o.Key
		}
		for _, k := range cp.Replaced {
			if v, ok := visible[k]; ok {
				for _, t := range v.topics {
					topics = appendUnique(topics, t)
				}
			}
			replaced[k] = true
			mergedInto[k] = newKeys
		}
		for _, o := range cp.Objects {
			if _, ok := visible[o.Key]; !ok {
				visible[o.Key] = &visibleObject{Object: o, topics: append([]string(nil), topics...)}
			}
		}
	}
	for k, v := range visible {
		if !replaced[k] {
			s.objects = append(s.objects, *v)
		}
	}
	sort.Slice(s.objects, func(i, j int) bool { return s.objects[i].Key < s.objects[j].Key })
	return s
}

type visibleObject struct {
	Object
	topics []string // the topics whose records the object holds
}

func (v *visibleObject) addTopic(t string) { v.topics = appendUnique(v.topics, t) }

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
