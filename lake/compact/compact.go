// Package compact merges small telemetry objects of the lake into larger
// ones. The sink writes one object per flush, measurement, run and day; a
// long run with frequent flushes leaves thousands of small files, which
// every query must open. Compaction rewrites a run of such objects — same
// measurement, run, date, topic and partition, consecutive offset ranges —
// as one object sorted by (time, offset), then records the replacement in
// the catalog, then deletes the originals.
//
// Crash safety, step by step:
//
//  1. The merged object is written under the key of its offset range
//     (first offset of the first object, last offset of the last). Until
//     step 2 completes, no reader knows it: the originals stay
//     authoritative. A crash here leaves an orphan that the next
//     compaction of the same objects overwrites.
//  2. catalog.CommitCompaction records that the merged object replaces the
//     originals; it refuses unless the merged object is durable. From now
//     on readers see the merged object only.
//  3. The originals are deleted. A crash here leaves hidden garbage; the
//     next run deletes what recent compaction records replaced.
//
// A reader that loaded the catalog before step 2 may find an original gone
// in step 3; it fails with an error saying the object is missing and can
// simply be rerun.
package compact

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/store"
)

// Config tunes a compaction.
type Config struct {
	// Run compacts only this run's objects; empty: every run.
	Run string
	// MinFiles is the fewest objects merged into one (default 4): fewer
	// small files are left alone.
	MinFiles int
	// TargetSize bounds the merged object's input size in bytes (default
	// 128 MiB). Objects at least this big are never merged.
	TargetSize int64
	// CleanupAge: replaced objects of compactions younger than this are
	// deleted again on every run, to finish a compaction that crashed
	// between commit and delete (default 24h).
	CleanupAge time.Duration
	// DryRun plans and reports without writing anything.
	DryRun bool
	// Logger receives one line per merged group; nil discards.
	Logger *slog.Logger
	// Engine options for the DuckDB engine that rewrites objects.
	Engine query.Options
}

// Validate checks the configuration and fills defaults.
func (c *Config) Validate() error {
	if c.MinFiles == 0 {
		c.MinFiles = 4
	}
	if c.MinFiles < 2 {
		return fmt.Errorf("min files %d: merging fewer than 2 objects gains nothing", c.MinFiles)
	}
	if c.TargetSize == 0 {
		c.TargetSize = 128 << 20
	}
	if c.TargetSize < 0 {
		return fmt.Errorf("target size %d is negative", c.TargetSize)
	}
	if c.CleanupAge == 0 {
		c.CleanupAge = 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Result tells what a compaction did (or would do, in a dry run).
type Result struct {
	Groups      int   // merged objects written
	Replaced    int   // objects they replace
	BytesBefore int64 // size of the replaced objects
	BytesAfter  int64 // size of the merged objects
	Rows        int64 // rows rewritten
	Cleaned     int   // leftovers of earlier compactions deleted
}

// Batch is a set of objects to merge into one.
type Batch struct {
	Objects []catalog.Object // sorted by offset
	Topic   string
	Part    int32
	First   int64
	Last    int64
}

// Key is the merged object's key.
func (b *Batch) Key() string {
	o := b.Objects[0]
	return lake.TelemetryKey(o.Measurement, o.Run, o.Date, b.Topic, b.Part, b.First, b.Last)
}

// ParseName reads topic, partition and offset range from an object key's
// file name (<topic>-<partition>-<first>-<last>.parquet; the topic may
// itself contain dashes).
func ParseName(key string) (topic string, partition int32, first, last int64, err error) {
	name := key[strings.LastIndexByte(key, '/')+1:]
	base, ok := strings.CutSuffix(name, ".parquet")
	parts := strings.Split(base, "-")
	if !ok || len(parts) < 4 {
		return "", 0, 0, 0, fmt.Errorf("object name %q is not <topic>-<partition>-<first>-<last>.parquet", name)
	}
	n := len(parts)
	p, err1 := strconv.ParseInt(parts[n-3], 10, 32)
	f, err2 := strconv.ParseInt(parts[n-2], 10, 64)
	l, err3 := strconv.ParseInt(parts[n-1], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || f > l {
		return "", 0, 0, 0, fmt.Errorf("object name %q has no valid partition and offset range", name)
	}
	return query.Unescape(strings.Join(parts[:n-3], "-")), int32(p), f, l, nil
}

// Plan chooses the batches to merge from a catalog snapshot.
func Plan(snap *catalog.Snapshot, cfg Config) ([]Batch, error) {
	type groupKey struct {
		m, run, date, topic string
		part                int32
	}
	type item struct {
		o           catalog.Object
		first, last int64
	}
	groups := map[groupKey][]item{}
	for _, o := range snap.Objects(catalog.Filter{Kind: lake.KindTelemetry, Run: cfg.Run}) {
		topic, p, f, l, err := ParseName(o.Key)
		if err != nil {
			return nil, err
		}
		k := groupKey{o.Measurement, o.Run, o.Date, topic, p}
		groups[k] = append(groups[k], item{o, f, l})
	}
	keys := slices.SortedFunc(func(yield func(groupKey) bool) {
		for k := range groups {
			if !yield(k) {
				return
			}
		}
	}, func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.m, b.m), cmp.Compare(a.run, b.run), cmp.Compare(a.date, b.date), cmp.Compare(a.topic, b.topic), cmp.Compare(a.part, b.part))
	})
	var out []Batch
	for _, k := range keys {
		items := groups[k]
		slices.SortFunc(items, func(a, b item) int { return cmp.Compare(a.first, b.first) })
		var cur []item
		var size int64
		emit := func() {
			if len(cur) >= cfg.MinFiles {
				b := Batch{Topic: k.topic, Part: k.part, First: cur[0].first, Last: cur[len(cur)-1].last}
				for _, it := range cur {
					b.Objects = append(b.Objects, it.o)
				}
				out = append(out, b)
			}
			cur, size = nil, 0
		}
		for i, it := range items {
			if i > 0 && it.first <= items[i-1].last {
				return nil, fmt.Errorf("objects %s and %s overlap in offsets: the catalog is inconsistent, not compacting", items[i-1].o.Key, it.o.Key)
			}
			if it.o.Bytes >= cfg.TargetSize {
				emit() // a big object ends the run of small ones before it
				continue
			}
			if size+it.o.Bytes > cfg.TargetSize {
				emit()
			}
			cur = append(cur, it)
			size += it.o.Bytes
		}
		emit()
	}
	return out, nil
}

