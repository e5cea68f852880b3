package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/lake/query"
)

// lakeExtraCmds are the lake subcommands that read objects (query, replay,
// backfill, compact and serve) and retention, which removes them.
func lakeExtraCmds(f *lakeFlags) []*cobra.Command {
	return []*cobra.Command{newLakeQueryCmd(f), newLakeReplayCmd(f), newLakeBackfillCmd(f), newLakeCompactCmd(f), newLakeServeCmd(f), newLakeRetentionCmd(f), newLakeSnapshotsCmd(f)}
}

// lakeQueryFlags are lake query's own flags.
type lakeQueryFlags struct {
	run, from, to, topic, format, output string
	tables                               bool
	asOf, icebergCatalog                 string
}

const lakeQueryLong = `Run one SQL statement with DuckDB over the lake's Parquet objects.

Every measurement is a table (a view) named after it — quote names that are
not plain identifiers, e.g. "gpu.util". Its columns are time (UTC), one
column per tag (host, job, step, run...) and per field, and _partition,
_offset and _time_ns (the exact nanosecond timestamp); objects written with
different columns read as one table, missing values as NULL. Raw topics are
tables raw_<topic> (_partition, _offset, timestamp, key, value, headers) and
records the sink could not decode are in deadletter_<topic>.

--run, --from, --to and --topic choose which objects are read through the
catalog, so a query of one run never touches another run's objects;
--from/--to also filter rows by time. Objects of an S3 lake are downloaded
once into --cache-dir. 'simtel lake query --tables' lists the tables and
their columns.

Output (--format): table (aligned, for terminals), csv (with a header),
json (one object per line) or arrow (an Arrow IPC stream, for
pyarrow.ipc.open_stream or polars; write it to --output or a pipe).

--as-of (with --iceberg-catalog, the catalog 'simtel sink' commits to)
reads the measurements' Iceberg tables as they were: at a snapshot id
(see 'simtel lake snapshots'; the other tables as of that snapshot's time)
or at an RFC 3339 time. Only telemetry tables travel in time: raw and
dead-letter tables are left out.`

