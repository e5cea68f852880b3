package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/store"
)

// lakeBackfillFlags are lake backfill's own flags.
type lakeBackfillFlags struct {
	run, measurement, from, to, toTopic, sourceTopic, brokers, topic, metricsListen string
	txf                                                                             lakeTxnFlags
}

const lakeBackfillLong = `Re-produce data from the lake into a topic, in order, showing progress and
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
starts over).`

func newLakeBackfillCmd(f *lakeFlags) *cobra.Command {
	var o lakeBackfillFlags
	cmd := &cobra.Command{
		Use:   "backfill --to-topic TOPIC --brokers ADDRS",
		Short: "Produce lake data back into a topic (telemetry as lines, raw topics record by record)",
		Long:  lakeBackfillLong,
		Example: `  simtel lake backfill --run r42 --to-topic telemetry-r42 --brokers 127.0.0.1:9092
  simtel lake backfill --source-topic events --to-topic events-restored --brokers 127.0.0.1:9092`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLakeBackfill(cmd, f, &o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.toTopic, "to-topic", "", "the topic to produce into (required)")
	fl.StringVar(&o.brokers, "brokers", "", "comma-separated broker addresses (required)")
	fl.StringVar(&o.run, "run", "", "only this run's telemetry (default: every run)")
	fl.StringVar(&o.measurement, "measurement", "", "only this measurement")
	fl.StringVar(&o.from, "from", "", "only data at or after this time (RFC 3339 or a date)")
	fl.StringVar(&o.to, "to", "", "only data before this time (RFC 3339 or a date)")
	fl.StringVar(&o.sourceTopic, "source-topic", "", "backfill the raw objects of this topic instead of telemetry")
	fl.StringVar(&o.topic, "topic", replay.DefaultTopic, "the telemetry topic whose objects are backfilled")
	fl.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this host:port while backfilling (empty: off)")
	o.txf.add(fl, "simtel-backfill-<run|all>-<to-topic>, or simtel-backfill-raw-<source-topic>-<to-topic>")
	return cmd
}

// check checks the flags and returns the brokers.
func (o *lakeBackfillFlags) check() ([]string, error) {
	if o.toTopic == "" {
		return nil, errors.New("--to-topic is required: the topic to produce into")
	}
	bl := splitList(o.brokers)
	if len(bl) == 0 {
		return nil, errors.New("--brokers is required: where the topic lives")
	}
	if o.sourceTopic != "" && (o.run != "" || o.measurement != "") {
		return nil, errors.New("--source-topic backfills raw records, which have no run or measurement: drop --run and --measurement")
	}
	return bl, nil
}

// job names the job (its default transactional id) and describes its
// selection, which a rerun must repeat.
func (o *lakeBackfillFlags) job() (defID, job string) {
	defID = "simtel-backfill-" + map[bool]string{true: o.run, false: "all"}[o.run != ""] + "-" + o.toTopic
	if o.sourceTopic != "" {
		defID = "simtel-backfill-raw-" + o.sourceTopic + "-" + o.toTopic
	}
	job = fmt.Sprintf("backfill run=%q measurement=%q from=%q to=%q source-topic=%q topic=%q to-topic=%q",
		o.run, o.measurement, o.from, o.to, o.sourceTopic, o.topic, o.toTopic)
	return defID, job
}

func runLakeBackfill(cmd *cobra.Command, f *lakeFlags, o *lakeBackfillFlags) error {
	brokers, err := o.check()
	if err != nil {
		return err
	}
	from, to, err := lakeRange(o.from, o.to)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	ls, snap, err := f.loadedSession(cmd)
	if err != nil {
		return err
	}
	defID, job := o.job()
	p, stopMetrics, err := o.txf.openInto(ctx, brokers, o.toTopic, defID, job, o.metricsListen, nil, ls.log, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer stopMetrics()
	src, err := o.source(ctx, snap, ls.cache, from, to, ls.engine, ls.log)
	if err != nil {
		finishOutput(ctx, p)
		return err
	}
	defer src.close()
	var prog lakeProgress
	prog.start(src.total, src.desc)
	err = src.run(ctx, p, prog.tick)
	acked, err := finishInto(ctx, p, &prog, err, "backfill into "+o.toTopic, "records")
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "backfilled %d records into topic %s%s\n", acked, o.toTopic, skippedNote(p))
	return nil
}

// backfillSource is what a backfill produces: the raw records of a topic
// or telemetry samples.
type backfillSource struct {
	total int64
	desc  string // of the progress bar
	run   func(ctx context.Context, out replay.Output, tick func()) error
	close func() error
}

// source opens the records the flags select.
func (o *lakeBackfillFlags) source(ctx context.Context, snap *catalog.Snapshot, cache *store.Cache, from, to time.Time, eo query.Options, log *slog.Logger) (backfillSource, error) {
	if o.sourceTopic != "" {
		rr, err := replay.OpenRaw(ctx, snap, cache, replay.RawConfig{Topic: o.sourceTopic, From: from, To: to, Engine: eo})
		if err != nil {
			return backfillSource{}, err
		}
		return backfillSource{rr.Total(), "backfilling " + o.sourceTopic, rr.RunInto, rr.Close}, nil
	}
	cfg := replay.Config{Run: o.run, Topic: o.topic, From: from, To: to, Logger: log, Engine: eo}
	if o.measurement != "" {
		cfg.Measurements = []string{o.measurement}
	}
	r, err := replay.Open(ctx, snap, cache, cfg)
	if err != nil {
		return backfillSource{}, err
	}
	run := func(ctx context.Context, out replay.Output, tick func()) error { return r.RunInto(ctx, out, nil, tick) }
	return backfillSource{r.Total(), "backfilling", run, r.Close}, nil
}
