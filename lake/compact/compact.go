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
//  3. The catalog is loaded again to check the compaction applies: of two
//     compactors that raced over the same objects, the catalog applies the
//     older record only (see catalog.Snapshot.Skipped). A compaction that
//     lost deletes nothing but its own merged object.
//  4. The originals are deleted — at once, or with Config.DeleteDelay only
//     once the compaction is that old (a later run deletes them). A crash
//     here leaves hidden garbage; the next run deletes what recent
//     compaction records replaced. An original is never deleted while the
//     catalog shows it.
//
// A reader that loaded the catalog before step 2 may find an original gone
// in step 4; it fails with an error saying the object is missing and can
// simply be rerun. DeleteDelay gives such readers time to finish.
//
// Objects whose files disagree on a column's type (a field written as an
// integer by one flush and as a float by another) are never merged into
// one object: DuckDB would cast them to a common type and change what
// readers see. A batch is split where the types change.
//
// # Iceberg
//
// With Config.Iceberg, the lake's tables change with the catalog: after
// step 3 the merge is also committed to the measurement's Iceberg table as
// one rewrite snapshot that deletes the originals and adds the merged
// object (lake/iceberg's Rewrite), so a reader of the current snapshot
// never sees a row twice or misses one. Step 4 is left out: the table's
// earlier snapshots still name the originals (time travel), and lake
// expire deletes them once no retained snapshot does. Only objects the
// tables already hold are merged; an object whose flush is not in its
// table yet ends a run like a fresh one. A compactor that died between
// the catalog commit and the rewrite leaves the table on its older, still
// complete snapshot; every Run first rewrites the tables for such
// compactions (ReconcileCompactions), before planning.
package compact

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/schema"
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
	// Settle leaves alone objects flushed less than this long ago, so a
	// compactor running beside a sink does not rewrite the current window
	// again and again (default 0: every committed object qualifies).
	// Merged objects are never fresh.
	Settle time.Duration
	// DeleteDelay keeps the replaced objects until the compaction is this
	// old, for readers that loaded the catalog before it (default 0: they
	// are deleted right after the commit). A later Run deletes them.
	DeleteDelay time.Duration
	// Partitions, when set, restricts compaction to objects of the topic
	// partitions it accepts (a sink compacts only the partitions it owns).
	Partitions func(topic string, partition int32) bool
	// DryRun plans and reports without writing anything.
	DryRun bool
	// Logger receives one line per merged group; nil discards.
	Logger *slog.Logger
	// Engine options for the DuckDB engine that rewrites objects.
	Engine query.Options
	// Iceberg, when set, is the lake's Iceberg catalog: each merge also
	// rewrites its table (see the package doc), only files the tables
	// hold are merged, and replaced objects are left for lake expire.
	Iceberg *iceberg.Lake
	// BeforeCommit and AfterCommit, when set, run around the catalog
	// commit of each merge with the merged object's key; an error stops
	// Run there as a crash would. For crash tests.
	BeforeCommit, AfterCommit func(key string) error
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
	if c.Settle < 0 || c.DeleteDelay < 0 {
		return fmt.Errorf("settle %v and delete delay %v may not be negative", c.Settle, c.DeleteDelay)
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
	// TypeSplits counts batches split (or left alone) because their
	// objects disagree on a column's type.
	TypeSplits int
	// Lost counts compactions committed but not applied: another
	// compactor's older record replaced some of the same objects first.
	Lost int
	// Reconciled counts Iceberg rewrites of compactions committed to the
	// catalog by an earlier run that died before rewriting the table.
	Reconciled int
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
func Plan(snap *catalog.Snapshot, cfg Config) ([]Batch, error) { return plan(snap, cfg, nil) }

// plan is Plan; when held is not nil, only the objects it holds (the data
// files of the Iceberg tables) are merged: a merge of a file the table
// does not hold yet (its flush's Iceberg commit is still to come) would
// add its rows twice, once through the merged file and once through the
// flush.
func plan(snap *catalog.Snapshot, cfg Config, held map[string]bool) ([]Batch, error) {
	type groupKey struct {
		m, run, date, topic string
		part                int32
	}
	type item struct {
		o           catalog.Object
		first, last int64
		fresh       bool // committed less than Settle ago
	}
	groups := map[groupKey][]item{}
	var written map[string]time.Time
	if cfg.Settle > 0 {
		written = committedAt(snap)
	}
	now := time.Now()
	for _, o := range snap.Objects(catalog.Filter{Kind: lake.KindTelemetry, Run: cfg.Run}) {
		topic, p, f, l, err := ParseName(o.Key)
		if err != nil {
			return nil, err
		}
		if cfg.Partitions != nil && !cfg.Partitions(topic, p) {
			continue
		}
		k := groupKey{o.Measurement, o.Run, o.Date, topic, p}
		if cfg.Settle > 0 && now.Sub(written[o.Key]) < cfg.Settle || held != nil && !held[o.Key] {
			// Too fresh, or not in its Iceberg table yet: it ends the run
			// of objects before it (objects are merged only with their
			// neighbours in offsets).
			groups[k] = append(groups[k], item{o: o, first: f, last: l, fresh: true})
			continue
		}
		groups[k] = append(groups[k], item{o: o, first: f, last: l})
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
			if it.o.Bytes >= cfg.TargetSize || it.fresh {
				emit() // a big or fresh object ends the run of small ones before it
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

// committedAt maps the key of each object a flush wrote to the time the
// flush was committed. Merged objects are not in it: they are settled from
// the start, so the next merge of the group takes the last merged object
// along instead of leaving one merged object per pass.
func committedAt(snap *catalog.Snapshot) map[string]time.Time {
	out := map[string]time.Time{}
	for _, e := range snap.Entries {
		for _, o := range e.Objects {
			out[o.Key] = e.Written
		}
	}
	return out
}

// Run compacts the lake: it plans from the catalog, merges each batch with
// DuckDB, commits each merge and deletes the originals. It stops between
// batches when ctx ends; what it committed stays committed.
func Run(ctx context.Context, st store.Store, cat *catalog.Catalog, cache query.Fetcher, cfg Config) (Result, error) {
	var res Result
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		return res, err
	}
	var held map[string]bool
	if cfg.Iceberg != nil {
		if !cfg.DryRun {
			res.Reconciled, err = cfg.Iceberg.ReconcileCompactions(ctx, snap, func(key string) bool {
				topic, p, _, _, err := ParseName(key)
				return cfg.Partitions == nil || err == nil && cfg.Partitions(topic, p)
			})
			if err != nil {
				return res, fmt.Errorf("cannot rewrite the Iceberg tables for earlier compactions: %w", err)
			}
		}
		if held, err = cfg.Iceberg.DataFiles(ctx, tablesOf(snap, cfg.Run)); err != nil {
			return res, err
		}
	}
	if !cfg.DryRun {
		res.Cleaned = cleanup(ctx, st, snap, cfg, held)
	}
	batches, err := plan(snap, cfg, held)
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
		if err := ctx.Err(); err != nil {
			return res, err
		}
		b := &batches[i]
		if cfg.DryRun {
			var before, rows int64
			for _, o := range b.Objects {
				before += o.Bytes
				rows += o.Rows
			}
			cfg.Logger.Info("would merge", "objects", len(b.Objects), "into", b.Key(), "bytes", before)
			res.Groups++
			res.Replaced += len(b.Objects)
			res.BytesBefore += before
			res.Rows += rows
			continue
		}
		if err := mergeBatch(ctx, st, cat, cache, b, filepath.Join(tmp, fmt.Sprintf("merged-%d", i)), cfg, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// tablesOf names the Iceberg tables of the snapshot's telemetry (of run,
// when given).
func tablesOf(snap *catalog.Snapshot, run string) []string {
	var out []string
	for _, m := range snap.Measurements() {
		if run != "" && !slices.Contains(m.Runs, run) {
			continue
		}
		out = append(out, iceberg.TableName(m.Name))
	}
	return out
}

// mergeBatch fetches a batch's objects, splits it where the objects'
// column types differ, and merges each part of at least MinFiles objects.
func mergeBatch(ctx context.Context, st store.Store, cat *catalog.Catalog, cache query.Fetcher, b *Batch, tmpFile string, cfg Config, res *Result) error {
	eo := cfg.Engine
	eo.NoHivePartitioning = true
	eng, err := query.OpenObjects(ctx, b.Objects, cache, query.Filter{}, eo)
	if err != nil {
		return fmt.Errorf("cannot compact into %s: %w", b.Key(), err)
	}
	defer eng.Close()
	if len(eng.Views()) != 1 {
		return fmt.Errorf("cannot compact into %s: objects span %d measurements", b.Key(), len(eng.Views()))
	}
	v := eng.Views()[0]
	parts, err := splitByTypes(ctx, eng, v)
	if err != nil {
		return fmt.Errorf("cannot compact into %s: %w", b.Key(), err)
	}
	if len(parts) > 1 {
		res.TypeSplits++
		cfg.Logger.Warn("objects disagree on a column's type; merging only runs of objects that agree",
			"objects", len(b.Objects), "first", b.Objects[0].Key, "runs", len(parts))
	}
	for j, idx := range parts {
		if len(idx) < cfg.MinFiles {
			continue
		}
		sub := Batch{Topic: b.Topic, Part: b.Part}
		sv := query.View{Name: v.Name, Kind: v.Kind, Measurement: v.Measurement}
		for _, i := range idx {
			sub.Objects = append(sub.Objects, v.Objects[i])
			sv.Paths = append(sv.Paths, v.Paths[i])
		}
		sub.First, _ = offsetsOf(sub.Objects[0].Key)
		_, sub.Last = offsetsOf(sub.Objects[len(sub.Objects)-1].Key)
		start := time.Now()
		obj, applied, err := merge(ctx, st, cat, eng, &sub, sv, fmt.Sprintf("%s-%d.parquet", tmpFile, j), cfg)
		if err != nil {
			return err
		}
		if !applied {
			res.Lost++
			continue
		}
		var before int64
		for _, o := range sub.Objects {
			before += o.Bytes
		}
		res.Groups++
		res.Replaced += len(sub.Objects)
		res.BytesBefore += before
		res.BytesAfter += obj.Bytes
		res.Rows += obj.Rows
		cfg.Logger.Info("merged objects", "objects", len(sub.Objects), "into", obj.Key, "rows", obj.Rows,
			"bytes_before", before, "bytes_after", obj.Bytes, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func offsetsOf(key string) (first, last int64) {
	_, _, first, last, _ = ParseName(key)
	return first, last
}

// splitByTypes cuts a view's objects (in offset order) into runs whose
// files agree on the type of every column they share, as DuckDB reads
// each file on its own. It returns the objects' indexes, run by run.
func splitByTypes(ctx context.Context, eng *query.Engine, v query.View) ([][]int, error) {
	var out [][]int
	var cur []int
	types := map[string]string{} // column → type in the current run
	for i, p := range v.Paths {
		rows, err := eng.Query(ctx, "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet("+query.Literal(p)+", hive_partitioning=false))")
		if err != nil {
			return nil, fmt.Errorf("cannot read the schema of %s: %w", v.Objects[i].Key, err)
		}
		mine := map[string]string{}
		for rows.Next() {
			var name, typ string
			if err := rows.Scan(&name, &typ); err != nil {
				rows.Close()
				return nil, err
			}
			mine[name] = typ
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("cannot read the schema of %s: %w", v.Objects[i].Key, err)
		}
		for name, typ := range mine {
			if t, ok := types[name]; ok && t != typ {
				out = append(out, cur)
				cur, types = nil, map[string]string{}
				break
			}
		}
		cur = append(cur, i)
		for name, typ := range mine {
			types[name] = typ
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// newCompactionID sorts by time of creation and is unique across
// processes, like the ids catalog.CommitCompaction makes itself; the
// compactor makes its own to be able to withdraw a late record.
func newCompactionID(now time.Time) string {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%020d-%s", now.UnixNano(), hex.EncodeToString(r[:]))
}

// layout is the lake layout (lake/schema) of a view's objects, from the
// columns and types DuckDB reads in them and their tag columns: the merged
// object's column order and metadata come from it, and a column of a type
// no lake writer writes stops the merge.
func layout(ctx context.Context, eng *query.Engine, v query.View, src string) (*schema.Layout, error) {
	tags, err := query.TagColumns(ctx, eng, v)
	if err != nil {
		return nil, err
	}
	rows, err := eng.Query(ctx, "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM "+src+")")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []schema.Column
	fixed := 0
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		c := schema.Column{Name: name, Role: schema.Field}
		switch {
		case schema.Reserved(name):
			c.Role = schema.Fixed
			fixed++
		case tags[name]:
			c.Role = schema.Tag
		default:
			for t := schema.Float; t <= schema.String; t++ {
				if t.DuckDBType() == typ {
					c.Type = t
				}
			}
		}
		if c.DuckDBType() != typ {
			return nil, fmt.Errorf("column %s is %s, which is not the lake's type for it", name, typ)
		}
		if c.Role != schema.Fixed {
			cols = append(cols, c)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if fixed != 4 {
		return nil, fmt.Errorf("the objects lack some of the columns %s, %s, %s and %s", schema.Time, schema.Partition, schema.Offset, schema.TimeNS)
	}
	return schema.Telemetry(v.Measurement, cols)
}

// merge rewrites one batch as one object, commits the replacement and
// checks it applies. applied is false when another compactor's older
// record replaced some of the same objects first.
func merge(ctx context.Context, st store.Store, cat *catalog.Catalog, eng *query.Engine, b *Batch, v query.View, tmpFile string, cfg Config) (obj catalog.Object, applied bool, err error) {
	key := b.Key()
	src := query.ReadParquet(v.Paths, false)
	l, err := layout(ctx, eng, v, src)
	if err != nil {
		return obj, false, fmt.Errorf("cannot compact into %s: %w", key, err)
	}
	cols := l.Names()
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = query.Ident(c)
	}
	origin := schema.Origin{Topic: b.Topic, Partition: b.Part, First: b.First, Last: b.Last}
	kv := append([][2]string{{schema.MetaTags, strings.Join(l.Tags(), ",")}}, origin.Metadata()...)
	meta := make([]string, len(kv))
	for i, m := range kv {
		meta[i] = query.Literal(m[0]) + ": " + query.Literal(m[1])
	}
	copySQL := "COPY (SELECT " + strings.Join(sel, ", ") + " FROM " + src + " ORDER BY " + query.Ident(schema.Time) + ", " + query.Ident(schema.Offset) + ") TO " +
		query.Literal(tmpFile) + " (FORMAT parquet, COMPRESSION zstd, KV_METADATA {" + strings.Join(meta, ", ") + "})"
	if err := eng.Exec(ctx, copySQL); err != nil {
		return obj, false, fmt.Errorf("cannot compact into %s: %w", key, err)
	}
	// Check the merged file before it replaces anything.
	var n int64
	if err := eng.DB().QueryRowContext(ctx, "SELECT count(*) FROM read_parquet("+query.Literal(tmpFile)+")").Scan(&n); err != nil {
		return obj, false, fmt.Errorf("cannot read back the merged object for %s: %w", key, err)
	}
	obj = catalog.Object{Key: key, Kind: lake.KindTelemetry, Measurement: b.Objects[0].Measurement, Run: b.Objects[0].Run,
		Date: b.Objects[0].Date, Rows: n, Columns: cols}
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
	if n != want {
		return obj, false, fmt.Errorf("cannot compact into %s: merged %d rows, the catalog lists %d for the %d objects; nothing changed", key, n, want, len(b.Objects))
	}
	f, err := os.Open(tmpFile)
	if err != nil {
		return obj, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return obj, false, err
	}
	obj.Bytes = fi.Size()
	if err := st.Put(ctx, key, f, obj.Bytes); err != nil {
		return obj, false, fmt.Errorf("cannot upload merged object %s: %w", key, err)
	}
	if cfg.BeforeCommit != nil {
		if err := cfg.BeforeCommit(key); err != nil {
			return obj, false, err
		}
	}
	if cfg.Partitions != nil && !cfg.Partitions(b.Topic, b.Part) {
		// The partition moved to another compactor while this one merged;
		// the merged object stays an orphan nobody reads.
		cfg.Logger.Info("partition no longer ours; dropping this merge", "into", key)
		return obj, false, nil
	}
	replaced := make([]string, len(b.Objects))
	for i, o := range b.Objects {
		replaced[i] = o.Key
	}
	written := time.Now().UTC()
	cp := catalog.Compaction{ID: newCompactionID(written), Replaced: replaced, Objects: []catalog.Object{obj}, Written: written}
	if err := cat.CommitCompaction(ctx, cp); err != nil {
		return obj, false, err
	}
	if cfg.DeleteDelay > 0 && time.Since(written) >= cfg.DeleteDelay {
		// The record landed late: another compactor whose younger record
		// replaced some of the same objects may have found its own record
		// applied DeleteDelay after writing it, and deleted objects that
		// this older record would now show again. Withdraw it; the
		// originals stay authoritative and a later run tries again.
		cfg.Logger.Warn("compaction record landed late; withdrawing it", "into", key, "took", time.Since(written))
		if err := st.Delete(ctx, catalog.CompactionKey(cp.ID)); err != nil {
			return obj, false, fmt.Errorf("cannot withdraw the late compaction record %s: %w", cp.ID, err)
		}
		return obj, false, nil
	}
	if cfg.AfterCommit != nil {
		if err := cfg.AfterCommit(key); err != nil {
			return obj, false, err
		}
	}
	// Check the record applies, and delete only what the catalog no
	// longer shows.
	snap, err := cat.Load(ctx)
	if err != nil {
		return obj, false, fmt.Errorf("cannot check compaction %s: %w", key, err)
	}
	visible := visibleKeys(snap)
	if !slices.ContainsFunc(snap.Compactions, func(c catalog.Compaction) bool { return c.ID == cp.ID }) {
		cfg.Logger.Warn("another compactor replaced some of these objects first; dropping this merge", "into", key, "objects", len(replaced))
		if !visible[key] {
			if err := st.Delete(ctx, key); err != nil {
				cfg.Logger.Warn("cannot delete an unused merged object", "key", key, "err", err)
			}
		}
		return obj, false, nil
	}
	if cfg.Iceberg != nil {
		// The catalog shows the merged object now; the table must too,
		// in one snapshot. Earlier snapshots still name the originals,
		// so they stay in the lake until lake expire removes them. A
		// crash before this is repaired by the next run's
		// ReconcileCompactions.
		if err := cfg.Iceberg.Rewrite(ctx, cp); err != nil {
			return obj, true, fmt.Errorf("compaction into %s is in the catalog but not in the Iceberg table yet (the next compaction retries): %w", key, err)
		}
		return obj, true, nil
	}
	if cfg.DeleteDelay > 0 {
		return obj, true, nil // a later run deletes the originals
	}
	for _, k := range replaced {
		if visible[k] {
			continue
		}
		if err := st.Delete(ctx, k); err != nil {
			cfg.Logger.Warn("cannot delete a replaced object; the next compaction retries", "key", k, "err", err)
		}
	}
	return obj, true, nil
}

func visibleKeys(snap *catalog.Snapshot) map[string]bool {
	visible := map[string]bool{}
	for _, o := range snap.Objects(catalog.Filter{}) {
		visible[o.Key] = true
	}
	return visible
}

// cleanup deletes the replaced objects of recent compactions older than
// DeleteDelay (again, in case a compaction crashed between its commit and
// its deletes), and the merged objects of compactions that lost a race.
// With Iceberg, replaced objects stay: the tables' earlier snapshots name
// them, and lake expire deletes them with those snapshots.
func cleanup(ctx context.Context, st store.Store, snap *catalog.Snapshot, cfg Config, held map[string]bool) int {
	n := 0
	visible := visibleKeys(snap)
	del := func(k string) {
		if visible[k] || held[k] {
			return // never delete what a reader may be told to read
		}
		if _, err := st.Stat(ctx, k); err != nil {
			return
		}
		if err := st.Delete(ctx, k); err != nil {
			cfg.Logger.Warn("cannot delete a replaced object", "key", k, "err", err)
			return
		}
		n++
	}
	for _, cp := range snap.Compactions {
		if cfg.Iceberg != nil {
			break
		}
		age := time.Since(cp.Written)
		if age > cfg.CleanupAge || age < cfg.DeleteDelay {
			continue
		}
		if cfg.Partitions != nil && !slices.ContainsFunc(cp.Objects, func(o catalog.Object) bool {
			topic, p, _, _, err := ParseName(o.Key)
			return err == nil && cfg.Partitions(topic, p)
		}) {
			continue
		}
		for _, k := range cp.Replaced {
			del(k)
		}
	}
	for _, cp := range snap.Skipped {
		if age := time.Since(cp.Written); age > cfg.CleanupAge || age < cfg.DeleteDelay {
			continue
		}
		for _, o := range cp.Objects {
			del(o.Key)
		}
	}
	return n
}
