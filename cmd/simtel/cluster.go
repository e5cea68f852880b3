package main

import (
	"fmt"
	"slices"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newClusterCmd() *cobra.Command {
	a := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show the brokers of a cluster and how partitions are spread over them",
		Long: `Inspect a simtel broker cluster (any Kafka-compatible cluster works).

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
	cmd.AddCommand(status)
	return cmd
}
