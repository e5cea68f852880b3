package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	lakeiceberg "github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/store"
)

// openLakeIceberg opens the Iceberg catalog of the lake in st (read-only
// for readers, which must not create it).
func openLakeIceberg(ctx context.Context, f *lakeFlags, st store.Store, catalogURL string, readOnly bool) (*lakeiceberg.Lake, error) {
	log, err := f.g.logger()
	if err != nil {
		return nil, err
	}
	return lakeiceberg.Open(ctx, lakeiceberg.Options{Catalog: catalogURL, Store: st, S3Endpoint: f.s3Endpoint, Region: f.s3Region, Logger: log, ReadOnly: readOnly})
}

// lakeHasIceberg reports whether the lake holds Iceberg table metadata
// (the sink ran with --iceberg-catalog).
func lakeHasIceberg(ctx context.Context, st store.Store) (bool, error) {
	objs, err := st.List(ctx, "_iceberg/")
	if err != nil {
		return false, fmt.Errorf("cannot look for Iceberg tables in %s: %w", st, err)
	}
	return len(objs) > 0, nil
}

func newLakeSnapshotsCmd(f *lakeFlags) *cobra.Command {
	var catalogURL string
	cmd := &cobra.Command{
		Use:   "snapshots MEASUREMENT",
		Short: "List the Iceberg snapshots of a measurement's table, to time travel to",
		Long: `List the snapshots of a measurement's Iceberg table (namespace telemetry),
oldest first: id, time, operation (append for a sink's flushes, replace
for a compaction) and the summary (simtel.ranges: the flushes an append
added; simtel.compaction: the compaction a replace applied). Give an id
or a time to 'simtel lake query --as-of'. Needs --iceberg-catalog, the
catalog 'simtel sink' commits to.`,
		Example: `  simtel lake snapshots cpu --iceberg-catalog sqlite:/var/lib/simtel/iceberg.db
  simtel lake snapshots cpu --iceberg-catalog sqlite:iceberg.db --format json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if catalogURL == "" {
				return errors.New("give --iceberg-catalog, the Iceberg catalog 'simtel sink' commits to (sqlite:PATH or postgres://...)")
			}
			ctx := cmd.Context()
			st, err := store.Open(ctx, f.lake, store.Options{S3Endpoint: f.s3Endpoint, Region: f.s3Region})
			if err != nil {
				return err
			}
			ice, err := openLakeIceberg(ctx, f, st, catalogURL, true)
			if err != nil {
				return err
			}
			defer ice.Close()
			name := lakeiceberg.TableName(args[0])
			names, err := ice.Tables(ctx)
			if err != nil {
				return err
			}
			if len(names) == 0 {
				return fmt.Errorf("%w %s: is it the catalog 'simtel sink --iceberg-catalog' commits to?", lakeiceberg.ErrNoTables, lakeiceberg.Redact(catalogURL))
			}
			if !slices.Contains(names, name) {
				return fmt.Errorf("no Iceberg table %s.%s; the tables are %s", lakeiceberg.Namespace, name, strings.Join(names, ", "))
			}
			snaps, err := ice.Snapshots(ctx, name)
			if err != nil {
				return err
			}
			t := lakeTable{header: []string{"snapshot_id", "time", "operation", "current", "summary"}, raw: snaps}
			for _, s := range snaps {
				cur := ""
				if s.Current {
					cur = "*"
				}
				t.rows = append(t.rows, []string{strconv.FormatInt(s.ID, 10), lakeTime(s.Time), s.Operation, cur, snapshotSummary(s.Summary)})
			}
			return f.print(cmd.OutOrStdout(), t)
		},
	}
	cmd.Flags().StringVar(&catalogURL, "iceberg-catalog", "", "the Iceberg catalog the sink commits to: sqlite:PATH or postgres://user:pass@host/db (read only)")
	return cmd
}

// snapshotSummary prints the parts of a snapshot summary a user picks a
// snapshot by: simtel's keys and the row counts.
func snapshotSummary(m map[string]string) string {
	var out []string
	for _, k := range []string{lakeiceberg.SummaryRanges, lakeiceberg.SummaryCompaction, "added-records", "deleted-records", "total-records", "added-data-files", "deleted-data-files"} {
		if v, ok := m[k]; ok && v != "" {
			out = append(out, k+"="+v)
		}
	}
	return strings.Join(out, " ")
}

// openAsOf opens a query engine over the telemetry tables as they were at
// asOf (a snapshot id or an RFC 3339 time), reading only the tables the
// statement names (all of them for --tables).
func openAsOf(ctx context.Context, f *lakeFlags, ls *lakeSession, catalogURL, asOf string, qf query.Filter, warn func(string)) (*query.Engine, error) {
	if catalogURL == "" {
		return nil, errors.New("--as-of reads the lake's Iceberg tables: give --iceberg-catalog, the catalog 'simtel sink' commits to (sqlite:PATH or postgres://...)")
	}
	ice, err := openLakeIceberg(ctx, f, ls.st, catalogURL, true)
	if err != nil {
		return nil, err
	}
	defer ice.Close()
	names, err := ice.Tables(ctx)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("--as-of: %w %s: is it the catalog 'simtel sink --iceberg-catalog' commits to?", lakeiceberg.ErrNoTables, lakeiceberg.Redact(catalogURL))
	}
	at, err := ice.ResolveAsOf(ctx, asOf)
	if err != nil {
		return nil, fmt.Errorf("--as-of: %w", err)
	}
	var files []query.TableFile
	for _, n := range names {
		m := lakeiceberg.Measurement(n)
		if qf.SQL != "" && !query.Mentions(qf.SQL, m) {
			continue
		}
		id, ok, err := ice.SnapshotAt(ctx, n, at)
		if err != nil {
			return nil, err
		}
		if !ok {
			warn(fmt.Sprintf("table %s.%s has no snapshot as of %s", lakeiceberg.Namespace, n, lakeTime(at.Time)))
			continue
		}
		fs, err := ice.FilesAt(ctx, n, id)
		if err != nil {
			return nil, err
		}
		for _, fl := range fs {
			files = append(files, query.TableFile{Measurement: m, Key: fl.Key, Rows: fl.Rows, Bytes: fl.Bytes})
		}
	}
	snap, err := ls.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return query.OpenFiles(ctx, snap, files, ls.cache, qf, ls.engine)
}
