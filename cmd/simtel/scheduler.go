package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/scheduler"
)

func newSchedulerCmd(g *globalFlags) *cobra.Command {
	var cfg scheduler.WatchConfig
	var kf kafkaFlags
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Keep the run registry: fold the jobs topic into the runs topic",
		Long: `Run the scheduler loop: read every job event on the "jobs" topic from the
beginning, fold them into one record per run, and write a run to the compacted
"runs" topic whenever the newest record there is not the fold. The Slurm hooks
refresh the registry themselves; this loop repairs what they could not (a hook
that timed out while the broker was away) and keeps the registry when the jobs
topic's retention has dropped old events. Run one or more anywhere: they agree.

/metrics (simtel_scheduler_*), /healthz and /readyz are served on --http-listen.`,
		Example: `  simtel scheduler --brokers broker1:9092 --http-listen 127.0.0.1:9646`,
		Args:    cobra.NoArgs,
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			cfg.Logger = log
			var err error
			if cfg.Brokers, cfg.ClientOpts, err = kf.dial(cmd.Context()); err != nil {
				return fmt.Errorf("scheduler: %w", err)
			}
			w, err := scheduler.NewWatcher(cfg)
			if err != nil {
				return err
			}
			return w.Run(cmd.Context())
		}),
	}
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
	f.DurationVar(&cfg.WriteInterval, "write-interval", time.Second, "how often changed runs are written")
	f.StringVar(&cfg.HTTPListen, "http-listen", "", "host:port for /metrics, /healthz, /readyz (empty: off)")
	return cmd
}
