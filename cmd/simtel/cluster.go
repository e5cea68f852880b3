package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker"
)

func newClusterCmd() *cobra.Command {
	a := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show the brokers of a cluster and how partitions are spread over them",
		Long: `Inspect and rebalance a simtel broker cluster (status works on any Kafka-compatible cluster).

Replicas and leaders are spread by the brokers themselves: with
--auto-rebalance (the default) the controller moves replicas and preferred
leaders to a broker that joins, re-creates the replicas of a broker gone for
--replica-replace-after, and hands leadership back to each partition's first
replica once its broker is back. See docs/broker.md, "Reassignment".`,
	}
	a.register(cmd)

	var topics []string
	status := &cobra.Command{
		Use:   "status",
		Short: "Brokers, replicas and leaders per broker, and partitions that are under-replicated, moving or leaderless",
		Example: `  simtel cluster status --brokers 127.0.0.1:9092
  simtel cluster status --topic telemetry -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, ctx, done, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			md, err := adm.Metadata(ctx, topics...)
			if err != nil {
				return a.reachErr(err)
			}
			type brokerRow struct {
				ID         int32  `json:"id"`
				Address    string `json:"address"`
				Controller bool   `json:"controller"`
				Replicas   int    `json:"replicas"`
				Leaders    int    `json:"leaders"`
				Preferred  int    `json:"preferred_leaders"`
			}
			type problem struct {
				Topic     string  `json:"topic"`
				Partition int32   `json:"partition"`
				Leader    int32   `json:"leader"`
				Replicas  []int32 `json:"replicas"`
				ISR       []int32 `json:"isr"`
				Problem   string  `json:"problem"`
			}
			var out struct {
				Brokers    []brokerRow `json:"brokers"`
				Partitions int         `json:"partitions"`
				Problems   []problem   `json:"problems"`
			}
			rows := map[int32]*brokerRow{}
			for _, b := range md.Brokers {
				rows[b.NodeID] = &brokerRow{ID: b.NodeID, Address: fmt.Sprintf("%s:%d", b.Host, b.Port), Controller: b.NodeID == md.Controller}
			}
			row := func(id int32) *brokerRow {
				if rows[id] == nil {
					// A replica on a broker that is not alive: listed so
					// its share shows.
					rows[id] = &brokerRow{ID: id, Address: "(not alive)"}
				}
				return rows[id]
			}
			for _, t := range md.Topics.Sorted() {
				if t.Err != nil {
					return fmt.Errorf("cannot describe topic %q: %w", t.Topic, t.Err)
				}
				// The topic's replication factor is its most common
				// replica count; a partition with more is moving.
				counts := map[int]int{}
				for _, p := range t.Partitions {
					counts[len(p.Replicas)]++
				}
				rf := 0
				for n, c := range counts {
					if c > counts[rf] || (c == counts[rf] && n < rf) {
						rf = n
					}
				}
				for _, p := range t.Partitions.Sorted() {
					out.Partitions++
					for j, r := range p.Replicas {
						row(r).Replicas++
						if j == 0 {
							row(r).Preferred++
						}
					}
					if p.Leader >= 0 {
						row(p.Leader).Leaders++
					}
					pr := problem{Topic: t.Topic, Partition: p.Partition, Leader: p.Leader, Replicas: p.Replicas, ISR: p.ISR}
					switch {
					case p.Leader < 0:
						pr.Problem = "no leader"
					case len(p.Replicas) > rf:
						pr.Problem = "moving"
					case len(p.ISR) < len(p.Replicas):
						pr.Problem = "under-replicated"
					default:
						continue
					}
					out.Problems = append(out.Problems, pr)
				}
			}
			for _, r := range rows {
				out.Brokers = append(out.Brokers, *r)
			}
			sort.Slice(out.Brokers, func(i, j int) bool { return out.Brokers[i].ID < out.Brokers[j].ID })
			return a.emit(stdout(), out, func(tw *tabwriter.Writer) {
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
			})
		},
	}
	status.Flags().StringSliceVar(&topics, "topic", nil, "only these topics (comma-separated; default all)")

	var dryRun, wait bool
	rebalance := &cobra.Command{
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
			raw, adm, ctx, done, err := a.clients(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			moving, err := listMoving(ctx, raw)
			if err != nil {
				return a.reachErr(err)
			}
			if n := moving; n > 0 {
				return fmt.Errorf("%d partitions are still moving; run again when `simtel cluster status` shows none moving", n)
			}
			md, err := adm.Metadata(ctx)
			if err != nil {
				return a.reachErr(err)
			}
			var brokers []int32
			for _, b := range md.Brokers {
				brokers = append(brokers, b.NodeID)
			}
			current := map[string][][]int32{}
			for _, t := range md.Topics.Sorted() {
				if t.IsInternal || t.Err != nil {
					continue
				}
				for _, p := range t.Partitions.Sorted() {
					for _, r := range p.Replicas {
						if !slices.Contains(brokers, r) {
							return fmt.Errorf("broker %d holds replicas (%s/%d) but is not alive: start it again, or wait until its replicas are re-created elsewhere (--replica-replace-after)", r, t.Topic, p.Partition)
						}
					}
					current[t.Topic] = append(current[t.Topic], p.Replicas)
				}
			}
			plan := broker.PlanRebalance(brokers, current)
			req := kadm.AlterPartitionAssignmentsReq{}
			n := 0
			for topic, parts := range plan {
				for p, replicas := range parts {
					req.Assign(topic, p, replicas)
					n++
				}
			}
			if n == 0 {
				fmt.Fprintln(stdout(), "replicas and preferred leaders are already spread evenly; nothing to move")
				return nil
			}
			names := make([]string, 0, len(plan))
			for topic := range plan {
				names = append(names, topic)
			}
			sort.Strings(names)
			for _, topic := range names {
				parts := make([]int32, 0, len(plan[topic]))
				for p := range plan[topic] {
					parts = append(parts, p)
				}
				slices.Sort(parts)
				for _, p := range parts {
					fmt.Fprintf(stdout(), "%s/%d: %v -> %v\n", topic, p, current[topic][p], plan[topic][p])
				}
			}
			if dryRun {
				fmt.Fprintf(stdout(), "%d partitions would move (dry run)\n", n)
				return nil
			}
			resps, err := adm.AlterPartitionAssignments(ctx, req)
			if err != nil {
				return a.reachErr(fmt.Errorf("cannot send the reassignments: %w", err))
			}
			var failed []string
			for _, r := range resps.Sorted() {
				if r.Err != nil {
					msg := r.Err.Error()
					if r.ErrMessage != "" {
						msg = r.ErrMessage
					}
					failed = append(failed, fmt.Sprintf("%s/%d: %s", r.Topic, r.Partition, msg))
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("cannot reassign %d of %d partitions: %s", len(failed), n, strings.Join(failed, "; "))
			}
			fmt.Fprintf(stdout(), "%d partitions are moving\n", n)
			if !wait {
				return nil
			}
			for {
				moving, err := listMoving(ctx, raw)
				if err == nil && moving == 0 {
					fmt.Fprintln(stdout(), "all moves finished")
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("moves not finished within --timeout %v (last: %d moving, %v); see `simtel cluster status`", a.timeout, moving, err)
				case <-time.After(time.Second):
				}
			}
		},
	}
	rebalance.Flags().BoolVar(&dryRun, "dry-run", false, "print the moves without sending them")
	rebalance.Flags().BoolVar(&wait, "wait", false, "wait until every move has finished (bounded by --timeout)")
	cmd.AddCommand(status, rebalance)
	return cmd
}

// listMoving counts the partitions the controller shows moving
// (ListPartitionReassignments for all topics: kadm only asks for named
// ones).
func listMoving(ctx context.Context, cl *kgo.Client) (int, error) {
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	req.Topics = nil
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("cannot list reassignments in progress: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		msg := ""
		if resp.ErrorMessage != nil {
			msg = *resp.ErrorMessage
		}
		return 0, fmt.Errorf("cannot list reassignments in progress (is this a simtel cluster?): %w: %s", err, msg)
	}
	n := 0
	for _, t := range resp.Topics {
		n += len(t.Partitions)
	}
	return n, nil
}
