package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/store"
)

// Key prefixes under the lake root.
const (
	Prefix        = "_catalog/"
	flushPrefix   = Prefix + "flush/"
	pendingPrefix = Prefix + "pending/"
	runsPrefix    = Prefix + "runs/"
	compactPrefix = Prefix + "compact/"
	snapPrefix    = Prefix + "snap/"
	typesPrefix   = Prefix + "types/"
	expirePrefix  = Prefix + "expire/"
	// RetentionPrefix holds the lake's retention policies (lake/retention
	// reads and writes them); Load skips them.
	RetentionPrefix = Prefix + "retention/"
)

// Catalog reads and writes the catalog of one lake. It keeps no state
// between calls beyond the optional on-disk cache of immutable files, so
// several processes may use the same lake at once. Safe for concurrent use.
type Catalog struct {
	s        store.Store
	cacheDir string // "" = no local cache
	log      *slog.Logger
}

// loadWorkers is how many catalog files Load downloads at once.
const loadWorkers = 16

// Option configures New.
type Option func(*Catalog)

// WithCacheDir keeps downloaded catalog files under dir (a subdirectory per
// lake), so the next Load fetches only what is new. Default: no cache.
func WithCacheDir(dir string) Option { return func(c *Catalog) { c.cacheDir = dir } }

// WithLogger sets the logger for problems Load skips over (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *Catalog) { c.log = l } }

// New returns the catalog of the lake in s.
func New(s store.Store, opts ...Option) *Catalog {
	c := &Catalog{s: s, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Store is the object store the catalog lives in.
func (c *Catalog) Store() store.Store { return c.s }

func partitionDir(prefix, topic string, partition int32) string {
	return prefix + lake.EscapeSegment(topic) + "/" + strconv.Itoa(int(partition)) + "/"
}

func rangeName(first, last int64) string { return fmt.Sprintf("%020d-%020d.json", first, last) }

// FlushKey is the catalog key of the entry of one flush.
func FlushKey(topic string, partition int32, first, last int64) string {
	return partitionDir(flushPrefix, topic, partition) + rangeName(first, last)
}

// IntentKey is the catalog key of a partition's pending flush.
func IntentKey(topic string, partition int32) string {
	return pendingPrefix + lake.EscapeSegment(topic) + "/" + strconv.Itoa(int(partition)) + ".json"
}

// RunKey is the catalog key of a run's state.
func RunKey(run string) string { return runsPrefix + lake.EscapeSegment(run) + ".json" }

// parseRange reads <first>-<last>.json from the end of a key.
func parseRange(key string) (first, last int64, ok bool) {
	name := key[strings.LastIndexByte(key, '/')+1:]
	name, found := strings.CutSuffix(name, ".json")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(name, "-")
	if !found {
		return 0, 0, false
	}
	f, err1 := strconv.ParseInt(a, 10, 64)
	l, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || f < 0 || l < f {
		return 0, 0, false
	}
	return f, l, true
}

func (e *Entry) validate() error {
	switch {
	case e.Topic == "":
		return errors.New("entry has no topic")
	case e.Partition < 0:
		return fmt.Errorf("entry has negative partition %d", e.Partition)
	case e.FirstOffset < 0 || e.LastOffset < e.FirstOffset:
		return fmt.Errorf("entry has bad offset range %d-%d", e.FirstOffset, e.LastOffset)
	}
	for i, o := range e.Objects {
		if o.Key == "" {
			return fmt.Errorf("entry object %d has no key", i)
		}
		if o.Kind == "" {
			return fmt.Errorf("entry object %s has no kind", o.Key)
		}
	}
	return nil
}

func (c *Catalog) putJSON(ctx context.Context, key string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return fmt.Errorf("cannot encode %s: %w", key, err)
	}
	b = append(b, '\n')
	return c.s.Put(ctx, key, bytes.NewReader(b), int64(len(b)))
}

// getJSON reads key into v; a missing key gives an error wrapping
// store.ErrNotFound.
func (c *Catalog) getJSON(ctx context.Context, key string, v any) error {
	rc, err := c.s.Get(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", key, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("catalog file %s in %s is corrupt: %w", key, c.s, err)
	}
	return nil
}

// Commit records one flush. It must be called only after every object of
// the entry is durable: from then on readers see the objects, and the
// sink's resume point (Last) moves past LastOffset. Committing the same
// range again replaces the entry (a redone flush writes the same keys).
func (c *Catalog) Commit(ctx context.Context, e Entry) error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("cannot commit flush of %s/%d: %w", e.Topic, e.Partition, err)
	}
	key := FlushKey(e.Topic, e.Partition, e.FirstOffset, e.LastOffset)
	if err := c.putJSON(ctx, key, e); err != nil {
		return fmt.Errorf("cannot commit flush %s/%d %d-%d: %w", e.Topic, e.Partition, e.FirstOffset, e.LastOffset, err)
	}
	return nil
}

