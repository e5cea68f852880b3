package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/bench"
)

func newBenchSinkCmd() *cobra.Command {
	var cfg bench.SinkBenchConfig
	var out benchOutput
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Measure how fast the sink encodes line protocol into Parquet, on one core",
		Long: `Generate --samples line-protocol records like the agent ships them (sorted
tags host, job, run, step plus --tags of the sender's, --fields fields, --runs
distinct runs) and encode them as one flush of one sink partition into Parquet
objects (one per run, measurement and day), on one goroutine as the sink does
per partition. No broker or store is involved.

Reports samples per second of wall time and per CPU second (independent of
the number of cores), and bytes per sample as line protocol, in the broker's
log and in Parquet: the lake's compression against the broker.

With --lake DIR every flush (--flushes of them) is also written to a lake
there and committed to simtel's catalog, as the sink does; with
--iceberg-catalog too to the lake's Iceberg tables, and the report adds the
commits' CPU and latency. Compare the samples per CPU second of the two in
alternate runs (bench/iceberg-cpu.sh).

A progress line (samples buffered so far, their rate) goes to stderr once a
second, except with --quiet or --json.`,
		Example: `  simtel bench sink --samples 1000000
  simtel bench sink --samples 200000 --tags 4 --fields 8 --runs 16 --dir /tmp/lake --json
  simtel bench sink --flushes 20 --lake /tmp/lake --iceberg-catalog sqlite:/tmp/lake/iceberg.db`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !out.json {
				cfg.Progress = out.progress()
			}
			res, err := bench.RunSinkBench(cmd.Context(), cfg)
			if err != nil && res.Samples == 0 {
				return err
			}
			return out.emit(res, err, func(w io.Writer) { bench.PrintSink(w, &res) })
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Samples, "samples", 1_000_000, "records to encode")
	f.IntVar(&cfg.Tags, "tags", 2, "tags per line besides host, job, step and run (0 means the default, 2)")
	f.IntVar(&cfg.Fields, "fields", 4, "fields per line: floats, an integer counter and a boolean")
	f.IntVar(&cfg.Runs, "runs", 4, "distinct runs; each run, measurement and day is one object")
	f.StringVar(&cfg.Dir, "dir", "", "also write the objects under this directory, for inspection")
	f.IntVar(&cfg.Flushes, "flushes", 1, "split the samples into this many flushes")
	f.StringVar(&cfg.Lake, "lake", "", "write and commit every flush to a lake in this directory as the sink does (objects, simtel's catalog), measured")
	f.StringVar(&cfg.IcebergCatalog, "iceberg-catalog", "", "with --lake, also commit every flush to the lake's Iceberg tables in this catalog (sqlite:PATH or postgres://...), as simtel sink --iceberg-catalog does")
	out.register(cmd)
	return cmd
}
