package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func newGroupCmd() *cobra.Command {
	a := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "group",
		Short: "List and describe consumer groups, reset their offsets",
	}
	a.register(cmd)

	list := &cobra.Command{
		Use:   "list",
		Short: "List consumer groups and their states",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, ctx, done, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			lg, err := adm.ListGroups(ctx)
			if err != nil {
				return a.reachErr(err)
			}
			type row struct {
				Group        string `json:"group"`
				State        string `json:"state"`
				ProtocolType string `json:"protocol_type"`
			}
			var rows []row
			for _, g := range lg.Sorted() {
				rows = append(rows, row{g.Group, g.State, g.ProtocolType})
			}
			return a.emit(stdout(), rows, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "GROUP\tSTATE\tTYPE")
				for _, r := range rows {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Group, r.State, r.ProtocolType)
				}
			})
		},
	}

	describe := &cobra.Command{
		Use:   "describe GROUP",
		Short: "Show a group's members, assignments, committed offsets and lag",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			adm, ctx, done, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			lags, err := adm.Lag(ctx, args[0])
			if err != nil {
				return a.reachErr(err)
			}
			g, ok := lags[args[0]]
			if !ok {
				return fmt.Errorf("group %q not found: see `simtel group list`", args[0])
			}
			if err := g.Error(); err != nil {
				return fmt.Errorf("cannot describe group %q: %w", args[0], err)
			}
			type row struct {
				Topic     string `json:"topic"`
				Partition int32  `json:"partition"`
				Committed int64  `json:"committed"`
				End       int64  `json:"end"`
				Lag       int64  `json:"lag"`
				Member    string `json:"member,omitempty"`
			}
			out := struct {
				Group    string `json:"group"`
				State    string `json:"state"`
				Protocol string `json:"protocol"`
				Members  int    `json:"members"`
				Offsets  []row  `json:"offsets"`
				TotalLag int64  `json:"total_lag"`
			}{Group: g.Group, State: g.State, Protocol: g.Protocol, Members: len(g.Members)}
			for _, l := range g.Lag.Sorted() {
				r := row{Topic: l.Topic, Partition: l.Partition, Committed: l.Commit.At, End: l.End.Offset, Lag: l.Lag}
				if l.Member != nil {
					r.Member = l.Member.ClientID + " " + l.Member.MemberID
				}
				out.Offsets = append(out.Offsets, r)
				if l.Lag > 0 {
					out.TotalLag += l.Lag
				}
			}
			return a.emit(stdout(), out, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "group %s: %s, protocol %q, %d members, total lag %d\n\n", out.Group, out.State, out.Protocol, out.Members, out.TotalLag)
				fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tMEMBER")
				for _, r := range out.Offsets {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", r.Topic, r.Partition, r.Committed, r.End, r.Lag, r.Member)
				}
			})
		},
	}

	var topics []string
	var toEarliest, toLatest, execute bool
	var toOffset, shiftBy int64
	var toDatetime string
	reset := &cobra.Command{
		Use:   "reset-offsets GROUP",
		Short: "Move a group's committed offsets (dry run unless --execute)",
		Long: `Move a group's committed offsets for the given topics. Exactly one of
--to-earliest, --to-latest, --to-offset, --to-datetime or --shift-by chooses
the target. Without --execute the plan is printed and nothing changes. The
group must have no active members (stop its consumers first).`,
		Example: "  simtel group reset-offsets sink --topic telemetry --to-earliest --execute\n  simtel group reset-offsets sink --topic telemetry --to-datetime 2026-11-29T10:00:00Z",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			modes := 0
			for _, set := range []bool{toEarliest, toLatest, cmd.Flags().Changed("to-offset"), toDatetime != "", cmd.Flags().Changed("shift-by")} {
				if set {
					modes++
				}
			}
			if modes != 1 {
				return fmt.Errorf("choose exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by")
			}
			if len(topics) == 0 {
				return fmt.Errorf("name the topics to reset with --topic")
			}
			group := args[0]
			adm, ctx, done, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var listed kadm.ListedOffsets
			switch {
			case toEarliest:
				listed, err = adm.ListStartOffsets(ctx, topics...)
			case toLatest:
				listed, err = adm.ListEndOffsets(ctx, topics...)
			case toDatetime != "":
				ts, perr := time.Parse(time.RFC3339, toDatetime)
				if perr != nil {
					return fmt.Errorf("--to-datetime %q is not RFC 3339 (2026-11-29T10:00:00Z): %w", toDatetime, perr)
				}
				listed, err = adm.ListOffsetsAfterMilli(ctx, ts.UnixMilli(), topics...)
			default:
				listed, err = adm.ListEndOffsets(ctx, topics...)
			}
			if err != nil {
				return a.reachErr(err)
			}
			if err := listed.Error(); err != nil {
				return fmt.Errorf("cannot list offsets of %s: %w", strings.Join(topics, ","), err)
			}
			current, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				return fmt.Errorf("cannot fetch committed offsets of %q: %w", group, err)
			}
			target := kadm.Offsets{}
			listed.Each(func(o kadm.ListedOffset) {
				at := o.Offset
				switch {
				case cmd.Flags().Changed("to-offset"):
					at = toOffset
				case cmd.Flags().Changed("shift-by"):
					c, ok := current.Lookup(o.Topic, o.Partition)
					if ok && c.At >= 0 {
						at = c.At + shiftBy
					} else {
						at = shiftBy
					}
					at = max(at, 0)
				}
				target.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: at, LeaderEpoch: -1})
			})
			tw := tabwriter.NewWriter(stdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW")
			target.Each(func(o kadm.Offset) {
				cur := int64(-1)
				if c, ok := current.Lookup(o.Topic, o.Partition); ok {
					cur = c.At
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", o.Topic, o.Partition, cur, o.At)
			})
			tw.Flush()
			if !execute {
				fmt.Fprintln(stdout(), "dry run: nothing changed; add --execute to commit these offsets")
				return nil
			}
			resp, err := adm.CommitOffsets(ctx, group, target)
			if err != nil {
				return fmt.Errorf("cannot commit offsets for %q: %w", group, err)
			}
			if err := resp.Error(); err != nil {
				return fmt.Errorf("cannot commit offsets for %q (are its consumers still running?): %w", group, err)
			}
			fmt.Fprintf(stdout(), "offsets of %s reset\n", group)
			return nil
		},
	}
	reset.Flags().StringSliceVarP(&topics, "topic", "t", nil, "topics to reset (repeatable or comma-separated)")
	reset.Flags().BoolVar(&toEarliest, "to-earliest", false, "reset to each partition's log start")
	reset.Flags().BoolVar(&toLatest, "to-latest", false, "reset to each partition's end")
	reset.Flags().Int64Var(&toOffset, "to-offset", 0, "reset every partition to this offset")
	reset.Flags().StringVar(&toDatetime, "to-datetime", "", "reset to the first record at or after this RFC 3339 time")
	reset.Flags().Int64Var(&shiftBy, "shift-by", 0, "move each committed offset by this many records (negative: back)")
	reset.Flags().BoolVar(&execute, "execute", false, "commit the new offsets (default: dry run)")

	cmd.AddCommand(list, describe, reset)
	return cmd
}