// Run compacts the lake: it plans from the catalog, merges each batch with
// DuckDB, commits each merge and deletes the originals.
func Run(ctx context.Context, st store.Store, cat *catalog.Catalog, cache query.Fetcher, cfg Config) (Result, error) {
	var res Result
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		return res, err
	}
	if !cfg.DryRun {
		res.Cleaned = cleanup(ctx, st, snap, cfg)
	}
	batches, err := Plan(snap, cfg)
	if err != nil {
		return res, err
	}
	if len(batches) == 0 {
		return res, nil
	}
	tmp, err := os.MkdirTemp("", "simtel-compact-")
	if err != nil {
		return res, fmt.Errorf("cannot create a temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	for i := range batches {
		b := &batches[i]
		var before, rows int64
		for _, o := range b.Objects {
			before += o.Bytes
			rows += o.Rows
		}
		if cfg.DryRun {
			cfg.Logger.Info("would merge", "objects", len(b.Objects), "into", b.Key(), "bytes", before)
			res.Groups++
			res.Replaced += len(b.Objects)
			res.BytesBefore += before
			res.Rows += rows
			continue
		}
		obj, err := merge(ctx, st, cat, cache, b, filepath.Join(tmp, fmt.Sprintf("merged-%d.parquet", i)), cfg)
		if err != nil {
			return res, err
		}
		res.Groups++
		res.Replaced += len(b.Objects)
		res.BytesBefore += before
		res.BytesAfter += obj.Bytes
		res.Rows += obj.Rows
		cfg.Logger.Info("merged objects", "objects", len(b.Objects), "into", obj.Key, "rows", obj.Rows, "bytes_before", before, "bytes_after", obj.Bytes)
	}
	return res, nil
}

