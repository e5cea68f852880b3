package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/rollup"
	"github.com/simtel/simtel/scheduler"
)

func newRollupCmd(g *globalFlags) *cobra.Command {
	var cfg rollup.Config
	var kf kafkaFlags
	cmd := &cobra.Command{
		Use:   "rollup",
		Short: "Roll the telemetry topic up into 10 s, 1 min and 1 h windows, exactly once",
		Long: `Run the rollup worker: a consumer-group member that reads the telemetry
topic and produces, per series (measurement and tags) and window, one
line-protocol record to the compacted topics rollup_10s, rollup_1m and
rollup_1h. Each numeric field gets <field>_count, _min, _max, _sum, _mean,
_last and the quantiles _p50, _p95, _p99 (a DDSketch of 1% relative
accuracy; the 1 min and 1 h windows merge the sketches of the finer ones);
NaN and infinities are counted in <field>_nonfinite only; string and
boolean fields get _last only. The measurement is rollup_<res>.<measurement>,
the time the window start, so a sink with --telemetry-topics rollup_10s,...
writes the tables rollup_10s.<measurement> etc. into the lake.

A window is emitted once the latest sample time of its partition passes
its end by --allowed-lateness; later samples are counted in
simtel_rollup_late_samples_total and dropped. A partition idle for
--idle-timeout lets its event time run with the wall clock, so a run's last
windows close too.

Output, the open windows (checkpointed to the compacted --state-topic) and
the consumed offsets are committed in one Kafka transaction every
--commit-interval: a worker killed at any point resumes from the last
commit, and no sample is dropped or counted twice.

The worker also summarizes each run (samples tagged run=...): once the run
registry (--runs-topic) says a run ended, it writes per metric
(measurement.field over all the run's series and nodes) count, min, mean,
max, sum, p50/p95/p99 and last, with the run's wall time, nodes and exit
state, to the compacted --summary-topic, one record per run and metric, in
the same transactions. Samples arriving later amend it. Read it with
` + "`simtel runs show <run>`" + `, or in the lake as table summary.runs.`,
		Example: `  simtel rollup --brokers 127.0.0.1:9092 --http-listen 127.0.0.1:9646
  simtel sink --brokers 127.0.0.1:9092 --lake file:///var/lib/simtel/lake \
      --topics telemetry,rollup_10s,rollup_1m,rollup_1h,summary.runs \
      --telemetry-topics telemetry,rollup_10s,rollup_1m,rollup_1h,summary.runs
  simtel lake query --lake file:///var/lib/simtel/lake 'SELECT time, host, value_mean, value_p95 FROM rollup_1m.cpu'
  simtel runs show r42`,
		Args: cobra.NoArgs,
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			cfg.Logger = log
			var err error
			if cfg.Brokers, cfg.ClientOpts, err = kf.dial(cmd.Context()); err != nil {
				return fmt.Errorf("rollup: %w", err)
			}
			return rollup.Run(cmd.Context(), cfg)
		}),
	}
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&cfg.Topic, "topic", rollup.DefaultTopic, "telemetry topic to roll up")
	f.StringVar(&cfg.Group, "group", rollup.DefaultGroup, "consumer group; workers in one group share the partitions")
	f.StringVar(&cfg.TransactionalID, "transactional-id", "", "transactional id and static group member id of this worker; each worker of a group needs its own (default: the group)")
	f.StringVar(&cfg.StateTopic, "state-topic", rollup.DefaultStateTopic, "compacted topic keeping the open windows")
	f.DurationVar(&cfg.AllowedLateness, "allowed-lateness", rollup.DefaultAllowedLateness, "a window is emitted once its partition's latest sample time passes its end by this much; later samples are dropped and counted")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", rollup.DefaultIdleTimeout, "a partition that receives nothing for this long lets its event time advance with the wall clock (negative: never)")
	f.DurationVar(&cfg.CommitInterval, "commit-interval", rollup.DefaultCommitInterval, "commit a transaction (output, state, offsets) this often")
	f.DurationVar(&cfg.TxnTimeout, "transaction-timeout", rollup.DefaultTxnTimeout, "the broker aborts a transaction open longer than this")
	f.IntVar(&cfg.MaxSeries, "max-series", rollup.DefaultMaxSeries, "most series with open windows; samples of further series are dropped and counted")
	f.StringVar(&cfg.RunsTopic, "runs-topic", scheduler.RunsTopic, "the run registry, followed to learn which runs ended")
	f.StringVar(&cfg.SummaryTopic, "summary-topic", rollup.DefaultSummaryTopic, "compacted topic receiving the run summaries (lake table summary.runs)")
	f.StringVar(&cfg.PartialTopic, "partial-topic", rollup.DefaultPartialTopic, "compacted topic carrying each partition's aggregates of an ended run to the worker that merges them")
	f.IntVar(&cfg.MaxRunMetrics, "max-run-metrics", rollup.DefaultMaxRunMetrics, "most metrics (measurement.field) in one run's summary; values of further metrics are counted in its dropped_samples")
	f.IntVar(&cfg.MaxSummaryRuns, "max-summary-runs", rollup.DefaultMaxSummaryRuns, "most ended runs whose merged summary a worker keeps in memory; an older run amended by late samples is read back from its partials")
	f.StringVar(&cfg.HTTPListen, "http-listen", "", "host:port for /metrics and /healthz (empty: off)")
	return cmd
}
