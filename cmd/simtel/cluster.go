package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/internal/admin"
)

func newClusterCmd() *cobra.Command {
	return newAdminCmd(&cobra.Command{
		Use:   "cluster",
		Short: "Show the brokers of a cluster and how partitions are spread over them",
		Long: `Inspect and rebalance a simtel broker cluster (status works on any Kafka-compatible cluster).

Replicas and leaders are spread by the brokers themselves: with
--auto-rebalance (the default) the controller moves replicas and preferred
leaders to a broker that joins, re-creates the replicas of a broker gone for
--replica-replace-after, and hands leadership back to each partition's first
replica once its broker is back. See docs/broker-cluster.md, "Reassignment".`,
	}, newClusterStatusCmd, newClusterRebalanceCmd)
}

func newClusterStatusCmd(a *adminFlags) *cobra.Command {
	var topics []string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Brokers, replicas and leaders per broker, and partitions that are under-replicated, moving or leaderless",
		Example: `  simtel cluster status --brokers 127.0.0.1:9092
  simtel cluster status --topic telemetry -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				out, err := cl.Status(ctx, topics...)
				if err != nil {
					return err
				}
				return a.emit(stdout(), out, func(tw *tabwriter.Writer) { printClusterStatus(tw, out) })
			})
		},
	}
	cmd.Flags().StringSliceVar(&topics, "topic", nil, "only these topics (comma-separated; default all)")
	return cmd
}

func printClusterStatus(tw *tabwriter.Writer, out *admin.ClusterStatus) {
	fmt.Fprintln(tw, "BROKER\tADDRESS\tREPLICAS\tLEADERS\tPREFERRED LEADERS")
	for _, b := range out.Brokers {
		id := fmt.Sprint(b.ID)
		if b.Controller {
			id += " (controller)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", id, b.Address, b.Replicas, b.Leaders, b.Preferred)
	}
	fmt.Fprintf(tw, "\n%d partitions, %d under-replicated, moving or without a leader\n", out.Partitions, len(out.Problems))
	if len(out.Problems) == 0 {
		return
	}
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tPROBLEM\tLEADER\tREPLICAS\tALIVE REPLICAS")
	for _, p := range out.Problems {
		isr := slices.Clone(p.ISR)
		slices.Sort(isr)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%v\t%v\n", p.Topic, p.Partition, p.Problem, p.Leader, p.Replicas, isr)
	}
}

func newClusterRebalanceCmd(a *adminFlags) *cobra.Command {
	var dryRun, wait bool
	cmd := &cobra.Command{
		Use:   "rebalance",
		Short: "Move replicas and preferred leaders so every alive broker holds its share",
		Long: `Compute the moves that spread the replicas and preferred leaders of all
replicated partitions evenly over the alive brokers (the policy the
controller applies by itself with --auto-rebalance, which is on by default),
and send them as partition reassignments to the controller. Each partition
then moves through raft membership changes while clients keep writing:
the new replica is added, catches up, becomes a voter, the old one is
removed and deletes its files. Leadership follows the preferred leaders.

Refused while partitions are still moving or while a broker that holds
replicas is not alive.`,
		Example: `  simtel cluster rebalance --brokers 127.0.0.1:9092 --dry-run
  simtel cluster rebalance --brokers 127.0.0.1:9092 --wait --timeout 10m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				return rebalance(ctx, cl, dryRun, wait, a.timeout)
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the moves without sending them")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every move has finished (bounded by --timeout)")
	return cmd
}

// rebalance prints the moves that spread the partitions evenly and, unless
// dryRun, sends them; with wait it waits until they finish.
func rebalance(ctx context.Context, cl *admin.Client, dryRun, wait bool, timeout time.Duration) error {
	moving, err := cl.Moving(ctx)
	if err != nil {
		return err
	}
	if moving > 0 {
		return fmt.Errorf("%d partitions are still moving; run again when `simtel cluster status` shows none moving", moving)
	}
	plan, err := cl.PlanRebalance(ctx)
	if err != nil {
		return err
	}
	if len(plan.Moves) == 0 {
		fmt.Fprintln(stdout(), "replicas and preferred leaders are already spread evenly; nothing to move")
		return nil
	}
	for _, m := range plan.Moves {
		fmt.Fprintf(stdout(), "%s/%d: %v -> %v\n", m.Topic, m.Partition, m.From, m.To)
	}
	if dryRun {
		fmt.Fprintf(stdout(), "%d partitions would move (dry run)\n", len(plan.Moves))
		return nil
	}
	if err := cl.Rebalance(ctx, plan); err != nil {
		return err
	}
	fmt.Fprintf(stdout(), "%d partitions are moving\n", len(plan.Moves))
	if !wait {
		return nil
	}
	var pending *admin.MovesPendingError
	if err := cl.WaitMoves(ctx); errors.As(err, &pending) {
		return fmt.Errorf("moves not finished within --timeout %v (last: %d moving, %v); see `simtel cluster status`", timeout, pending.Moving, pending.Last)
	} else if err != nil {
		return err
	}
	fmt.Fprintln(stdout(), "all moves finished")
	return nil
}
