package admin

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker"
)

// BrokerShare is one broker of a ClusterStatus with its share of replicas,
// leaders and preferred leaders (first replicas).
type BrokerShare struct {
	ID         int32  `json:"id"`
	Address    string `json:"address"`
	Controller bool   `json:"controller"`
	Replicas   int    `json:"replicas"`
	Leaders    int    `json:"leaders"`
	Preferred  int    `json:"preferred_leaders"`
}

// PartitionProblem is a partition without a leader ("no leader"), with
// more replicas than its topic's replication factor ("moving"), or with
// replicas out of sync ("under-replicated").
type PartitionProblem struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Leader    int32   `json:"leader"`
	Replicas  []int32 `json:"replicas"`
	ISR       []int32 `json:"isr"`
	Problem   string  `json:"problem"`
}

// ClusterStatus is how partitions are spread over the brokers.
type ClusterStatus struct {
	Brokers    []BrokerShare      `json:"brokers"`
	Partitions int                `json:"partitions"`
	Problems   []PartitionProblem `json:"problems"`
}

// Status returns every broker's share of the partitions of topics (all
// topics when none), in broker id order, and the partitions with a
// problem. A broker that holds replicas but is not alive is listed with
// address "(not alive)".
func (c *Client) Status(ctx context.Context, topics ...string) (*ClusterStatus, error) {
	md, err := c.adm.Metadata(ctx, topics...)
	if err != nil {
		return nil, reach(err)
	}
	rows := map[int32]*BrokerShare{}
	for _, b := range md.Brokers {
		rows[b.NodeID] = &BrokerShare{ID: b.NodeID, Address: fmt.Sprintf("%s:%d", b.Host, b.Port), Controller: b.NodeID == md.Controller}
	}
	row := func(id int32) *BrokerShare {
		if rows[id] == nil {
			rows[id] = &BrokerShare{ID: id, Address: "(not alive)"}
		}
		return rows[id]
	}
	var out ClusterStatus
	for _, t := range md.Topics.Sorted() {
		if t.Err != nil {
			return nil, fmt.Errorf("cannot describe topic %q: %w", t.Topic, t.Err)
		}
		rf := replicationFactor(t.Partitions)
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
			if problem := partitionProblem(p, rf); problem != "" {
				out.Problems = append(out.Problems, PartitionProblem{Topic: t.Topic, Partition: p.Partition,
					Leader: p.Leader, Replicas: p.Replicas, ISR: p.ISR, Problem: problem})
			}
		}
	}
	for _, r := range rows {
		out.Brokers = append(out.Brokers, *r)
	}
	sort.Slice(out.Brokers, func(i, j int) bool { return out.Brokers[i].ID < out.Brokers[j].ID })
	return &out, nil
}

// replicationFactor is a topic's most common replica count (the smaller
// one on a tie): a partition with more replicas is moving.
func replicationFactor(ps kadm.PartitionDetails) int {
	counts := map[int]int{}
	for _, p := range ps {
		counts[len(p.Replicas)]++
	}
	rf := 0
	for n, c := range counts {
		if c > counts[rf] || (c == counts[rf] && n < rf) {
			rf = n
		}
	}
	return rf
}

// partitionProblem names what is wrong with p, or is empty.
func partitionProblem(p kadm.PartitionDetail, rf int) string {
	switch {
	case p.Leader < 0:
		return "no leader"
	case len(p.Replicas) > rf:
		return "moving"
	case len(p.ISR) < len(p.Replicas):
		return "under-replicated"
	}
	return ""
}

// Moving counts the partitions the controller shows moving. kadm's
// ListPartitionReassignments asks only for named partitions, so the
// request is sent with Topics nil: every partition.
func (c *Client) Moving(ctx context.Context) (int, error) {
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	req.Topics = nil
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return 0, reach(fmt.Errorf("cannot list reassignments in progress: %w", err))
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

// Move is one partition's new replica list in a RebalancePlan.
type Move struct {
	Topic     string
	Partition int32
	From, To  []int32
}

// RebalancePlan is the moves that spread replicas and preferred leaders
// evenly, in topic and partition order.
type RebalancePlan struct {
	Moves []Move
}

// PlanRebalance computes the moves that spread the replicas and preferred
// leaders of every non-internal topic evenly over the alive brokers (the
// controller's own policy, broker.PlanRebalance). It refuses while a
// broker that holds replicas is not alive.
func (c *Client) PlanRebalance(ctx context.Context) (*RebalancePlan, error) {
	md, err := c.adm.Metadata(ctx)
	if err != nil {
		return nil, reach(err)
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
					return nil, fmt.Errorf("broker %d holds replicas (%s/%d) but is not alive: start it again, or wait until its replicas are re-created elsewhere (--replica-replace-after)", r, t.Topic, p.Partition)
				}
			}
			current[t.Topic] = append(current[t.Topic], p.Replicas)
		}
	}
	plan := &RebalancePlan{}
	for topic, parts := range broker.PlanRebalance(brokers, current) {
		for p, replicas := range parts {
			plan.Moves = append(plan.Moves, Move{Topic: topic, Partition: p, From: current[topic][p], To: replicas})
		}
	}
	slices.SortFunc(plan.Moves, func(a, b Move) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return plan, nil
}

// Rebalance sends a plan's moves to the controller as partition
// reassignments.
func (c *Client) Rebalance(ctx context.Context, plan *RebalancePlan) error {
	req := kadm.AlterPartitionAssignmentsReq{}
	for _, m := range plan.Moves {
		req.Assign(m.Topic, m.Partition, m.To)
	}
	resps, err := c.adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		return reach(fmt.Errorf("cannot send the reassignments: %w", err))
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
		return fmt.Errorf("cannot reassign %d of %d partitions: %s", len(failed), len(plan.Moves), strings.Join(failed, "; "))
	}
	return nil
}

// MovesPendingError is WaitMoves running out of time: Moving partitions
// were still moving at the last look, or Last failed.
type MovesPendingError struct {
	Moving int
	Last   error
}

func (e *MovesPendingError) Error() string {
	return fmt.Sprintf("moves not finished (last: %d moving, %v)", e.Moving, e.Last)
}

// WaitMoves polls every second until no partition is moving. When ctx ends
// first it returns a *MovesPendingError.
func (c *Client) WaitMoves(ctx context.Context) error {
	for {
		moving, err := c.Moving(ctx)
		if err == nil && moving == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return &MovesPendingError{Moving: moving, Last: err}
		case <-time.After(time.Second):
		}
	}
}
