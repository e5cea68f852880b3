package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

type globalFlags struct {
	logLevel  string
	logFormat string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "simtel",
		Short: "Telemetry pipeline for HPC simulation",
		Long: `simtel moves telemetry from simulation nodes through a Kafka-compatible
broker into a Parquet lake, and fans policy weights out to workers.

Every flag can also be set with an environment variable SIMTEL_<FLAG>, for
example SIMTEL_DATA_DIR for --data-dir. A flag on the command line wins.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			releaseStartupMemory(cmd)
			return applyEnv(cmd)
		},
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(newDevCmd(g), newBrokerCmd(g), newAgentCmd(g), newTopicCmd(), newGroupCmd(), newLearnerCmd(g))
	root.AddCommand(newClusterCmd(), newUserCmd(), newACLCmd())
	root.AddCommand(newBenchCmd(g), newLakeCmd(g), newSinkCmd(g), newRollupCmd(g))
	root.AddCommand(newSlurmCmd(g), newRunsCmd(g), newSchedulerCmd(g))
	return root
}

// logger builds the process logger from the global flags.
func (g *globalFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q is not debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch g.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q is not text or json", g.logFormat)
	}
}

// applyEnv sets every flag not given on the command line from
// SIMTEL_<NAME>, with dashes as underscores.
func applyEnv(cmd *cobra.Command) error {
	var err error
	set := func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		key := "SIMTEL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(key); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("environment %s=%q is not valid for --%s: %w", key, v, f.Name, e)
			}
			f.Changed = true
		}
	}
	cmd.Flags().VisitAll(set)
	cmd.InheritedFlags().VisitAll(set)
	return err
}
