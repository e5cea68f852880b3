package iceberg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/schema"
)

// Summary keys of the snapshots this package commits.
const (
	// SummaryRanges lists the flushes a snapshot adds, as
	// topic/partition:first-last, comma-separated.
	SummaryRanges = "simtel.ranges"
	// SummaryRejected lists files left out, as key: reason; ...
	SummaryRejected = "simtel.rejected"
)

// commitAttempts bounds the rebuilds of one table's commit that lose to
// concurrent commits; the caller (the sink) retries the whole call.
const commitAttempts = 20

// Types gives the fixed types of a measurement's fields (field → the
// catalog's type name: catalog.TypeFloat, …). The object's other columns
// that are not fixed columns are tags.
type Types func(measurement string) map[string]string

// part is a topic partition.
type part struct {
	topic     string
	partition int32
}

func (p part) String() string { return p.topic + "/" + strconv.Itoa(int(p.partition)) }

// marks is a table's watermark per topic partition: the highest last
// offset of a flush the table holds.
type marks map[part]int64

// file is one object to add to a table, with the flush it comes from.
type file struct {
	obj         catalog.Object
	from        part
	first, last int64
}

// Commit adds the telemetry and dead-letter objects of committed catalog
// entries to their tables: one snapshot per table, objects of entries at
// or below the table's watermark skipped (see the package doc). Entries
// of one partition must come in offset order. visible, when not nil,
// leaves out objects it rejects (replaced by a compaction).
func (l *Lake) Commit(ctx context.Context, entries []catalog.Entry, types Types, visible func(key string) bool) error {
	byTable := map[string][]file{}
	for _, e := range entries {
		for _, o := range e.Objects {
			if visible != nil && !visible(o.Key) {
				continue
			}
			var name string
			switch o.Kind {
			case lake.KindTelemetry:
				name = TableName(o.Measurement)
			case lake.KindDeadLetter:
				name = DLQ
			case lake.KindRaw:
				name = rawKey(e.Topic)
			default:
				continue
			}
			byTable[name] = append(byTable[name], file{obj: o, from: part{e.Topic, e.Partition}, first: e.FirstOffset, last: e.LastOffset})
		}
	}
	names := make([]string, 0, len(byTable))
	for n := range byTable {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		if err := l.commitTable(ctx, n, byTable[n], types); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// commitTable adds files to one table in one snapshot, rebuilding it on
// the new current snapshot when another commit wins the race.
func (l *Lake) commitTable(ctx context.Context, name string, files []file, types Types) error {
	// Dead letters and raw records have fixed columns: no schema evolution.
	dlq := name == DLQ || isRaw(name)
	for attempt := 0; ; attempt++ {
		c, err := l.table(ctx, name, dlq, attempt > 0)
		if err != nil {
			return err
		}
		m := l.watermarks(name, c)
		var todo []file
		for _, f := range files {
			if w, ok := m[f.from]; !ok || f.last > w {
				todo = append(todo, f)
			}
		}
		if len(todo) == 0 {
			return nil
		}
		tbl, err := l.commitFiles(ctx, c.tbl, todo, types, dlq)
		if err != nil {
			// Whatever happened (the commit may even have succeeded),
			// the next attempt reads the table and its watermarks anew.
			l.mu.Lock()
			delete(l.tables, name)
			l.mu.Unlock()
		}
		if conflict(err) && attempt+1 < commitAttempts {
			// Another sink committed first: read the table again (new
			// watermarks, schema) and rebuild.
			l.log.Debug("iceberg commit lost a race; rebuilding", "table", name, "attempt", attempt+1, "err", err)
			if err := raceBackoff(ctx, attempt); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("iceberg: cannot commit %d files to %s: %w", len(todo), strings.Join(identOf(name), "."), err)
		}
		l.mu.Lock()
		nc := &cached{tbl: tbl, snap: -1}
		if s := tbl.CurrentSnapshot(); s != nil {
			nc.snap, nc.marks = s.SnapshotID, m.with(todo)
		}
		l.tables[name] = nc
		l.mu.Unlock()
		return nil
	}
}

// conflict reports whether err is a commit that lost to another: the
// catalog's compare-and-swap failed, or one of the commit's requirements
// (snapshot, schema) no longer holds.
func conflict(err error) bool {
	return err != nil && (errors.Is(err, table.ErrCommitFailed) || strings.Contains(strings.ToLower(err.Error()), "requirement failed"))
}

// with is m plus the ranges of files.
func (m marks) with(files []file) marks {
	out := make(marks, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	for _, f := range files {
		if w, ok := out[f.from]; !ok || f.last > w {
			out[f.from] = f.last
		}
	}
	return out
}

// watermarks reads the table's marks from the summaries of its current
// snapshot and ancestors, starting from the cached ones where the chain
// reaches the snapshot they were computed at.
func (l *Lake) watermarks(name string, c *cached) marks {
	cur := c.tbl.CurrentSnapshot()
	if cur == nil {
		return marks{}
	}
	if cur.SnapshotID == c.snap && c.marks != nil {
		return c.marks
	}
	var chain []*table.Snapshot
	base := marks{}
	for s := cur; s != nil; {
		if s.SnapshotID == c.snap && c.marks != nil {
			base = c.marks
			break
		}
		chain = append(chain, s)
		if s.ParentSnapshotID == nil {
			break
		}
		s = c.tbl.SnapshotByID(*s.ParentSnapshotID)
	}
	out := make(marks, len(base))
	for k, v := range base {
		out[k] = v
	}
	for _, s := range chain {
		if s.Summary == nil {
			continue
		}
		for _, r := range strings.Split(s.Summary.Properties[SummaryRanges], ",") {
			p, last, ok := parseRange(r)
			if !ok {
				continue
			}
			if w, seen := out[p]; !seen || last > w {
				out[p] = last
			}
		}
	}
	// Expired snapshots took their ranges with them; lake expire keeps
	// the marks they held in a table property.
	for p, last := range parseMarks(c.tbl.Properties()[PropWatermarks]) {
		if w, seen := out[p]; !seen || last > w {
			out[p] = last
		}
	}
	l.mu.Lock()
	if cc := l.tables[name]; cc != nil && cc.tbl == c.tbl {
		cc.snap, cc.marks = cur.SnapshotID, out
	}
	l.mu.Unlock()
	return out
}

// parseRange parses topic/partition:first-last.
func parseRange(s string) (part, int64, bool) {
	tp, rng, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return part{}, 0, false
	}
	i := strings.LastIndexByte(tp, '/')
	if i <= 0 {
		return part{}, 0, false
	}
	p, err := strconv.ParseInt(tp[i+1:], 10, 32)
	if err != nil {
		return part{}, 0, false
	}
	_, lastS, ok := strings.Cut(rng, "-")
	if !ok {
		return part{}, 0, false
	}
	last, err := strconv.ParseInt(lastS, 10, 64)
	if err != nil {
		return part{}, 0, false
	}
	return part{tp[:i], int32(p)}, last, true
}

// commitFiles adds files to tbl in one transaction: new columns first,
// then the data files, the ranges in the snapshot summary. The commit
// asserts tbl's current snapshot, so it fails with table.ErrCommitFailed
// when another commit came first.
func (l *Lake) commitFiles(ctx context.Context, tbl *table.Table, files []file, types Types, dlq bool) (*table.Table, error) {
	tx := tbl.NewTransaction()
	var rejected []string
	keep := files[:0:0]
	if !dlq {
		var added bool
		var err error
		keep, rejected, added, err = evolve(tx, tbl.Schema(), files, types)
		if err != nil {
			return nil, err
		}
		if added {
			staged, err := tx.StagedTable()
			if err != nil {
				return nil, err
			}
			mapping, err := nameMapping(staged.Schema())
			if err != nil {
				return nil, err
			}
			if err := tx.SetProperties(iceberg.Properties{table.DefaultNameMappingKey: mapping}); err != nil {
				return nil, err
			}
		}
	} else {
		keep = files
	}
	if p := missingMaintenance(tbl.Properties()); p != nil {
		if err := tx.SetProperties(p); err != nil {
			return nil, err
		}
	}
	spec := tbl.Spec()
	dfs := make([]iceberg.DataFile, 0, len(keep))
	for _, f := range keep {
		df, err := l.dataFile(spec, f, dlq)
		if err != nil {
			return nil, err
		}
		dfs = append(dfs, df)
	}
	props := iceberg.Properties{SummaryRanges: ranges(files)}
	if len(rejected) > 0 {
		props[SummaryRejected] = strings.Join(rejected, "; ")
		l.log.Error("files left out of an Iceberg table: a column has another type there", "table", tbl.Identifier(), "files", rejected)
	}
	if len(dfs) > 0 {
		// The watermarks already exclude files the table holds; the
		// duplicate check would read every manifest.
		if err := tx.AddDataFiles(ctx, dfs, props, table.WithoutDuplicateCheck(), table.WithoutAutoNameMapping()); err != nil {
			return nil, err
		}
	} else if err := tx.SetProperties(iceberg.Properties{"simtel.last-rejected": props[SummaryRejected]}); err != nil {
		// Every file was rejected: there is no snapshot to carry the
		// ranges, and they would be retried forever.
		return nil, err
	}
	return tx.Commit(ctx)
}

// ranges lists the distinct flush ranges of files for a summary.
func ranges(files []file) string {
	var out []string
	for _, f := range files {
		r := fmt.Sprintf("%s:%d-%d", f.from, f.first, f.last)
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return strings.Join(out, ",")
}

// evolve adds the tags and fields of files the schema lacks (optional, so
// older files read null) and returns the files to add; a file with a
// column whose type the table has otherwise is rejected, with the reason.
func evolve(tx *table.Transaction, sch *iceberg.Schema, files []file, types Types) (keep []file, rejected []string, added bool, err error) {
	have := map[string]iceberg.Type{}
	for _, f := range sch.Fields() {
		have[f.Name] = f.Type
	}
	us := tx.UpdateSchema(true, false)
	for _, f := range files {
		ft := types(f.obj.Measurement)
		var bad string
		var adds [][2]string
		for _, col := range f.obj.Columns {
			if schema.Reserved(col) || col == "run" {
				continue
			}
			t, typeName := columnType(ft[col])
			if cur, ok := have[col]; ok {
				if !cur.Equals(t) {
					bad = fmt.Sprintf("%s: column %s is %s in the table, %s in the file", f.obj.Key, col, cur, t)
					break
				}
				continue
			}
			adds = append(adds, [2]string{col, typeName})
		}
		if bad != "" {
			rejected = append(rejected, bad)
			continue
		}
		for _, a := range adds {
			t, _ := columnType(ft[a[0]])
			if _, ok := have[a[0]]; ok {
				continue
			}
			have[a[0]] = t
			us.AddColumn([]string{a[0]}, t, "", false, nil)
			added = true
		}
		keep = append(keep, f)
	}
	if added {
		if err := us.Commit(); err != nil {
			return nil, nil, false, fmt.Errorf("cannot add columns: %w", err)
		}
	}
	return keep, rejected, added, nil
}

// columnType is the Iceberg type of a tag ("") or of a field of a catalog
// type. Iceberg has no unsigned integers: unsigned fields are longs.
func columnType(catalogType string) (iceberg.Type, string) {
	switch catalogType {
	case catalog.TypeFloat:
		return iceberg.PrimitiveTypes.Float64, catalogType
	case catalog.TypeInteger, catalog.TypeUnsigned:
		return iceberg.PrimitiveTypes.Int64, catalogType
	case catalog.TypeBoolean:
		return iceberg.PrimitiveTypes.Bool, catalogType
	}
	return iceberg.PrimitiveTypes.String, "string"
}

// dataFile describes a lake object as a data file of a table with spec.
func (l *Lake) dataFile(spec iceberg.PartitionSpec, f file, dlq bool) (iceberg.DataFile, error) {
	day, err := time.Parse("2006-01-02", f.obj.Date)
	if err != nil {
		day = f.obj.MinTime
	}
	days := iceberg.Date(day.UTC().Unix() / 86400)
	values := map[int]any{}
	logical := map[int]string{}
	for _, pf := range spec.Fields() {
		switch pf.Transform.(type) {
		case iceberg.DayTransform:
			values[pf.FieldID] = days
			logical[pf.FieldID] = "date"
		case iceberg.IdentityTransform:
			if !dlq && f.obj.Run != "" {
				values[pf.FieldID] = f.obj.Run
			} else {
				values[pf.FieldID] = nil
			}
		}
	}
	b, err := iceberg.NewDataFileBuilder(spec, iceberg.EntryContentData, l.path(f.obj.Key), iceberg.ParquetFile,
		values, logical, nil, f.obj.Rows, f.obj.Bytes)
	if err != nil {
		return nil, fmt.Errorf("data file %s: %w", f.obj.Key, err)
	}
	return b.Build(), nil
}

// nameMapping maps the schema's column names to their field ids, for data
// files written without ids.
func nameMapping(sch *iceberg.Schema) (string, error) {
	b, err := json.Marshal(sch.NameMapping())
	return string(b), err
}

// Reconcile adds to the tables what the catalog holds for the given
// partitions above each table's watermark: the flushes a sink committed to
// the catalog but not (yet) to Iceberg before it died or lost the
// partition. Call it before consuming the partitions.
func (l *Lake) Reconcile(ctx context.Context, snap *catalog.Snapshot, topic string, partitions []int32) error {
	var entries []catalog.Entry
	for _, e := range snap.Entries {
		if e.Topic == topic && slices.Contains(partitions, e.Partition) {
			entries = append(entries, e)
		}
	}
	if len(entries) == 0 {
		return nil
	}
	visible := map[string]bool{}
	for _, o := range snap.Objects(catalog.Filter{Topic: topic}) {
		visible[o.Key] = true
	}
	types := func(m string) map[string]string { return snap.FieldTypes[m] }
	return l.Commit(ctx, entries, types, func(k string) bool { return visible[k] })
}

// raceBackoff waits before another try of a commit that lost a race to
// another writer of the table: a random while that grows with attempt, so
// that writers which collided do not collide again.
func raceBackoff(ctx context.Context, attempt int) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(rand.IntN(50*(attempt+1))) * time.Millisecond):
		return nil
	}
}
