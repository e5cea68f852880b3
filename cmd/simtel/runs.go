package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/scheduler"
)

func newRunsCmd(g *globalFlags) *cobra.Command {
	var format, run, source string
	var timeout time.Duration
	var kf kafkaFlags
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List runs: job, user, nodes, state, exit code, start, end, duration",
		Long: `List the run registry. Slurm's hooks (` + "`simtel slurm prolog|epilog|jobcomp`" + `)
publish each job's lifecycle events to the "jobs" topic and keep one folded
record per run on the compacted "runs" topic (so does ` + "`simtel scheduler`" + `).

--source runs (default) reads the "runs" topic; --source jobs folds the
"jobs" topic itself, the source of truth (slower on a long history; use it
when a hook could not refresh the registry).

` + "`simtel runs show <run>`" + ` prints an ended run's summary (per metric
count, min, mean, max, p95, last), which the rollup worker keeps;
` + "`simtel runs watch <run>`" + ` follows a run live from its rollups.`,
		Example: `  simtel runs --brokers broker1:9092
  simtel runs --run 4242 --format json
  simtel runs show 4242
  simtel runs watch 4242`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "table" && format != "json" {
				return fmt.Errorf("--format %q is not table or json", format)
			}
			if source != "runs" && source != "jobs" {
				return fmt.Errorf("--source %q is not runs or jobs", source)
			}
			runs, err := readRuns(cmd.Context(), g, &kf, source, timeout)
			if err != nil {
				return err
			}
			if run != "" {
				if runs = onlyRun(runs, run); len(runs) == 0 {
					return fmt.Errorf("run %q is not in the registry (--source %s): see `simtel runs` for the known runs", run, source)
				}
			}
			return printRuns(runs, format)
		},
	}
	cmd.AddCommand(newRunsShowCmd(), newRunsWatchCmd())
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&format, "format", "table", "output format: table or json")
	f.StringVar(&run, "run", "", "show only this run")
	f.StringVar(&source, "source", "runs", "runs (the registry topic) or jobs (fold the events)")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	return cmd
}

// readRuns reads the run registry from the runs topic, or folds the jobs
// topic with source "jobs". Nothing published yet is no runs.
func readRuns(ctx context.Context, g *globalFlags, kf *kafkaFlags, source string, timeout time.Duration) ([]scheduler.Run, error) {
	log, err := g.logger()
	if err != nil {
		return nil, err
	}
	brokers, opts, err := kf.client()
	if err != nil {
		return nil, err
	}
	reg, err := scheduler.Open(scheduler.Config{Brokers: brokers, ClientOpts: opts, Logger: log})
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var runs []scheduler.Run
	if source == "jobs" {
		runs, err = reg.FoldJobs(ctx)
	} else {
		runs, err = reg.Runs(ctx)
	}
	if errors.Is(err, scheduler.ErrNoTopic) {
		runs, err = nil, nil // nothing published yet: no runs
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the run registry from %s within %v: is `simtel broker` running there? (%w)", kf.brokers, timeout, err)
	}
	return runs, nil
}

// onlyRun keeps the entries of run.
func onlyRun(runs []scheduler.Run, run string) []scheduler.Run {
	var one []scheduler.Run
	for _, r := range runs {
		if r.Run == run {
			one = append(one, r)
		}
	}
	return one
}

// printRuns prints runs as a table or as JSON.
func printRuns(runs []scheduler.Run, format string) error {
	if format == "json" {
		enc := json.NewEncoder(stdout())
		enc.SetIndent("", "  ")
		if runs == nil {
			runs = []scheduler.Run{}
		}
		return enc.Encode(runs)
	}
	tw := tabwriter.NewWriter(stdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tJOB\tUSER\tNAME\tNODES\tSTATE\tEXIT\tSTART\tEND\tDURATION")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Run, dash(r.JobID), dash(r.User), dash(r.Name),
			dash(strings.Join(r.Nodes, ",")), r.State, dash(scheduler.ExitStatus(r.ExitCode)),
			stamp(r.Started), stamp(r.Ended), duration(r))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func duration(r scheduler.Run) string {
	if d := r.Duration(); d > 0 {
		return d.Round(time.Second).String()
	}
	if !r.Final() && !r.Started.IsZero() {
		return time.Since(r.Started).Round(time.Second).String() + "+"
	}
	return "-"
}
