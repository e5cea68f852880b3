package main

import (
	"log/slog"

	"github.com/spf13/cobra"
)

// withLogger is the RunE of a command that takes no arguments and needs
// the process logger: it builds the logger from the global flags and hands
// it to run.
func (g *globalFlags) withLogger(run func(cmd *cobra.Command, log *slog.Logger) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		log, err := g.logger()
		if err != nil {
			return err
		}
		return run(cmd, log)
	}
}
