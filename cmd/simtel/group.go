package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/internal/admin"
)

func newGroupCmd() *cobra.Command {
	return newAdminCmd(&cobra.Command{
		Use:   "group",
		Short: "List and describe consumer groups, reset their offsets",
	}, newGroupListCmd, newGroupDescribeCmd, newGroupResetCmd)
}

func newGroupListCmd(a *adminFlags) *cobra.Command {
	return newAdminListCmd(a, "List consumer groups and their states", (*admin.Client).ListGroups,
		"GROUP\tSTATE\tTYPE", func(w io.Writer, r admin.GroupSummary) {
			fmt.Fprintf(w, "%s\t%s\t%s\n", r.Group, r.State, r.ProtocolType)
		})
}

func newGroupDescribeCmd(a *adminFlags) *cobra.Command {
	return newAdminDescribeCmd(a, "describe GROUP", "Show a group's members, assignments, committed offsets and lag",
		(*admin.Client).DescribeGroup, admin.ErrUnknownGroup, "group %q not found: see `simtel group list`", printGroup)
}

func printGroup(tw *tabwriter.Writer, g *admin.GroupDetail) {
	fmt.Fprintf(tw, "group %s: %s, protocol %q, %d members, total lag %d\n\n", g.Group, g.State, g.Protocol, g.Members, g.TotalLag)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tMEMBER")
	for _, r := range g.Offsets {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", r.Topic, r.Partition, r.Committed, r.End, r.Lag, r.Member)
	}
}

// groupResetFlags are reset-offsets' flags.
type groupResetFlags struct {
	topics                        []string
	toEarliest, toLatest, execute bool
	toOffset, shiftBy             int64
	toDatetime                    string
}

func newGroupResetCmd(a *adminFlags) *cobra.Command {
	var f groupResetFlags
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP",
		Short: "Move a group's committed offsets (dry run unless --execute)",
		Long: `Move a group's committed offsets for the given topics. Exactly one of
--to-earliest, --to-latest, --to-offset, --to-datetime or --shift-by chooses
the target. Without --execute the plan is printed and nothing changes. The
group must have no active members (stop its consumers first).`,
		Example: "  simtel group reset-offsets sink --topic telemetry --to-earliest --execute\n  simtel group reset-offsets sink --topic telemetry --to-datetime 2026-11-29T10:00:00Z",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGroupReset(cmd, a, &f, args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVarP(&f.topics, "topic", "t", nil, "topics to reset (repeatable or comma-separated)")
	fl.BoolVar(&f.toEarliest, "to-earliest", false, "reset to each partition's log start")
	fl.BoolVar(&f.toLatest, "to-latest", false, "reset to each partition's end")
	fl.Int64Var(&f.toOffset, "to-offset", 0, "reset every partition to this offset")
	fl.StringVar(&f.toDatetime, "to-datetime", "", "reset to the first record at or after this RFC 3339 time")
	fl.Int64Var(&f.shiftBy, "shift-by", 0, "move each committed offset by this many records (negative: back)")
	fl.BoolVar(&f.execute, "execute", false, "commit the new offsets (default: dry run)")
	return cmd
}

// target reads the one target flag given.
func (f *groupResetFlags) target(cmd *cobra.Command) (admin.ResetTarget, error) {
	modes := map[admin.ResetTarget]bool{
		admin.ToEarliest: f.toEarliest,
		admin.ToLatest:   f.toLatest,
		admin.ToOffset:   cmd.Flags().Changed("to-offset"),
		admin.ToTime:     f.toDatetime != "",
		admin.ShiftBy:    cmd.Flags().Changed("shift-by"),
	}
	var chosen []admin.ResetTarget
	for t, set := range modes {
		if set {
			chosen = append(chosen, t)
		}
	}
	if len(chosen) != 1 {
		return 0, fmt.Errorf("choose exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by")
	}
	return chosen[0], nil
}

func runGroupReset(cmd *cobra.Command, a *adminFlags, f *groupResetFlags, group string) error {
	target, err := f.target(cmd)
	if err != nil {
		return err
	}
	if len(f.topics) == 0 {
		return fmt.Errorf("name the topics to reset with --topic")
	}
	return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
		r := admin.Reset{Group: group, Topics: f.topics, Target: target, Offset: f.toOffset, Shift: f.shiftBy}
		if target == admin.ToTime {
			if r.Time, err = time.Parse(time.RFC3339, f.toDatetime); err != nil {
				return fmt.Errorf("--to-datetime %q is not RFC 3339 (2026-11-29T10:00:00Z): %w", f.toDatetime, err)
			}
		}
		return resetGroup(ctx, cl, r, f.execute)
	})
}

// resetGroup prints the plan of r and, with execute, commits it.
func resetGroup(ctx context.Context, cl *admin.Client, r admin.Reset, execute bool) error {
	plan, err := cl.PlanReset(ctx, r)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW")
	for _, m := range plan.Moves {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", m.Topic, m.Partition, m.Current, m.New)
	}
	tw.Flush()
	if !execute {
		fmt.Fprintln(stdout(), "dry run: nothing changed; add --execute to commit these offsets")
		return nil
	}
	if err := cl.CommitReset(ctx, plan); err != nil {
		return err
	}
	fmt.Fprintf(stdout(), "offsets of %s reset\n", r.Group)
	return nil
}
