// Command simtel is the telemetry pipeline for HPC simulation: broker,
// agent, learner, sink, lake and their tools in one binary.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "simtel:", err)
		os.Exit(1)
	}
}
