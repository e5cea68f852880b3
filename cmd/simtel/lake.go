package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
)

// lakeFlags are the flags every `simtel lake` subcommand shares.
type lakeFlags struct {
	g          *globalFlags
	lake       string
	s3Endpoint string
	s3Region   string
	cacheDir   string
	cacheMaxMB int64
	format     string
}

func newLakeCmd(g *globalFlags) *cobra.Command {
	f := &lakeFlags{g: g}
	cmd := &cobra.Command{
		Use:   "lake",
		Short: "Inspect and query the Parquet lake the sink writes",
		Long: `Inspect the Parquet lake written by 'simtel sink'. The lake is a local
directory (file:///dir) or a prefix of an S3-compatible bucket
(s3://bucket/prefix). Commands read the lake's catalog (_catalog/ in the
lake), never a listing of the data objects, so they see exactly the flushes
the sink committed.

For S3, credentials come from the usual AWS chain: AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY, or AWS_PROFILE and ~/.aws/config. Give
--s3-endpoint for any service other than AWS itself (MinIO, versitygw,
Ceph...). Catalog files and the objects a query reads are downloaded once
into --cache-dir.`,
		Example: `  simtel lake runs
  simtel lake ls --run r42 --measurement reward
  simtel lake runs --lake s3://telemetry/simtel --s3-endpoint http://127.0.0.1:7070 --format json`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.lake, "lake", "file://./simtel-data/lake", "lake root: file:///dir (or a plain path) or s3://bucket/prefix; the default is where 'simtel dev' keeps it")
	pf.StringVar(&f.s3Endpoint, "s3-endpoint", "", "base URL of an S3-compatible service, e.g. http://127.0.0.1:7070 (path-style addressing); empty for AWS")
	pf.StringVar(&f.s3Region, "s3-region", "", "S3 region (default: AWS_REGION, the shared config, else us-east-1)")
	pf.StringVar(&f.cacheDir, "cache-dir", defaultLakeCacheDir(), "local cache of catalog files and downloaded objects (S3 lakes only)")
	pf.Int64Var(&f.cacheMaxMB, "cache-max-mb", 10240, "keep at most this many MiB of downloaded objects in --cache-dir (least recently used go first)")
	pf.StringVar(&f.format, "format", "table", "output format: table, csv or json")
	cmd.AddCommand(newLakeRunsCmd(f), newLakeLsCmd(f))
	cmd.AddCommand(lakeExtraCmds(f)...)
	cmd.AddCommand(newLakeExpireCmd(f))
	return cmd
}

// lakeTable is rows of text for the table and csv formats; raw is what json
// prints.
type lakeTable struct {
	header []string
	rows   [][]string
	raw    any
}

// print writes t in --format to w.
func (f *lakeFlags) print(w io.Writer, t lakeTable) error {
	switch f.format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(t.raw)
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(t.header)
		cw.WriteAll(t.rows)
		return cw.Error()
	default:
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(t.header, "\t")))
		for _, r := range t.rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	}
}

// lakeTime prints sample times in UTC with milliseconds; zero is empty.
func lakeTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// fmtBytes is human-readable in tables and exact in csv.
func (f *lakeFlags) fmtBytes(n int64) string {
	if f.format != "table" {
		return strconv.FormatInt(n, 10)
	}
	return query.FormatBytes(n)
}

func newLakeRunsCmd(f *lakeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "runs",
		Short: "List the runs in the lake: state, time span, measurements, size",
		Long: `List every run with telemetry in the lake, oldest first: its state
(completed, failed or cancelled once the scheduler marked it, else open),
the first and last sample time, its measurements, and how many rows,
objects and bytes it holds. Samples without a run tag are listed as run
__none__.`,
		Example: `  simtel lake runs
  simtel lake runs --format csv > runs.csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			snap, _, _, err := f.load(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			runs := snap.Runs()
			if len(runs) == 0 && f.format == "table" {
				fmt.Fprintf(cmd.ErrOrStderr(), "no runs in %s yet\n", f.lake)
			}
			t := lakeTable{header: []string{"run", "state", "from", "to", "measurements", "rows", "objects", "bytes"}, raw: runs}
			for _, r := range runs {
				t.rows = append(t.rows, []string{r.Run, r.State, lakeTime(r.From), lakeTime(r.To), strings.Join(r.Measurements, ","),
					strconv.FormatInt(r.Rows, 10), strconv.FormatInt(r.Objects, 10), f.fmtBytes(r.Bytes)})
			}
			return f.print(cmd.OutOrStdout(), t)
		},
	}
}

func newLakeLsCmd(f *lakeFlags) *cobra.Command {
	var flt catalog.Filter
	var from, to string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the lake's Parquet objects, filtered by run, measurement, topic, kind or time",
		Long: `List the Parquet objects the lake's catalog holds, sorted by key, with the
time span, rows and size of each. Objects replaced by 'simtel lake compact'
are not listed; the compacted ones are. Filters combine.`,
		Example: `  simtel lake ls --run r42
  simtel lake ls --measurement reward --from 2026-11-29T10:00:00Z
  simtel lake ls --kind deadletter`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch flt.Kind {
			case "", lake.KindTelemetry, lake.KindRaw, lake.KindDeadLetter:
			default:
				return fmt.Errorf("--kind %q is not %s, %s or %s", flt.Kind, lake.KindTelemetry, lake.KindRaw, lake.KindDeadLetter)
			}
			var err error
			if flt.From, err = parseLakeTime("--from", from); err != nil {
				return err
			}
			if flt.To, err = parseLakeTime("--to", to); err != nil {
				return err
			}
			snap, _, _, err := f.load(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			objs := snap.Objects(flt)
			if objs == nil {
				objs = []catalog.Object{}
				if f.format == "table" {
					fmt.Fprintf(cmd.ErrOrStderr(), "no objects in %s match\n", f.lake)
				}
			}
			t := lakeTable{header: []string{"key", "kind", "measurement", "run", "from", "to", "rows", "bytes"}, raw: objs}
			for _, o := range objs {
				t.rows = append(t.rows, []string{o.Key, o.Kind, o.Measurement, o.Run, lakeTime(o.MinTime), lakeTime(o.MaxTime),
					strconv.FormatInt(o.Rows, 10), f.fmtBytes(o.Bytes)})
			}
			return f.print(cmd.OutOrStdout(), t)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&flt.Run, "run", "", "only objects of this run (__none__: samples without a run tag)")
	fl.StringVar(&flt.Measurement, "measurement", "", "only objects of this measurement")
	fl.StringVar(&flt.Topic, "topic", "", "only objects written from this topic")
	fl.StringVar(&flt.Kind, "kind", "", "only objects of this kind: telemetry, raw or deadletter")
	fl.StringVar(&from, "from", "", "only objects with samples at or after this time (RFC 3339, e.g. 2026-11-29T10:00:00Z)")
	fl.StringVar(&to, "to", "", "only objects with samples before this time (RFC 3339)")
	return cmd
}
