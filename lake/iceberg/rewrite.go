package iceberg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	icat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
)

// SummaryCompaction names, in the summary of a rewrite snapshot, the id of
// the compaction record of simtel's catalog that the snapshot applies.
const SummaryCompaction = "simtel.compaction"

// ErrNotHeld is returned by Rewrite when a compaction replaces files the
// table does not hold (all of them, or some): the rewrite would lose or
// duplicate rows, so it is not made.
var ErrNotHeld = errors.New("the table does not hold the files the compaction replaces")

// DataFiles returns the lake keys of the data files in the current
// snapshots of the named tables of Namespace. A table that does not exist
// holds none.
func (l *Lake) DataFiles(ctx context.Context, names []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, n := range names {
		tbl, err := l.loadTable(ctx, Ident(n))
		if errors.Is(err, icat.ErrNoSuchTable) {
			continue
		}
		if err != nil {
			return nil, err
		}
		files, err := l.currentFiles(ctx, tbl, n)
		if err != nil {
			return nil, err
		}
		for k := range files {
			out[k] = true
		}
	}
	return out, nil
}

// currentFiles maps the lake key of every data file of tbl's current
// snapshot to its manifest entry.
func (l *Lake) currentFiles(ctx context.Context, tbl *table.Table, name string) (map[string]iceberg.DataFile, error) {
	out := map[string]iceberg.DataFile{}
	if tbl.CurrentSnapshot() == nil {
		return out, nil
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("iceberg: cannot list the data files of %s.%s: %w", Namespace, name, err)
	}
	for _, t := range tasks {
		out[l.key(t.File.FilePath())] = t.File
	}
	return out, nil
}

// key is the lake key of a data file's path (the path itself when it is
// not under the lake's root).
func (l *Lake) key(path string) string {
	if k, ok := strings.CutPrefix(path, l.root+"/"); ok {
		return k
	}
	return path
}

// compactionTable is the table of a compaction's merged objects.
func compactionTable(cp catalog.Compaction) (string, error) {
	if len(cp.Objects) == 0 || len(cp.Replaced) == 0 {
		return "", fmt.Errorf("iceberg: compaction %s replaces %d objects by %d", cp.ID, len(cp.Replaced), len(cp.Objects))
	}
	m := cp.Objects[0].Measurement
	for _, o := range cp.Objects {
		if o.Kind != lake.KindTelemetry || o.Measurement != m {
			return "", fmt.Errorf("iceberg: compaction %s: object %s is not telemetry of %s", cp.ID, o.Key, m)
		}
	}
	return TableName(m), nil
}

// Rewrite applies a compaction of simtel's catalog to its table: one
// snapshot (operation replace) deletes the replaced files and adds the
// merged ones, so a reader of the current snapshot sees each row once,
// before and after. A compaction the table already shows is left alone;
// one whose replaced files the table does not all hold is refused with
// ErrNotHeld. A commit that loses to another is rebuilt on the new
// snapshot. The replaced files stay in the lake: earlier snapshots refer
// to them (time travel) until they are expired.
func (l *Lake) Rewrite(ctx context.Context, cp catalog.Compaction) error {
	name, err := compactionTable(cp)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		tbl, err := l.Load(ctx, name)
		if err != nil {
			return err
		}
		files, err := l.currentFiles(ctx, tbl, name)
		if err != nil {
			return err
		}
		err = l.rewrite(ctx, tbl, files, cp)
		if err != nil || attempt > 0 {
			// The cached table is behind (a rewrite committed) or in doubt.
			l.mu.Lock()
			delete(l.tables, name)
			l.mu.Unlock()
		}
		if conflict(err) && attempt+1 < commitAttempts {
			l.log.Debug("iceberg rewrite lost a race; rebuilding", "table", name, "compaction", cp.ID, "attempt", attempt+1, "err", err)
			if err := raceBackoff(ctx, attempt); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("iceberg: cannot rewrite %s.%s for compaction %s: %w", Namespace, name, cp.ID, err)
		}
		l.mu.Lock()
		delete(l.tables, name)
		l.mu.Unlock()
		return nil
	}
}