func newLakeQueryCmd(f *lakeFlags) *cobra.Command {
	var q lakeQueryFlags
	cmd := &cobra.Command{
		Use:   `query "SQL"`,
		Short: "Run SQL (DuckDB) over the lake: one table per measurement",
		Long:  lakeQueryLong,
		Example: `  simtel lake query --tables --run r42
  simtel lake query "SELECT host, avg(usage_user) FROM cpu GROUP BY host" --run r42
  simtel lake query "SELECT * FROM reward ORDER BY time" --run r42 --format csv --output reward.csv
  simtel lake query "SELECT count(*) FROM cpu" --iceberg-catalog sqlite:iceberg.db --as-of 2026-12-01T10:00:00Z
  simtel lake query "SELECT * FROM cpu" --from 2026-11-29T10:00:00Z --format arrow | python3 -c 'import pyarrow.ipc,sys; print(pyarrow.ipc.open_stream(sys.stdin.buffer).read_all())'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLakeQuery(cmd, f, &q, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&q.run, "run", "", "read only this run's telemetry (raw and dead-letter tables are left out)")
	fl.StringVar(&q.from, "from", "", "only rows at or after this time (RFC 3339, e.g. 2026-11-29T10:00:00Z, or a date)")
	fl.StringVar(&q.to, "to", "", "only rows before this time (RFC 3339 or a date)")
	fl.StringVar(&q.topic, "topic", "", "only objects written from this topic")
	fl.StringVar(&q.format, "format", "table", "output format: table, csv, json (one object per line) or arrow (IPC stream)")
	fl.StringVarP(&q.output, "output", "o", "", "write the result to this file instead of stdout")
	fl.BoolVar(&q.tables, "tables", false, "list the tables (views) and their columns instead of running SQL")
	fl.StringVar(&q.asOf, "as-of", "", "read the Iceberg tables as of this snapshot id or RFC 3339 time (needs --iceberg-catalog)")
	fl.StringVar(&q.icebergCatalog, "iceberg-catalog", "", "the Iceberg catalog the sink commits to, for --as-of: sqlite:PATH or postgres://user:pass@host/db (read only)")
	return cmd
}

// filter checks the flags against the arguments and returns the catalog
// filter they choose.
func (q *lakeQueryFlags) filter(args []string) (query.Filter, error) {
	if !q.tables && len(args) == 0 {
		return query.Filter{}, errors.New(`give a SQL statement, e.g. simtel lake query "SELECT count(*) FROM cpu", or --tables to list the tables`)
	}
	if q.tables && len(args) > 0 {
		return query.Filter{}, errors.New("--tables lists the tables; give either it or a SQL statement")
	}
	switch q.format {
	case "table", "csv", "json", "arrow":
	default:
		return query.Filter{}, fmt.Errorf("--format %q is not table, csv, json or arrow", q.format)
	}
	from, to, err := lakeRange(q.from, q.to)
	if err != nil {
		return query.Filter{}, err
	}
	qf := query.Filter{Run: q.run, Topic: q.topic, From: from, To: to}
	if !q.tables {
		qf.SQL = args[0] // fetch only the tables the statement names
	}
	return qf, nil
}

// toFile reports whether the result goes to --output rather than stdout.
func (q *lakeQueryFlags) toFile() bool { return q.output != "" && q.output != "-" }

func runLakeQuery(cmd *cobra.Command, f *lakeFlags, q *lakeQueryFlags, args []string) error {
	qf, err := q.filter(args)
	if err != nil {
		return err
	}
	var out io.Writer = cmd.OutOrStdout()
	if q.toFile() {
		fh, err := os.Create(q.output)
		if err != nil {
			return fmt.Errorf("cannot create --output %s: %w", q.output, err)
		}
		defer fh.Close()
		out = fh
	} else if q.format == "arrow" && isTerminal(os.Stdout) {
		return errors.New("--format arrow writes a binary stream: give --output FILE or pipe it into a program")
	}
	ctx := cmd.Context()
	ls, err := f.session(cmd)
	if err != nil {
		return err
	}
	var eng *query.Engine
	if q.asOf != "" {
		eng, err = openAsOf(ctx, f, ls, q.icebergCatalog, q.asOf, qf, func(w string) { fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w) })
	} else if q.icebergCatalog != "" {
		err = errors.New("--iceberg-catalog is for --as-of: give --as-of too, or leave both out to read the lake's current objects")
	} else {
		eng, err = query.Open(ctx, ls.st, ls.cat, ls.cache, qf, ls.engine)
	}
	if err != nil {
		return err
	}
	defer eng.Close()
	warnConflicts(cmd.ErrOrStderr(), eng.Views())
	bw := bufio.NewWriterSize(out, 256<<10)
	if q.tables {
		if q.format == "arrow" {
			return errors.New("--tables prints table, csv or json")
		}
		if err := query.WriteTables(bw, eng.Views(), q.format); err != nil {
			return err
		}
		return bw.Flush()
	}
	if len(eng.Views()) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: no lake objects match; only tables that need no lake data can be queried (see simtel lake runs)")
	}
	rows, err := eng.Query(ctx, args[0])
	if err != nil {
		return err
	}
	defer rows.Close()
	if _, err := query.Write(bw, rows, q.format); err != nil {
		return eng.Explain(err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("cannot write the result: %w", err)
	}
	if fh, ok := out.(*os.File); ok && q.toFile() {
		if err := fh.Close(); err != nil {
			return fmt.Errorf("cannot write --output %s: %w", q.output, err)
		}
	}
	return nil
}

// warnConflicts warns of columns that read as NULL for the objects written
// in another type before field types were fixed, and says where those
// values are: rows of the dead-letter views (which a run's query has not).
func warnConflicts(w io.Writer, views []query.View) {
	var letters []string
	for _, v := range views {
		if v.TypeConflictLetters > 0 {
			letters = append(letters, v.Name)
		}
	}
	where := "query deadletter_<topic> without --run to see those values"
	if len(letters) > 0 {
		where = "those values are rows of " + strings.Join(letters, ", ") + ` (reason "field type conflict: …")`
	}
	for _, v := range views {
		for _, c := range v.Conflicts {
			fmt.Fprintf(w, "warning: %s.%s reads as %s; %d objects written before field types were fixed hold it in another type, read as NULL here (first: %s); %s\n",
				v.Name, c.Column, c.Type, len(c.Hidden), c.Hidden[0], where)
		}
	}
}
