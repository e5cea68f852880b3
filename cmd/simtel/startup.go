package main

import (
	"runtime/debug"

	"github.com/spf13/cobra"
)

// longRunning are the commands that serve until they are stopped.
var longRunning = map[string]bool{
	"simtel agent":      true,
	"simtel broker":     true,
	"simtel dev":        true,
	"simtel lake serve": true,
	"simtel rollup":     true,
	"simtel scheduler":  true,
	"simtel sink":       true,
}

// releaseStartupMemory hands the garbage of package initialisation back to
// the OS before a long-running command starts its work. Every command pays
// the init of every package linked into the one binary, and some allocate
// tens of MB there and keep little of it (iceberg-go's table/substrait
// parses its extension YAML: `GODEBUG=inittrace=1 simtel --help`). The
// runtime's background scavenger would return those pages only slowly,
// and a process that holds them looks that much larger for hours. A short
// command exits before it matters, so it skips the forced collection.
func releaseStartupMemory(cmd *cobra.Command) {
	if longRunning[cmd.CommandPath()] {
		debug.FreeOSMemory()
	}
}