// merge rewrites one batch as one object and commits the replacement.
func merge(ctx context.Context, st store.Store, cat *catalog.Catalog, cache query.Fetcher, b *Batch, tmpFile string, cfg Config) (catalog.Object, error) {
	key := b.Key()
	eo := cfg.Engine
	eo.NoHivePartitioning = true
	eng, err := query.OpenObjects(ctx, b.Objects, cache, query.Filter{}, eo)
	if err != nil {
		return catalog.Object{}, fmt.Errorf("cannot compact into %s: %w", key, err)
	}
	defer eng.Close()
	if len(eng.Views()) != 1 {
		return catalog.Object{}, fmt.Errorf("cannot compact into %s: objects span %d measurements", key, len(eng.Views()))
	}
	v := eng.Views()[0]
	tags, err := query.TagColumns(ctx, eng, v)
	if err != nil {
		return catalog.Object{}, fmt.Errorf("cannot compact into %s: %w", key, err)
	}
	cols := make([]string, 0, len(v.Columns))
	for _, c := range v.Columns {
		cols = append(cols, c.Name)
	}
	slices.Sort(cols) // deterministic, like the sink's objects
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = query.Ident(c)
	}
	tagList := slices.Sorted(func(yield func(string) bool) {
		for t := range tags {
			if !yield(t) {
				return
			}
		}
	})
	copySQL := "COPY (SELECT " + strings.Join(sel, ", ") + " FROM " + query.Ident(v.Name) + " ORDER BY time, _offset) TO " +
		query.Literal(tmpFile) + " (FORMAT parquet, COMPRESSION zstd, KV_METADATA {'simtel.tags': " + query.Literal(strings.Join(tagList, ",")) +
		", 'simtel.topic': " + query.Literal(b.Topic) + ", 'simtel.partition': " + query.Literal(strconv.Itoa(int(b.Part))) +
		", 'simtel.first_offset': " + query.Literal(strconv.FormatInt(b.First, 10)) + ", 'simtel.last_offset': " + query.Literal(strconv.FormatInt(b.Last, 10)) + "})"
	if err := eng.Exec(ctx, copySQL); err != nil {
		return catalog.Object{}, fmt.Errorf("cannot compact into %s: %w", key, err)
	}
	// Check the merged file before it replaces anything.
	var rows int64
	if err := eng.DB().QueryRowContext(ctx, "SELECT count(*) FROM read_parquet("+query.Literal(tmpFile)+")").Scan(&rows); err != nil {
		return catalog.Object{}, fmt.Errorf("cannot read back the merged object for %s: %w", key, err)
	}
	obj := catalog.Object{Key: key, Kind: lake.KindTelemetry, Measurement: b.Objects[0].Measurement, Run: b.Objects[0].Run,
		Date: b.Objects[0].Date, Rows: rows, Columns: cols}
	var want int64
	for i, o := range b.Objects {
		want += o.Rows
		if i == 0 || o.MinTime.Before(obj.MinTime) {
			obj.MinTime = o.MinTime
		}
		if i == 0 || o.MaxTime.After(obj.MaxTime) {
			obj.MaxTime = o.MaxTime
		}
	}
	if rows != want {
		return catalog.Object{}, fmt.Errorf("cannot compact into %s: merged %d rows, the catalog lists %d for the %d objects; nothing changed", key, rows, want, len(b.Objects))
	}
	f, err := os.Open(tmpFile)
	if err != nil {
		return catalog.Object{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return catalog.Object{}, err
	}
	obj.Bytes = fi.Size()
	if err := st.Put(ctx, key, f, obj.Bytes); err != nil {
		return catalog.Object{}, fmt.Errorf("cannot upload merged object %s: %w", key, err)
	}
	replaced := make([]string, len(b.Objects))
	for i, o := range b.Objects {
		replaced[i] = o.Key
	}
	if err := cat.CommitCompaction(ctx, catalog.Compaction{Replaced: replaced, Objects: []catalog.Object{obj}}); err != nil {
		return catalog.Object{}, err
	}
	for _, k := range replaced {
		if err := st.Delete(ctx, k); err != nil {
			cfg.Logger.Warn("cannot delete a replaced object; the next compaction retries", "key", k, "err", err)
		}
	}
	return obj, nil
}

// cleanup deletes the replaced objects of recent compactions again, in
// case a compaction crashed between its commit and its deletes.
func cleanup(ctx context.Context, st store.Store, snap *catalog.Snapshot, cfg Config) int {
	n := 0
	visible := map[string]bool{}
	for _, o := range snap.Objects(catalog.Filter{}) {
		visible[o.Key] = true
	}
	for _, cp := range snap.Compactions {
		if time.Since(cp.Written) > cfg.CleanupAge {
			continue
		}
		for _, k := range cp.Replaced {
			if visible[k] {
				continue // never delete what a reader may be told to read
			}
			if _, err := st.Stat(ctx, k); err != nil {
				continue
			}
			if err := st.Delete(ctx, k); err != nil {
				cfg.Logger.Warn("cannot delete a replaced object", "key", k, "err", err)
				continue
			}
			n++
		}
	}
	return n
}
