package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/rollup"
)

// newRunsShowCmd prints a run's summary from the summary topic the rollup
// worker keeps, so it answers without the lake.
func newRunsShowCmd() *cobra.Command {
	var format, topic string
	var timeout time.Duration
	var kf kafkaFlags
	cmd := &cobra.Command{
		Use:   "show <run>",
		Short: "Show a run's summary: per metric count, min, mean, max, p95, last; wall time, nodes, exit state",
		Long: `Show the summary of an ended run, as the rollup worker (` + "`simtel rollup`" + `, or
` + "`simtel dev`" + `) wrote it to the compacted topic "summary.runs" once the run
registry said the run ended: per metric (measurement.field, over all the
run's series and nodes) count, min, mean, max, p50/p95/p99 and last, and the
run's wall time, nodes, exit state and the policy versions its samples
report (the distinct values of their field policy_version). Samples that arrive after the run
ended amend it. The lake holds the same rows as table summary.runs
(docs/rollups.md, "Run summaries").`,
		Example: `  simtel runs show 4242 --brokers broker1:9092
  simtel runs show 4242 --format json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "table" && format != "json" {
				return fmt.Errorf("--format %q is not table or json", format)
			}
			brokers, opts, err := kf.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			s, ok, err := rollup.ReadSummary(ctx, rollup.Config{Brokers: brokers, ClientOpts: opts, SummaryTopic: topic}, args[0])
			if err != nil {
				return fmt.Errorf("cannot read the summary of run %q from %s within %v: is `simtel broker` running there? (%w)", args[0], kf.brokers, timeout, err)
			}
			if !ok {
				return fmt.Errorf("no summary of run %q on topic %s yet: a summary appears once the run has ended and `simtel rollup` has read its samples", args[0], topic)
			}
			return printSummary(stdout(), s, format)
		},
	}
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&format, "format", "table", "output format: table or json")
	f.StringVar(&topic, "topic", rollup.DefaultSummaryTopic, "the rollup worker's summary topic")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	return cmd
}

// printSummary prints a run summary as JSON, or as the run's figures
// followed by a table of its metrics.
func printSummary(w io.Writer, s rollup.Summary, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	exit := "-"
	if s.ExitCode != nil {
		exit = strconv.Itoa(*s.ExitCode)
	}
	wall := "-"
	if s.WallTime > 0 {
		wall = (time.Duration(s.WallTime * float64(time.Second))).Round(time.Second).String()
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"run", s.Run}, {"job", dash(s.JobID)}, {"user", dash(s.User)}, {"name", dash(s.Name)},
		{"state", dash(s.State)}, {"exit", exit}, {"reason", dash(s.Reason)},
		{"start", stamp(s.Started)}, {"end", stamp(s.Ended)}, {"wall time", wall},
		{"nodes", dash(strings.Join(s.Nodes, ","))}, {"hosts", dash(strings.Join(s.Hosts, ","))},
		{"policy versions", dash(strings.Trim(strings.Join(strings.Fields(fmt.Sprint(s.PolicyVersions)), ","), "[]"))},
		{"updated", stamp(s.Updated)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	if s.DroppedSamples > 0 {
		fmt.Fprintf(tw, "dropped:\t%d values of metrics over the worker's --max-run-metrics\n", s.DroppedSamples)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "METRIC\tCOUNT\tMIN\tMEAN\tMAX\tP95\tLAST\t")
	for _, m := range s.Metrics {
		last := "-"
		if m.Last != nil {
			last = fmt.Sprint(m.Last)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", m.Metric, m.Count, num(m.Min), num(m.Mean), num(m.Max), num(m.P95), last)
	}
	return tw.Flush()
}

func num(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'g', 6, 64)
}
