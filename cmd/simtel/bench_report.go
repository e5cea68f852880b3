package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/simtel/simtel/bench"
)

func newBenchReportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Collect benchmark steps into a run and publish it",
		Long: `Used by bench/compare.sh: "add" appends one step's output to a run file,
"publish" writes bench/results/<id>.json and <id>.svg and rewrites the
results section of bench/docs/produce-consume.md.`,
	}

	var kind, serverSync string
	var step stepFlags
	add := step.addCmd(func(output []byte) error {
		return bench.AddStep(step.run, kind, step.label, step.command, serverSync, step.failure, output)
	})
	add.Example = `  simtel bench produce --json ... > p.json
  simtel bench report add --run run.json --kind produce --label produce --command "..." --input p.json
  nats bench js pub async ... | simtel bench report add --run run.json --kind jetstream --label "js async" --command "..."`
	f := add.Flags()
	step.register(f, "the exact command that produced the output", "file with the step's output, - for stdin",
		"how the step's command failed (recorded; its figures are left out of the summary)")
	f.StringVar(&kind, "kind", "", "disk, produce, consume (their --json output) or jetstream (nats bench text output)")
	f.StringVar(&serverSync, "server-sync", "", "jetstream: the server's sync_interval (empty: its default)")

	publish := newPublishCmd("Write a run's results file and chart and update the README", bench.Publish,
		func(path string) (any, error) {
			r, err := bench.ReadRun(path)
			if err != nil {
				return nil, err
			}
			return r.Summary, nil
		}, "bench/results", "results", "bench/compare.sh", "bench/docs/produce-consume.md")
	cmd.AddCommand(add, publish)
	return cmd
}

func newBenchAgentReportCmd() *cobra.Command {
	return newStepReportCmd("agent-report", "agent cost", "bench/agent-cost.sh", "simtel bench agent",
		"bench/results/agent-cost", "agent results", "bench/docs/agent.md", bench.AddAgentStep, bench.PublishAgent)
}

// newStepReportCmd builds the add/publish pair the benchmark scripts use to
// collect one benchmark's steps into a run and publish it.
func newStepReportCmd(use, what, script, producer, resultsDir, section, page string,
	addStep func(run, label, command, failure string, output []byte) error,
	publishRun func(bench.PublishConfig) (string, error)) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: "Collect " + what + " steps into a run and publish it",
		Long: fmt.Sprintf(`Used by %s: "add" appends one step's output (%s
--json) to a run file, "publish" writes %s/<id>.json and
rewrites the %s in %s.`, script, producer, resultsDir, section, page),
	}
	var step stepFlags
	add := step.addCmd(func(output []byte) error {
		return addStep(step.run, step.label, step.command, step.failure, output)
	})
	step.register(add.Flags(), "the exact commands of the step", "file with the step's JSON output, - for stdin", "how the step's command failed")
	publish := newPublishCmd("Write a run's results file and update the README", publishRun, nil, resultsDir, section, script, page)
	cmd.AddCommand(add, publish)
	return cmd
}

// stepFlags are the flags of a report's add command.
type stepFlags struct{ run, label, command, failure, input string }

func (s *stepFlags) register(f *pflag.FlagSet, commandHelp, inputHelp, failedHelp string) {
	f.StringVar(&s.run, "run", "", "run file to append to (created if missing)")
	f.StringVar(&s.label, "label", "", "name of the step")
	f.StringVar(&s.command, "command", "", commandHelp)
	f.StringVar(&s.input, "input", "-", inputHelp)
	f.StringVar(&s.failure, "failed", "", failedHelp)
}

// addCmd is a report's add command: it reads the step's output from
// --input (a file or, for "-", stdin) and gives it to addStep.
func (s *stepFlags) addCmd(addStep func(output []byte) error) *cobra.Command {
	return &cobra.Command{
		Use:   "add",
		Short: "Append a step's output to a run file",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b, err := readFileOrStdin(s.input)
			if err != nil {
				return fmt.Errorf("cannot read step output: %w", err)
			}
			return addStep(b)
		},
	}
}

// readFileOrStdin reads the file at path, or standard input for "-".
func readFileOrStdin(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(path)
}

// newPublishCmd is a report's publish command: publishRun writes the run's
// results file as the flags say, the command prints its path and, with
// summary, the JSON of what summary reads back from it (read before the
// path is printed, so that a run that cannot be read prints nothing).
func newPublishCmd(short string, publishRun func(bench.PublishConfig) (string, error), summary func(path string) (any, error),
	resultsDir, section, script, page string) *cobra.Command {
	var p bench.PublishConfig
	cmd := &cobra.Command{
		Use:   "publish",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			path, err := publishRun(p.WithDefaults())
			if err != nil {
				return err
			}
			var sum any
			if summary != nil {
				if sum, err = summary(path); err != nil {
					return err
				}
			}
			fmt.Fprintf(os.Stdout, "wrote %s\n", path)
			if summary == nil {
				return nil
			}
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(sum)
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.RunPath, "run", "", "run file made by add (required)")
	f.StringVar(&p.ResultsDir, "results-dir", resultsDir, "where <id>.json goes")
	f.StringVar(&p.README, "readme", page, "file whose "+section+" section is rewritten (empty: none)")
	f.StringVar(&p.ID, "id", time.Now().UTC().Format("2006-01-02-150405"), "name of the results file")
	f.StringVar(&p.Date, "date", "", "date of the run, RFC 3339 (default: now)")
	f.StringVar(&p.Host, "host", "", "description of the machine")
	f.StringVar(&p.Command, "command", script, "how the run was started")
	_ = cmd.MarkFlagRequired("run")
	return cmd
}

func newBenchFanoutReportCmd() *cobra.Command {
	return newStepReportCmd("fanout-report", "fan-out", "bench/fanout.sh", "simtel bench fanout",
		"bench/results/fanout", "fan-out results", "bench/docs/fanout.md", bench.AddFanoutStep, bench.PublishFanout)
}
