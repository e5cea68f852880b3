package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/internal/bytesize"
	"github.com/simtel/simtel/lake/compact"
	"github.com/simtel/simtel/lake/query"
)

func newLakeCompactCmd(f *lakeFlags) *cobra.Command {
	var (
		cfg            compact.Config
		target         string
		icebergCatalog string
	)
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Merge small telemetry objects into larger ones",
		Long: `Merge small telemetry objects: objects of the same measurement, run, day,
topic and partition with consecutive offset ranges are rewritten as one
object (sorted by time and offset, zstd) of up to --target-size, when at
least --min-files of them qualify. The merge is recorded in the catalog
before the small objects are deleted, so an interrupted compaction is safe
to run again; readers that started before it may need a rerun.

A lake with Iceberg tables (the sink ran with --iceberg-catalog) is
compacted only with --iceberg-catalog, the same catalog: each merge then
also replaces the small files by the merged one in the measurement's table,
in one snapshot, so no engine reading the table sees a row twice or misses
one. Only files the tables already hold are merged, and the small objects
are not deleted: the table's earlier snapshots still read them (time
travel) until 'simtel lake expire' expires those snapshots. A compaction
interrupted between simtel's catalog and the Iceberg commit is finished by
the next run.`,
		Example: `  simtel lake compact --run r42
  simtel lake compact --min-files 8 --target-size 256MiB --dry-run
  simtel lake compact --iceberg-catalog sqlite:/var/lib/simtel/iceberg.db`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.TargetSize, err = parseSize(target); err != nil {
				return fmt.Errorf("--target-size: %w", err)
			}
			return runLakeCompact(cmd, f, cfg, icebergCatalog)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Run, "run", "", "compact only this run's objects (default: every run)")
	fl.IntVar(&cfg.MinFiles, "min-files", 4, "merge only when at least this many small objects qualify")
	fl.StringVar(&target, "target-size", "128MiB", "largest merged object (input bytes), e.g. 64MiB, 1GiB")
	fl.BoolVar(&cfg.DryRun, "dry-run", false, "print what would be merged, change nothing")
	fl.StringVar(&icebergCatalog, "iceberg-catalog", "", "the Iceberg catalog the sink commits to (sqlite:PATH or postgres://...): rewrite its tables too; required on a lake with Iceberg tables")
	return cmd
}

func runLakeCompact(cmd *cobra.Command, f *lakeFlags, cfg compact.Config, icebergCatalog string) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx := cmd.Context()
	ls, err := f.session(cmd)
	if err != nil {
		return err
	}
	if icebergCatalog != "" {
		ice, err := openLakeIceberg(ctx, f, ls.st, icebergCatalog, true)
		if err != nil {
			return err
		}
		defer ice.Close()
		cfg.Iceberg = ice
	} else if has, err := lakeHasIceberg(ctx, ls.st); err != nil {
		return err
	} else if has {
		// Merging without rewriting the tables would leave them naming
		// objects the catalog replaced.
		return fmt.Errorf("the lake %s has Iceberg tables (%s): give --iceberg-catalog, the catalog 'simtel sink' commits to, so the compaction rewrites them too", ls.st, "_iceberg/")
	}
	cfg.Logger = ls.log
	cfg.Engine = ls.engine
	res, err := compact.Run(ctx, ls.st, ls.cat, ls.cache, cfg)
	verb := "merged"
	if cfg.DryRun {
		verb = "would merge"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %d objects into %d (%d rows, %s -> %s); removed %d leftovers of earlier compactions\n",
		verb, res.Replaced, res.Groups, res.Rows, query.FormatBytes(res.BytesBefore), query.FormatBytes(res.BytesAfter), res.Cleaned)
	if res.Reconciled > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "rewrote the Iceberg tables for %d compactions an earlier run left in simtel's catalog only\n", res.Reconciled)
	}
	return err
}

// parseSize reads a positive byte size: 134217728, 128MiB, 128MB, 1GiB,
// 512KiB.
func parseSize(s string) (int64, error) {
	n, err := bytesize.Parse(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q is not a positive size such as 128MiB", s)
	}
	return n, nil
}
