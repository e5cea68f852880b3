package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/lake/replay"
)

// lakeReplayFlags are lake replay's own flags.
type lakeReplayFlags struct {
	run, from, to, speed, toTopic, brokers, topic, measurements, metricsListen string
	fromStep                                                                   float64
	txf                                                                        lakeTxnFlags
}

const lakeReplayLong = `Stream every sample of a run back as InfluxDB line protocol, in the order
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
output, a rerun starts over).`

func newLakeReplayCmd(f *lakeFlags) *cobra.Command {
	var o lakeReplayFlags
	cmd := &cobra.Command{
		Use:   "replay --run RUN",
		Short: "Stream a run's samples back in their original order, to stdout or into a topic",
		Long:  lakeReplayLong,
		Example: `  simtel lake replay --run r42 > r42.lp
  simtel lake replay --run r42 --brokers 127.0.0.1:9092 --measurements reward,loss
  simtel lake replay --run r42 --from-step 1000 --speed 10x --to-topic telemetry-replay --brokers 127.0.0.1:9092
  simtel lake replay --run r42 --to-topic r42-copy --brokers 127.0.0.1:9092 --commit-records 50000 --commit-interval 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLakeReplay(cmd, f, &o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.run, "run", "", "the run to replay (required)")
	fl.StringVar(&o.from, "from", "", "start at this sample time (RFC 3339 or a date)")
	fl.Float64Var(&o.fromStep, "from-step", 0, "start at the first time any sample of the run has step >= this")
	fl.StringVar(&o.to, "to", "", "stop before this sample time (RFC 3339 or a date)")
	fl.StringVar(&o.speed, "speed", "max", "pace: max (no waiting), 1x (real time), 10x, 0.5x...")
	fl.StringVar(&o.toTopic, "to-topic", "", "produce the samples into this topic instead of printing them (needs --brokers)")
	fl.StringVar(&o.brokers, "brokers", "", "comma-separated brokers: read the part of the run the sink has not flushed yet (and produce with --to-topic)")
	fl.StringVar(&o.topic, "topic", replay.DefaultTopic, "the telemetry topic the run was shipped on")
	fl.StringVar(&o.measurements, "measurements", "", "comma-separated measurements to replay (default: all but the rollups rollup_*.* and summary.runs)")
	fl.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this host:port while replaying (empty: off)")
	o.txf.add(fl, "simtel-replay-<run>-<to-topic>")
	return cmd
}

// config checks the flags and returns the replay's selection and the
// pacing factor.
func (o *lakeReplayFlags) config(cmd *cobra.Command) (replay.Config, float64, error) {
	if o.run == "" {
		return replay.Config{}, 0, errors.New("--run is required: which run to replay (see simtel lake runs)")
	}
	from, to, err := lakeRange(o.from, o.to)
	if err != nil {
		return replay.Config{}, 0, err
	}
	factor, err := replay.ParseSpeed(o.speed)
	if err != nil {
		return replay.Config{}, 0, fmt.Errorf("--speed: %w", err)
	}
	cfg := replay.Config{Run: o.run, Topic: o.topic, From: from, To: to, Measurements: splitList(o.measurements), Brokers: splitList(o.brokers)}
	if cmd.Flags().Changed("from-step") {
		if o.from != "" {
			return replay.Config{}, 0, errors.New("give --from or --from-step, not both")
		}
		cfg.FromStep = &o.fromStep
	}
	if o.toTopic != "" && len(cfg.Brokers) == 0 {
		return replay.Config{}, 0, errors.New("--to-topic needs --brokers")
	}
	if cfg.ClientOpts, err = o.txf.sec.opts(); err != nil {
		return replay.Config{}, 0, err
	}
	return cfg, factor, nil
}

func runLakeReplay(cmd *cobra.Command, f *lakeFlags, o *lakeReplayFlags) error {
	cfg, factor, err := o.config(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	ls, snap, err := f.loadedSession(cmd)
	if err != nil {
		return err
	}
	cfg.Logger = ls.log
	cfg.Engine = ls.engine
	r, err := replay.Open(ctx, snap, ls.cache, cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	if r.Total() == 0 {
		return fmt.Errorf("run %q has no samples in the lake%s for these filters (see simtel lake runs)", o.run, map[bool]string{true: " or the broker", false: ""}[len(cfg.Brokers) > 0])
	}
	var prog lakeProgress
	if o.toTopic != "" || !isTerminal(os.Stdout) {
		prog.start(r.Total(), "replaying "+o.run)
	}
	if o.toTopic != "" {
		return o.intoTopic(ctx, cmd, r, cfg, &replay.Pacer{Speed: factor}, &prog, ls.log)
	}
	stopMetrics, err := serveLakeMetrics(ctx, o.metricsListen, r.Stats(), nil)
	if err != nil {
		return err
	}
	defer stopMetrics()
	return o.toLines(ctx, cmd, r, factor, &prog)
}

// intoTopic produces the replay into --to-topic.
func (o *lakeReplayFlags) intoTopic(ctx context.Context, cmd *cobra.Command, r *replay.Replay, cfg replay.Config, pacer *replay.Pacer, prog *lakeProgress, log *slog.Logger) error {
	job := fmt.Sprintf("replay run=%q topic=%q from=%q to=%q measurements=%q to-topic=%q",
		o.run, o.topic, o.from, o.to, o.measurements, o.toTopic)
	if cfg.FromStep != nil {
		job += fmt.Sprintf(" step=%v", o.fromStep)
	}
	p, stopMetrics, err := o.txf.openInto(ctx, cfg.Brokers, o.toTopic, "simtel-replay-"+o.run+"-"+o.toTopic, job, o.metricsListen, r.Stats(), log, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer stopMetrics()
	err = r.RunInto(ctx, p, pacer, prog.tick)
	acked, err := finishInto(ctx, p, prog, err, "replay into "+o.toTopic, "samples")
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "replayed %d samples of run %s into topic %s%s\n", acked, o.run, o.toTopic, skippedNote(p))
	return nil
}

// toLines prints the replay as line protocol on stdout.
func (o *lakeReplayFlags) toLines(ctx context.Context, cmd *cobra.Command, r *replay.Replay, factor float64, prog *lakeProgress) error {
	pacer := &replay.Pacer{Speed: factor}
	lw := replay.NewLineWriter(cmd.OutOrStdout())
	lw.FlushEach = factor > 0
	err := r.Run(ctx, func(s *replay.Sample) error {
		if err := pacer.Wait(ctx, s.Time); err != nil {
			return err
		}
		prog.tick()
		return lw.Write(s)
	})
	if ferr := lw.Flush(); err == nil {
		err = ferr
	}
	prog.finish()
	if err != nil {
		return fmt.Errorf("replay of run %s stopped after %d samples: %w", o.run, prog.n, err)
	}
	if prog.bar != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "replayed %d samples of run %s\n", prog.n, o.run)
	}
	return nil
}
