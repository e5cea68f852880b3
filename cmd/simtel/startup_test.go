package main

import (
	"testing"

	"github.com/spf13/cobra"
)

// Every command named long-running exists and runs something, so that a
// renamed command does not silently keep its start-up garbage.
func TestLongRunningCommandsExist(t *testing.T) {
	paths := map[string]*cobra.Command{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		paths[c.CommandPath()] = c
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	for p := range longRunning {
		c, ok := paths[p]
		if !ok {
			t.Errorf("long-running command %q does not exist", p)
			continue
		}
		if !c.Runnable() {
			t.Errorf("long-running command %q runs nothing", p)
		}
	}
}
