package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/rollup"
	"github.com/simtel/simtel/rollup/watch"
)

type runsWatchFlags struct {
	resolution, summaryTopic string
	metrics                  []string
	interval, since, timeout time.Duration
	width                    int
	once, exitOnEnd, perHost bool
	kf                       kafkaFlags
}

// newRunsWatchCmd follows a run's rollups live in a terminal.
func newRunsWatchCmd() *cobra.Command {
	var o runsWatchFlags
	cmd := &cobra.Command{
		Use:   "watch <run>",
		Short: "Follow a run live: per metric a sparkline of its recent rollup windows, last value, min, max, p95",
		Long: `Follow a run from the rollup worker's live topic (rollup_10s, or rollup_1m with
--resolution 1m): one line per metric (measurement.field, over all the run's
series, or per host with --per-host) with a sparkline of the mean of its
recent windows (▁ lowest … █ highest of the windows shown), the last value
(the newest window's last sample; the mean of the hosts' last samples when
several hosts send the metric), the minimum and maximum over every window
read, the newest window's p95 (the highest host's), and the count of
samples. Windows reach the topic once they are final, --allowed-lateness of
the rollup worker after their end, so the newest shown lags the run by that.

The topic is read from its start, or from --since ago (by the windows'
start times), and followed. In a terminal the view is redrawn every
--interval; otherwise one plain snapshot is printed per interval, so the
output can be piped. --once reads what the topic holds now, prints one
snapshot and exits.

Until a window of the run arrives it says it is waiting for the run. Once
the run has ended and the rollup worker has written its summary
(` + "`simtel runs show`" + `), the view shows the run's final state; --exit-on-end then
prints a last snapshot and exits. Only numeric fields are shown.`,
		Example: `  simtel runs watch r42 --brokers broker1:9092
  simtel runs watch r42 --metric reward.value --metric sim.step_time --per-host
  simtel runs watch r42 --resolution 1m --since 2h --exit-on-end
  simtel runs watch r42 --once | grep reward`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
	f := cmd.Flags()
	o.kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringArrayVar(&o.metrics, "metric", nil, "show only this metric (measurement.field) or measurement; repeatable, or comma-separated")
	f.StringVar(&o.resolution, "resolution", "10s", "window length of the rollup topic read: 10s, 1m or 1h")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "redraw (or print a snapshot) this often")
	f.DurationVar(&o.since, "since", 0, "read the windows that started this long ago or later (0: the whole topic)")
	f.IntVar(&o.width, "width", 0, "windows in a sparkline (0: fit the terminal, 40 when not a terminal)")
	f.BoolVar(&o.perHost, "per-host", false, "one line per metric and host")
	f.BoolVar(&o.once, "once", false, "print one snapshot of what the topic holds now and exit")
	f.BoolVar(&o.exitOnEnd, "exit-on-end", false, "exit once the run's summary says it ended")
	f.StringVar(&o.summaryTopic, "summary-topic", rollup.DefaultSummaryTopic, "the rollup worker's summary topic")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "with --once: give up reading after this long")
	return cmd
}

// run follows the topics and draws until ctx ends, or once.
func (o *runsWatchFlags) run(ctx context.Context, out io.Writer, run string) error {
	res, ok := resolutionNamed(o.resolution)
	if !ok {
		return fmt.Errorf("--resolution %q is not 10s, 1m or 1h", o.resolution)
	}
	if o.interval <= 0 {
		return fmt.Errorf("--interval %v: want a positive duration", o.interval)
	}
	if o.width < 0 {
		return fmt.Errorf("--width %d is negative", o.width)
	}
	brokers, opts, err := o.kf.client()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(slices.Concat([]kgo.Opt{kgo.SeedBrokers(brokers...)}, watch.ClientOpts(), opts)...)
	if err != nil {
		return fmt.Errorf("cannot connect to %s: %w", o.kf.brokers, err)
	}
	defer cl.Close()
	tty := false
	if f, ok := out.(*os.File); ok {
		tty = isTerminal(f)
	}
	w := watch.New(cl, watch.NewView(run, res, splitMetrics(o.metrics), o.perHost), watch.Config{
		Run: run, Resolution: res, SummaryTopic: o.summaryTopic, Since: o.since,
		Interval: o.interval, ExitOnEnd: o.exitOnEnd, Width: o.width, TTY: tty, Source: o.kf.brokers,
	}, out)
	if o.once {
		octx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		if err := w.ReadOnce(octx); err != nil {
			return fmt.Errorf("cannot read the rollups of run %q from %s within %v: is `simtel broker` running there? (%w)", run, o.kf.brokers, o.timeout, err)
		}
		return w.Draw()
	}
	return w.Follow(ctx)
}

func resolutionNamed(name string) (rollup.Resolution, bool) {
	for _, r := range rollup.Resolutions {
		if r.Name == name {
			return r, true
		}
	}
	return rollup.Resolution{}, false
}

func splitMetrics(vs []string) []string {
	var out []string
	for _, v := range vs {
		out = append(out, splitList(v)...)
	}
	return out
}
