package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	lakeiceberg "github.com/simtel/simtel/lake/iceberg"
)

func newLakeExpireCmd(f *lakeFlags) *cobra.Command {
	var (
		catalogURL, olderThan string
		o                     lakeiceberg.ExpireOptions
	)
	cmd := &cobra.Command{
		Use:   "expire --older-than 7d",
		Short: "Expire old snapshots of the Iceberg tables and delete the files only they used",
		Long: `Expire the snapshots of every Iceberg table (namespaces telemetry and raw)
committed longer ago than --older-than, except the current one and the
--retain-last newest, and delete the files no retained snapshot references:
the manifest lists and manifests of the expired snapshots, the metadata
files beyond the --metadata-keep newest, and files under a table's metadata
directory that nothing references (a commit that failed) once older than
--orphan-age. Data files are deleted only when no retained snapshot
references them and simtel's catalog does not name them: the lake's
objects are deleted by retention and compaction, after their grace.

Time travel (simtel lake query --as-of) reaches back only to the oldest
retained snapshot. --dry-run lists what would go, with bytes, and changes
nothing. A line per table goes to stderr as it is done.`,
		Example: `  simtel lake expire --iceberg-catalog sqlite:simtel-data/iceberg.db --older-than 7d --dry-run
  simtel lake expire --iceberg-catalog sqlite:simtel-data/iceberg.db --older-than 7d --retain-last 100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if catalogURL == "" {
				return errors.New("give --iceberg-catalog, the catalog the sink commits to (sqlite:PATH or postgres://...)")
			}
			if olderThan == "" {
				return errors.New("give --older-than, e.g. 7d: snapshots older than that are expired")
			}
			age, err := parseAge(olderThan)
			if err != nil {
				return fmt.Errorf("--older-than: %w", err)
			}
			o.OlderThan = age
			if o.RetainLast < 1 {
				return fmt.Errorf("--retain-last %d: the current snapshot always stays, give at least 1", o.RetainLast)
			}
			if o.OrphanAge <= 0 {
				return fmt.Errorf("--orphan-age %v: give a positive age (a commit in flight has written files the catalog does not name yet)", o.OrphanAge)
			}
			if o.MetadataKeep == 0 {
				o.MetadataKeep = -1 // ExpireOptions: the newest only
			}
			ctx := cmd.Context()
			snap, st, _, err := f.load(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ice, err := openLakeIceberg(ctx, f, st, catalogURL, o.DryRun)
			if err != nil {
				return err
			}
			defer ice.Close()
			o.Protected = lakeiceberg.CatalogKeys(snap)
			stderr := cmd.ErrOrStderr()
			start := time.Now()
			o.Progress = func(done, total int, te lakeiceberg.TableExpiry) {
				fmt.Fprintf(stderr, "expire: %d/%d %s: %d snapshots expired, %d retained, %d files, %s (%s)\n",
					done, total, te.Table, te.Snapshots, te.Retained, len(te.Files), f.fmtBytes(te.Bytes), time.Since(start).Round(time.Millisecond))
			}
			res, expireErr := ice.Expire(ctx, o)
			t := lakeTable{header: []string{"table", "kind", "file", "bytes"}, raw: res.Tables}
			for _, te := range res.Tables {
				for _, fl := range te.Files {
					t.rows = append(t.rows, []string{te.Table, fl.Kind, fl.Path, strconv.FormatInt(fl.Bytes, 10)})
				}
			}
			if res.Tables == nil {
				t.raw = []lakeiceberg.TableExpiry{}
			}
			if o.DryRun || f.format != "table" {
				if err := f.print(cmd.OutOrStdout(), t); err != nil {
					return err
				}
			}
			verb := "expired"
			if o.DryRun {
				verb = "would expire"
			}
			fmt.Fprintf(stderr, "%s %d snapshots of %d tables, deleting %d files (%s)\n", verb, res.Snapshots, len(res.Tables), res.Files, f.fmtBytes(res.Bytes))
			return expireErr
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&catalogURL, "iceberg-catalog", "", "the Iceberg catalog the sink commits to: sqlite:PATH or postgres://user:pass@host/db")
	fl.StringVar(&olderThan, "older-than", "", "expire snapshots committed longer ago than this (7d, 2w, 36h, 30m)")
	fl.IntVar(&o.RetainLast, "retain-last", 1, "keep at least this many of each table's newest snapshots, whatever their age")
	fl.IntVar(&o.MetadataKeep, "metadata-keep", lakeiceberg.DefaultMetadataKeep, "keep this many earlier metadata files of each table besides the current one (at least the newest, the catalog's previous one, always stays)")
	fl.DurationVar(&o.OrphanAge, "orphan-age", lakeiceberg.DefaultOrphanAge, "delete unreferenced files under a table's metadata directory only once older than this")
	fl.BoolVar(&o.DryRun, "dry-run", false, "list what would be deleted, with bytes; change nothing")
	return cmd
}

var ageRE = regexp.MustCompile(`^([0-9]+)([dw])$`)

// parseAge reads an age: N days or weeks (7d, 2w) or a Go duration (36h,
// 0s: every snapshot but the retained newest).
func parseAge(s string) (time.Duration, error) {
	if m := ageRE.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		days := map[string]int{"d": 1, "w": 7}[m[2]]
		if err != nil || n > 100*365/days {
			return 0, fmt.Errorf("%q is too long", s)
		}
		return time.Duration(n*days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not an age: want days or weeks (7d, 2w) or a duration (36h, 30m)", s)
	}
	return d, nil
}