// rewrite commits cp to tbl, whose current data files are files.
func (l *Lake) rewrite(ctx context.Context, tbl *table.Table, files map[string]iceberg.DataFile, cp catalog.Compaction) error {
	var present []iceberg.DataFile
	var missing []string
	for _, k := range cp.Replaced {
		if df, ok := files[k]; ok {
			present = append(present, df)
		} else {
			missing = append(missing, k)
		}
	}
	merged := 0
	for _, o := range cp.Objects {
		if _, ok := files[o.Key]; ok {
			merged++
		}
	}
	if merged == len(cp.Objects) && len(present) == 0 {
		return nil // applied before
	}
	if merged > 0 || len(missing) > 0 {
		return fmt.Errorf("%w: it holds %d of the %d replaced and %d of the %d merged files (first missing: %s)",
			ErrNotHeld, len(present), len(cp.Replaced), merged, len(cp.Objects), first(missing))
	}
	spec := tbl.Spec()
	tx := tbl.NewTransaction()
	rw := tx.NewRewrite(iceberg.Properties{
		SummaryCompaction: cp.ID,
		"simtel.replaced": strconv.Itoa(len(present)),
	})
	for _, df := range present {
		rw.DeleteFile(df)
	}
	for _, o := range cp.Objects {
		df, err := l.dataFile(spec, file{obj: o}, false)
		if err != nil {
			return err
		}
		rw.AddDataFile(df)
	}
	if err := rw.Commit(ctx); err != nil {
		return err
	}
	_, err := tx.Commit(ctx)
	return err
}

func first(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return s[0]
}

// ReconcileCompactions rewrites the tables for the compactions of simtel's
// catalog they do not show yet: those a compactor committed to the catalog
// but not to Iceberg before it died. Only compactions whose merged objects
// the catalog still shows are considered (a later compaction of a merged
// object was only planned once the table held it), in the catalog's order,
// and only those whose merged objects own accepts (nil: all). A compaction
// whose replaced files the table holds none of (it predates the table) is
// left alone; one it holds only some of is logged and left alone. It
// returns the number of rewrites made.
func (l *Lake) ReconcileCompactions(ctx context.Context, snap *catalog.Snapshot, own func(key string) bool) (int, error) {
	visible := map[string]bool{}
	for _, o := range snap.Objects(catalog.Filter{Kind: lake.KindTelemetry}) {
		visible[o.Key] = true
	}
	byTable := map[string][]catalog.Compaction{}
	for _, cp := range snap.Compactions {
		name, err := compactionTable(cp)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(cp.Objects, func(o catalog.Object) bool { return visible[o.Key] && (own == nil || own(o.Key)) }) {
			continue
		}
		byTable[name] = append(byTable[name], cp)
	}
	names := make([]string, 0, len(byTable))
	for n := range byTable {
		names = append(names, n)
	}
	sort.Strings(names)
	done := 0
	var errs []error
	for _, n := range names {
		held, err := l.DataFiles(ctx, []string{n})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, cp := range byTable[n] {
			if slices.ContainsFunc(cp.Objects, func(o catalog.Object) bool { return held[o.Key] }) {
				continue // applied
			}
			nheld := 0
			for _, k := range cp.Replaced {
				if held[k] {
					nheld++
				}
			}
			if nheld == 0 {
				continue // compacted before the table had these files
			}
			if nheld < len(cp.Replaced) {
				l.log.Warn("a compaction replaces files the Iceberg table holds only some of; not rewriting the table for it",
					"table", n, "compaction", cp.ID, "held", nheld, "replaced", len(cp.Replaced))
				continue
			}
			if err := l.Rewrite(ctx, cp); err != nil {
				errs = append(errs, err)
				break // later compactions of this table may build on this one
			}
			for _, k := range cp.Replaced {
				delete(held, k)
			}
			for _, o := range cp.Objects {
				held[o.Key] = true
			}
			done++
			l.log.Info("iceberg table rewritten for a compaction committed before", "table", n, "compaction", cp.ID)
		}
	}
	return done, errors.Join(errs...)
}