// PutIntent records the offset range a flush of a partition is about to
// write, before its objects are uploaded.
func (c *Catalog) PutIntent(ctx context.Context, in Intent) error {
	if in.Topic == "" || in.Partition < 0 || in.FirstOffset < 0 || in.LastOffset < in.FirstOffset {
		return fmt.Errorf("cannot record intent %+v: topic, partition or offset range is not valid", in)
	}
	if err := c.putJSON(ctx, IntentKey(in.Topic, in.Partition), in); err != nil {
		return fmt.Errorf("cannot record flush intent of %s/%d: %w", in.Topic, in.Partition, err)
	}
	return nil
}

// Intent returns the pending flush of a partition, if one is recorded.
func (c *Catalog) Intent(ctx context.Context, topic string, partition int32) (Intent, bool, error) {
	var in Intent
	err := c.getJSON(ctx, IntentKey(topic, partition), &in)
	if errors.Is(err, store.ErrNotFound) {
		return Intent{}, false, nil
	}
	if err != nil {
		return Intent{}, false, fmt.Errorf("cannot read flush intent of %s/%d: %w", topic, partition, err)
	}
	return in, true, nil
}

// ClearIntent removes a partition's pending flush (after its Commit).
func (c *Catalog) ClearIntent(ctx context.Context, topic string, partition int32) error {
	if err := c.s.Delete(ctx, IntentKey(topic, partition)); err != nil {
		return fmt.Errorf("cannot clear flush intent of %s/%d: %w", topic, partition, err)
	}
	return nil
}

// Last returns the committed entry of a partition with the highest
// LastOffset; the sink resumes at its LastOffset+1. ok is false when the
// partition has no committed flush.
//
// It lists flush entries before snapshots: CompactEntries writes a snapshot
// before deleting the entries it merged, so an entry missing from the first
// listing is already in a snapshot the second listing sees.
func (c *Catalog) Last(ctx context.Context, topic string, partition int32) (Entry, bool, error) {
	for attempt := 0; ; attempt++ {
		e, ok, err := c.last(ctx, topic, partition)
		if errors.Is(err, store.ErrNotFound) && attempt < 5 {
			continue // compacted away between listing and reading: look again
		}
		if err != nil {
			return Entry{}, false, fmt.Errorf("cannot find the last flush of %s/%d: %w", topic, partition, err)
		}
		return e, ok, nil
	}
}

func (c *Catalog) last(ctx context.Context, topic string, partition int32) (Entry, bool, error) {
	flushes, err := c.s.List(ctx, partitionDir(flushPrefix, topic, partition))
	if err != nil {
		return Entry{}, false, err
	}
	snaps, err := c.s.List(ctx, partitionDir(snapPrefix, topic, partition))
	if err != nil {
		return Entry{}, false, err
	}
	var bestKey string
	var bestLast int64 = -1
	bestSnap := false
	for i, list := range [][]store.Object{flushes, snaps} {
		for _, o := range list {
			if _, l, ok := parseRange(o.Key); ok && l > bestLast {
				bestKey, bestLast, bestSnap = o.Key, l, i == 1
			}
		}
	}
	if bestKey == "" {
		return Entry{}, false, nil
	}
	if !bestSnap {
		var e Entry
		if err := c.getJSON(ctx, bestKey, &e); err != nil {
			return Entry{}, false, err
		}
		return e, true, nil
	}
	var sn snapFile
	if err := c.getJSON(ctx, bestKey, &sn); err != nil {
		return Entry{}, false, err
	}
	var best Entry
	found := false
	for _, e := range sn.Entries {
		if !found || e.LastOffset > best.LastOffset {
			best, found = e, true
		}
	}
	return best, found, nil
}

// MarkRun records a run's final state (replacing an earlier one).
func (c *Catalog) MarkRun(ctx context.Context, rs RunState) error {
	if rs.Run == "" {
		return errors.New("cannot mark a run without a name")
	}
	if rs.State == "" {
		return fmt.Errorf("cannot mark run %s: no state given", rs.Run)
	}
	if err := c.putJSON(ctx, RunKey(rs.Run), rs); err != nil {
		return fmt.Errorf("cannot mark run %s %s: %w", rs.Run, rs.State, err)
	}
	return nil
}

// Runs returns the recorded state of every marked run, by run name.
func (c *Catalog) Runs(ctx context.Context) (map[string]RunState, error) {
	objs, err := c.s.List(ctx, runsPrefix)
	if err != nil {
		return nil, fmt.Errorf("cannot list run states: %w", err)
	}
	out := make(map[string]RunState, len(objs))
	for _, o := range objs {
		var rs RunState
		err := c.getJSON(ctx, o.Key, &rs)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cannot read run states: %w", err)
		}
		out[rs.Run] = rs
	}
	return out, nil
}
