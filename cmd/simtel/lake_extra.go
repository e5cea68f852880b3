package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/simtel/simtel/lake/compact"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/replay"
)

// lakeExtraCmds are the lake subcommands that read objects: query, replay,
// backfill and compact.
func lakeExtraCmds(f *lakeFlags) []*cobra.Command {
	return []*cobra.Command{newLakeQueryCmd(f), newLakeReplayCmd(f), newLakeBackfillCmd(f), newLakeCompactCmd(f)}
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// lakeList splits a comma-separated flag value, dropping empty items.
func lakeList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// lakeRange parses --from and --to.
func lakeRange(from, to string) (time.Time, time.Time, error) {
	f, err := parseLakeTime("--from", from)
	if err != nil {
		return f, f, err
	}
	t, err := parseLakeTime("--to", to)
	if err != nil {
		return f, t, err
	}
	if !f.IsZero() && !t.IsZero() && !f.Before(t) {
		return f, t, fmt.Errorf("--from %s is not before --to %s", from, to)
	}
	return f, t, nil
}

// serveLakeMetrics serves reg on http://addr/metrics until stop is called;
// an empty addr serves nothing.
func serveLakeMetrics(addr string, reg *prometheus.Registry) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on --metrics-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns when Close is called
	}()
	return func() { srv.Close(); <-done }, nil
}

func newLakeRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// lakeBar is a progress bar on stderr when stderr is a terminal, else nil.
func lakeBar(total int64, desc string) *progressbar.ProgressBar {
	if !isTerminal(os.Stderr) {
		return nil
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("samples"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionFullWidth(),
		progressbar.OptionClearOnFinish(),
	)
}

func newLakeQueryCmd(f *lakeFlags) *cobra.Command {
	var (
		run, from, to, topic, format, output string
		tables                               bool
	)
	cmd := &cobra.Command{
		Use:   `query "SQL"`,
		Short: "Run SQL (DuckDB) over the lake: one table per measurement",
		Long: `Run one SQL statement with DuckDB over the lake's Parquet objects.

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
pyarrow.ipc.open_stream or polars; write it to --output or a pipe).`,
		Example: `  simtel lake query --tables --run r42
  simtel lake query "SELECT host, avg(usage_user) FROM cpu GROUP BY host" --run r42
  simtel lake query "SELECT * FROM reward ORDER BY time" --run r42 --format csv --output reward.csv
  simtel lake query "SELECT * FROM cpu" --from 2026-11-29T10:00:00Z --format arrow | python3 -c 'import pyarrow.ipc,sys; print(pyarrow.ipc.open_stream(sys.stdin.buffer).read_all())'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !tables && len(args) == 0 {
				return errors.New(`give a SQL statement, e.g. simtel lake query "SELECT count(*) FROM cpu", or --tables to list the tables`)
			}
			if tables && len(args) > 0 {
				return errors.New("--tables lists the tables; give either it or a SQL statement")
			}
			switch format {
			case "table", "csv", "json", "arrow":
			default:
				return fmt.Errorf("--format %q is not table, csv, json or arrow", format)
			}
			fromT, toT, err := lakeRange(from, to)
			if err != nil {
				return err
			}
			var out io.Writer = cmd.OutOrStdout()
			if output != "" && output != "-" {
				fh, err := os.Create(output)
				if err != nil {
					return fmt.Errorf("cannot create --output %s: %w", output, err)
				}
				defer fh.Close()
				out = fh
			} else if format == "arrow" && isTerminal(os.Stdout) {
				return errors.New("--format arrow writes a binary stream: give --output FILE or pipe it into a program")
			}
			ctx := cmd.Context()
			log, err := f.g.logger()
			if err != nil {
				return err
			}
			st, cat, cache, err := f.open(ctx)
			if err != nil {
				return err
			}
			qf := query.Filter{Run: run, Topic: topic, From: fromT, To: toT}
			if !tables {
				qf.SQL = args[0] // fetch only the tables the statement names
			}
			eng, err := query.Open(ctx, st, cat, cache, qf,
				query.Options{Logger: log, Progress: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			defer eng.Close()
			// Values a view reads as NULL for their type are rows of the
			// dead-letter views (not in a run's query, which has none).
			var letters []string
			for _, v := range eng.Views() {
				if v.TypeConflictLetters > 0 {
					letters = append(letters, v.Name)
				}
			}
			where := "query deadletter_<topic> without --run to see those values"
			if len(letters) > 0 {
				where = "those values are rows of " + strings.Join(letters, ", ") + ` (reason "field type conflict: …")`
			}
			for _, v := range eng.Views() {
				for _, c := range v.Conflicts {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s.%s reads as %s; %d objects written before field types were fixed hold it in another type, read as NULL here (first: %s); %s\n",
						v.Name, c.Column, c.Type, len(c.Hidden), c.Hidden[0], where)
				}
			}
			bw := bufio.NewWriterSize(out, 256<<10)
			if tables {
				if err := writeTables(bw, eng.Views(), format); err != nil {
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
			if _, err := query.Write(bw, rows, format); err != nil {
				return eng.Explain(err)
			}
			if err := bw.Flush(); err != nil {
				return fmt.Errorf("cannot write the result: %w", err)
			}
			if fh, ok := out.(*os.File); ok && output != "" && output != "-" {
				if err := fh.Close(); err != nil {
					return fmt.Errorf("cannot write --output %s: %w", output, err)
				}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&run, "run", "", "read only this run's telemetry (raw and dead-letter tables are left out)")
	fl.StringVar(&from, "from", "", "only rows at or after this time (RFC 3339, e.g. 2026-11-29T10:00:00Z, or a date)")
	fl.StringVar(&to, "to", "", "only rows before this time (RFC 3339 or a date)")
	fl.StringVar(&topic, "topic", "", "only objects written from this topic")
	fl.StringVar(&format, "format", "table", "output format: table, csv, json (one object per line) or arrow (IPC stream)")
	fl.StringVarP(&output, "output", "o", "", "write the result to this file instead of stdout")
	fl.BoolVar(&tables, "tables", false, "list the tables (views) and their columns instead of running SQL")
	return cmd
}

// writeTables prints the views and their columns, one line per column.
func writeTables(w io.Writer, views []query.View, format string) error {
	type col struct {
		Table   string `json:"table"`
		Kind    string `json:"kind"`
		Objects int    `json:"objects"`
		Column  string `json:"column"`
		Type    string `json:"type"`
	}
	var cols []col
	for _, v := range views {
		for _, c := range v.Columns {
			cols = append(cols, col{v.Name, v.Kind, len(v.Objects), c.Name, c.Type})
		}
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		for _, c := range cols {
			if err := enc.Encode(c); err != nil {
				return err
			}
		}
		return nil
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write([]string{"table", "kind", "objects", "column", "type"})
		for _, c := range cols {
			cw.Write([]string{c.Table, c.Kind, strconv.Itoa(c.Objects), c.Column, c.Type})
		}
		cw.Flush()
		return cw.Error()
	case "arrow":
		return errors.New("--tables prints table, csv or json")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tKIND\tOBJECTS\tCOLUMN\tTYPE")
	for i, c := range cols {
		name, kind, objs := c.Table, c.Kind, strconv.Itoa(c.Objects)
		if i > 0 && cols[i-1].Table == c.Table {
			name, kind, objs = "", "", ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", query.Ident(name), kind, objs, c.Column, c.Type)
	}
	if len(cols) == 0 {
		fmt.Fprintln(tw, "(no tables: no lake objects match)")
	}
	return tw.Flush()
}

func newLakeReplayCmd(f *lakeFlags) *cobra.Command {
	var (
		run, from, to, speed, toTopic, brokers, topic, measurements, metricsListen string
		fromStep                                                                   float64
		txf                                                                        lakeTxnFlags
	)
	cmd := &cobra.Command{
		Use:   "replay --run RUN",
		Short: "Stream a run's samples back in their original order, to stdout or into a topic",
		Long: `Stream every sample of a run back as InfluxDB line protocol, in the order
they happened: by sample time, then Kafka partition, then offset. Each line
has the measurement, the tags, the fields with their types (1.5, 3i, 4u, t,
"text") and the exact nanosecond timestamp.

The lake holds each partition of the telemetry topic up to the last offset
the sink committed. With --brokers, the rest (up to the end of each
partition when the replay starts) is read from the broker and merged in, so
the replay is complete, with no gap or duplicate at the seam.

--from-step S starts at the first moment any sample of the run has a step
(tag or field, compared as a number) of S or more; everything of the run
from that time on is replayed, including samples without a step.

--speed paces the output like the original: 1x in real time, 10x ten times
faster, max (the default) as fast as possible. With --to-topic the samples
are produced into that topic (key <run>/<host>, record timestamp = sample
time) instead of printed. A progress bar goes to stderr when stdout is not a
terminal or with --to-topic.

With --to-topic the output is written in Kafka transactions, committed every
--commit-records samples or --commit-interval, whichever comes first. Each
transaction also commits the job's progress (the last sample's time,
partition and offset) as an offset of the group named after the
transactional id, so output and progress become visible together. A
consumer with isolation level read_committed never sees the samples of a
transaction that did not commit. If the replay dies, run the same command
again: it fences the dead run's producer (the broker aborts its open
transaction at once), reads the progress and continues after the last
committed sample, so every sample lands in the topic exactly once. The job
is named by --transactional-id (default simtel-replay-<run>-<to-topic>);
the same id with other flags is refused. Brokers without transactions
need --no-transactions (idempotent producer: a crash leaves partial
output, a rerun starts over).`,
		Example: `  simtel lake replay --run r42 > r42.lp
  simtel lake replay --run r42 --brokers 127.0.0.1:9092 --measurements reward,loss
  simtel lake replay --run r42 --from-step 1000 --speed 10x --to-topic telemetry-replay --brokers 127.0.0.1:9092
  simtel lake replay --run r42 --to-topic r42-copy --brokers 127.0.0.1:9092 --commit-records 50000 --commit-interval 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if run == "" {
				return errors.New("--run is required: which run to replay (see simtel lake runs)")
			}
			fromT, toT, err := lakeRange(from, to)
			if err != nil {
				return err
			}
			factor, err := replay.ParseSpeed(speed)
			if err != nil {
				return fmt.Errorf("--speed: %w", err)
			}
			cfg := replay.Config{Run: run, Topic: topic, From: fromT, To: toT, Measurements: lakeList(measurements), Brokers: lakeList(brokers)}
			if cmd.Flags().Changed("from-step") {
				if from != "" {
					return errors.New("give --from or --from-step, not both")
				}
				cfg.FromStep = &fromStep
			}
			if toTopic != "" && len(cfg.Brokers) == 0 {
				return errors.New("--to-topic needs --brokers")
			}
			ctx := cmd.Context()
			log, err := f.g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			cfg.Engine = query.Options{Logger: log, Progress: cmd.ErrOrStderr()}
			st, cat, cache, err := f.open(ctx)
			if err != nil {
				return err
			}
			snap, err := cat.Load(ctx)
			if err != nil {
				return fmt.Errorf("cannot load the catalog of %s: %w", st, err)
			}
			r, err := replay.Open(ctx, snap, cache, cfg)
			if err != nil {
				return err
			}
			defer r.Close()
			if r.Total() == 0 {
				return fmt.Errorf("run %q has no samples in the lake%s for these filters (see simtel lake runs)", run, map[bool]string{true: " or the broker", false: ""}[len(cfg.Brokers) > 0])
			}
			var bar *progressbar.ProgressBar
			if toTopic != "" || !isTerminal(os.Stdout) {
				bar = lakeBar(r.Total(), "replaying "+run)
			}
			reg := newLakeRegistry()
			var p replay.Output
			if toTopic != "" {
				job := fmt.Sprintf("replay run=%q topic=%q from=%q to=%q measurements=%q to-topic=%q",
					run, topic, from, to, measurements, toTopic)
				if cfg.FromStep != nil {
					job += fmt.Sprintf(" step=%v", fromStep)
				}
				if p, err = txf.open(ctx, cfg.Brokers, toTopic, "simtel-replay-"+run+"-"+toTopic, job, log, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			if err := replay.RegisterMetrics(reg, r.Stats(), p); err != nil {
				if p != nil {
					closeOutput(ctx, p)
				}
				return err
			}
			stopMetrics, err := serveLakeMetrics(metricsListen, reg)
			if err != nil {
				if p != nil {
					closeOutput(ctx, p)
				}
				return err
			}
			defer stopMetrics()
			pacer := &replay.Pacer{Speed: factor}
			var n int64
			tick := func() {
				n++
				if bar != nil && n%256 == 0 {
					bar.Set64(n)
				}
			}
			if p != nil {
				tp, _ := p.(*replay.TxnProducer)
				err = r.Run(ctx, func(s *replay.Sample) error {
					tick()
					if p.Skip(replay.SamplePosition(s)) {
						return nil
					}
					if tp != nil {
						// Commit before a long pause rather than leave
						// the transaction open (invisible, and aborted by
						// the broker after its timeout).
						if err := tp.Idle(ctx, pacer.Delay(s.Time)); err != nil {
							return err
						}
					}
					if err := pacer.Wait(ctx, s.Time); err != nil {
						return err
					}
					return p.Sample(ctx, s)
				})
				acked, cerr := closeOutput(ctx, p)
				if bar != nil {
					bar.Finish()
				}
				if err = errors.Join(err, cerr); err != nil {
					return fmt.Errorf("replay into %s stopped after %d %s samples: %w", toTopic, acked, durableWord(p), err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "replayed %d samples of run %s into topic %s%s\n", acked, run, toTopic, skippedNote(p))
				return nil
			}
			lw := replay.NewLineWriter(cmd.OutOrStdout())
			lw.FlushEach = factor > 0
			err = r.Run(ctx, func(s *replay.Sample) error {
				if err := pacer.Wait(ctx, s.Time); err != nil {
					return err
				}
				tick()
				return lw.Write(s)
			})
			if ferr := lw.Flush(); err == nil {
				err = ferr
			}
			if bar != nil {
				bar.Finish()
			}
			if err != nil {
				return fmt.Errorf("replay of run %s stopped after %d samples: %w", run, n, err)
			}
			if bar != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "replayed %d samples of run %s\n", n, run)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&run, "run", "", "the run to replay (required)")
	fl.StringVar(&from, "from", "", "start at this sample time (RFC 3339 or a date)")
	fl.Float64Var(&fromStep, "from-step", 0, "start at the first time any sample of the run has step >= this")
	fl.StringVar(&to, "to", "", "stop before this sample time (RFC 3339 or a date)")
	fl.StringVar(&speed, "speed", "max", "pace: max (no waiting), 1x (real time), 10x, 0.5x...")
	fl.StringVar(&toTopic, "to-topic", "", "produce the samples into this topic instead of printing them (needs --brokers)")
	fl.StringVar(&brokers, "brokers", "", "comma-separated brokers: read the part of the run the sink has not flushed yet (and produce with --to-topic)")
	fl.StringVar(&topic, "topic", replay.DefaultTopic, "the telemetry topic the run was shipped on")
	fl.StringVar(&measurements, "measurements", "", "comma-separated measurements to replay (default: all)")
	fl.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this host:port while replaying (empty: off)")
	txf.add(fl, "simtel-replay-<run>-<to-topic>")
	return cmd
}

func newLakeBackfillCmd(f *lakeFlags) *cobra.Command {
	var (
		run, measurement, from, to, toTopic, sourceTopic, brokers, topic, metricsListen string
		txf                                                                             lakeTxnFlags
	)
	cmd := &cobra.Command{
		Use:   "backfill --to-topic TOPIC --brokers ADDRS",
		Short: "Produce lake data back into a topic (telemetry as lines, raw topics record by record)",
		Long: `Re-produce data from the lake into a topic, in order, showing progress and
the final count.

Telemetry (the default): every sample of the chosen runs, measurement and
time range, in time, partition, offset order, as one canonical
line-protocol record each (key <run>/<host>, timestamp = sample time) —
what the agent shipped.

Raw topics (--source-topic T): the records of T's raw objects with their
original key, value, headers and timestamp, in partition and offset order
(so every key keeps its order).

The output is written in Kafka transactions, committed every
--commit-records records or --commit-interval, whichever comes first; each
transaction also commits the job's progress (position of its last record)
as an offset of the group named after the transactional id. Consumers with
isolation level read_committed see only committed transactions. After a
crash, run the same command again: the broker aborts the dead run's open
transaction, and the backfill continues after the last committed record,
so each record lands exactly once. The job is named by --transactional-id
(default simtel-backfill-<run|all>-<to-topic>, or
simtel-backfill-raw-<source-topic>-<to-topic>); the same id with other
flags is refused. --no-transactions uses the idempotent producer instead
(for brokers without transactions: a crash leaves partial output, a rerun
starts over).`,
		Example: `  simtel lake backfill --run r42 --to-topic telemetry-r42 --brokers 127.0.0.1:9092
  simtel lake backfill --source-topic events --to-topic events-restored --brokers 127.0.0.1:9092`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if toTopic == "" {
				return errors.New("--to-topic is required: the topic to produce into")
			}
			bl := lakeList(brokers)
			if len(bl) == 0 {
				return errors.New("--brokers is required: where the topic lives")
			}
			if sourceTopic != "" && (run != "" || measurement != "") {
				return errors.New("--source-topic backfills raw records, which have no run or measurement: drop --run and --measurement")
			}
			fromT, toT, err := lakeRange(from, to)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			log, err := f.g.logger()
			if err != nil {
				return err
			}
			st, cat, cache, err := f.open(ctx)
			if err != nil {
				return err
			}
			snap, err := cat.Load(ctx)
			if err != nil {
				return fmt.Errorf("cannot load the catalog of %s: %w", st, err)
			}
			eo := query.Options{Logger: log, Progress: cmd.ErrOrStderr()}
			defID := "simtel-backfill-" + map[bool]string{true: run, false: "all"}[run != ""] + "-" + toTopic
			if sourceTopic != "" {
				defID = "simtel-backfill-raw-" + sourceTopic + "-" + toTopic
			}
			job := fmt.Sprintf("backfill run=%q measurement=%q from=%q to=%q source-topic=%q topic=%q to-topic=%q",
				run, measurement, from, to, sourceTopic, topic, toTopic)
			p, err := txf.open(ctx, bl, toTopic, defID, job, log, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			reg := newLakeRegistry()
			if err := replay.RegisterMetrics(reg, nil, p); err != nil {
				closeOutput(ctx, p)
				return err
			}
			stopMetrics, err := serveLakeMetrics(metricsListen, reg)
			if err != nil {
				closeOutput(ctx, p)
				return err
			}
			defer stopMetrics()
			var n int64
			var bar *progressbar.ProgressBar
			tick := func() {
				n++
				if bar != nil && n%256 == 0 {
					bar.Set64(n)
				}
			}
			var runErr error
			if sourceTopic != "" {
				rr, err := replay.OpenRaw(ctx, snap, cache, replay.RawConfig{Topic: sourceTopic, From: fromT, To: toT, Engine: eo})
				if err != nil {
					closeOutput(ctx, p)
					return err
				}
				defer rr.Close()
				bar = lakeBar(rr.Total(), "backfilling "+sourceTopic)
				runErr = rr.Run(ctx, func(rec *kgo.Record) error {
					tick()
					if p.Skip(replay.RecordPosition(rec)) {
						return nil
					}
					return p.Record(ctx, rec)
				})
			} else {
				cfg := replay.Config{Run: run, Topic: topic, From: fromT, To: toT, Logger: log, Engine: eo}
				if measurement != "" {
					cfg.Measurements = []string{measurement}
				}
				r, err := replay.Open(ctx, snap, cache, cfg)
				if err != nil {
					closeOutput(ctx, p)
					return err
				}
				defer r.Close()
				bar = lakeBar(r.Total(), "backfilling")
				runErr = r.Run(ctx, func(s *replay.Sample) error {
					tick()
					if p.Skip(replay.SamplePosition(s)) {
						return nil
					}
					return p.Sample(ctx, s)
				})
			}
			acked, cerr := closeOutput(ctx, p)
			if bar != nil {
				bar.Finish()
			}
			if err := errors.Join(runErr, cerr); err != nil {
				return fmt.Errorf("backfill into %s stopped after %d %s records: %w", toTopic, acked, durableWord(p), err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "backfilled %d records into topic %s%s\n", acked, toTopic, skippedNote(p))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&toTopic, "to-topic", "", "the topic to produce into (required)")
	fl.StringVar(&brokers, "brokers", "", "comma-separated broker addresses (required)")
	fl.StringVar(&run, "run", "", "only this run's telemetry (default: every run)")
	fl.StringVar(&measurement, "measurement", "", "only this measurement")
	fl.StringVar(&from, "from", "", "only data at or after this time (RFC 3339 or a date)")
	fl.StringVar(&to, "to", "", "only data before this time (RFC 3339 or a date)")
	fl.StringVar(&sourceTopic, "source-topic", "", "backfill the raw objects of this topic instead of telemetry")
	fl.StringVar(&topic, "topic", replay.DefaultTopic, "the telemetry topic whose objects are backfilled")
	fl.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this host:port while backfilling (empty: off)")
	txf.add(fl, "simtel-backfill-<run|all>-<to-topic>, or simtel-backfill-raw-<source-topic>-<to-topic>")
	return cmd
}

// parseSize reads a byte size: 134217728, 128MiB, 128MB, 1GiB, 512KiB.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}}
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q is not a positive size such as 128MiB", s)
	}
	return int64(n * float64(mult)), nil
}

func newLakeCompactCmd(f *lakeFlags) *cobra.Command {
	var (
		cfg    compact.Config
		target string
	)
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Merge small telemetry objects into larger ones",
		Long: `Merge small telemetry objects: objects of the same measurement, run, day,
topic and partition with consecutive offset ranges are rewritten as one
object (sorted by time and offset, zstd) of up to --target-size, when at
least --min-files of them qualify. The merge is recorded in the catalog
before the small objects are deleted, so an interrupted compaction is safe
to run again; readers that started before it may need a rerun.`,
		Example: `  simtel lake compact --run r42
  simtel lake compact --min-files 8 --target-size 256MiB --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.TargetSize, err = parseSize(target); err != nil {
				return fmt.Errorf("--target-size: %w", err)
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			log, err := f.g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			cfg.Engine = query.Options{Logger: log, Progress: cmd.ErrOrStderr()}
			st, cat, cache, err := f.open(ctx)
			if err != nil {
				return err
			}
			res, err := compact.Run(ctx, st, cat, cache, cfg)
			verb := "merged"
			if cfg.DryRun {
				verb = "would merge"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %d objects into %d (%d rows, %s -> %s); removed %d leftovers of earlier compactions\n",
				verb, res.Replaced, res.Groups, res.Rows, query.FormatBytes(res.BytesBefore), query.FormatBytes(res.BytesAfter), res.Cleaned)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Run, "run", "", "compact only this run's objects (default: every run)")
	fl.IntVar(&cfg.MinFiles, "min-files", 4, "merge only when at least this many small objects qualify")
	fl.StringVar(&target, "target-size", "128MiB", "largest merged object (input bytes), e.g. 64MiB, 1GiB")
	fl.BoolVar(&cfg.DryRun, "dry-run", false, "print what would be merged, change nothing")
	return cmd
}
