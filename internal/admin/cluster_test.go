package admin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

func TestReplicationFactorAndProblems(t *testing.T) {
	part := func(leader int32, replicas, isr []int32) kadm.PartitionDetail {
		return kadm.PartitionDetail{Leader: leader, Replicas: replicas, ISR: isr}
	}
	ps := kadm.PartitionDetails{
		0: part(1, []int32{1, 2, 3}, []int32{1, 2, 3}),
		1: part(2, []int32{2, 3, 1}, []int32{2, 3}),
		2: part(-1, []int32{3, 1, 2}, nil),
		3: part(1, []int32{1, 2, 3, 4}, []int32{1, 2, 3, 4}),
	}
	rf := replicationFactor(ps)
	if rf != 3 {
		t.Fatalf("replication factor %d, want 3 (three of four partitions)", rf)
	}
	for p, want := range []string{"", "under-replicated", "no leader", "moving"} {
		if got := partitionProblem(ps[int32(p)], rf); got != want {
			t.Errorf("partition %d: problem %q, want %q", p, got, want)
		}
	}
	// A tie goes to the smaller count: two partitions of 1, two of 2.
	tie := kadm.PartitionDetails{0: part(1, []int32{1}, nil), 1: part(1, []int32{1}, nil),
		2: part(1, []int32{1, 2}, nil), 3: part(1, []int32{1, 2}, nil)}
	if got := replicationFactor(tie); got != 1 {
		t.Errorf("tie: replication factor %d, want 1", got)
	}
}

func TestStatusAndRebalanceSingleBroker(t *testing.T) {
	addr := inproc.Start(t, brokertest.GroupDelay(0)).Addr
	c, ctx := newClient(t, addr)
	if _, err := c.CreateTopics(ctx, 3, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	s, err := c.Status(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Brokers) != 1 || !s.Brokers[0].Controller || s.Brokers[0].Address != addr {
		t.Fatalf("brokers %+v, want one, the controller, at %s", s.Brokers, addr)
	}
	if b := s.Brokers[0]; s.Partitions != 3 || b.Replicas != 3 || b.Leaders != 3 || b.Preferred != 3 || len(s.Problems) != 0 {
		t.Errorf("status %+v, want 3 partitions all on the one broker and no problems", s)
	}
	// A single broker has no controller to move partitions, and says so.
	var ue *UnreachableError
	if _, err := c.Moving(ctx); err == nil || errors.As(err, &ue) {
		t.Errorf("moving on a single broker: got %v, want the broker's refusal", err)
	}
	plan, err := c.PlanRebalance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Moves) != 0 {
		t.Errorf("one broker: moves %v, want none", plan.Moves)
	}
}

// TestClusterMoves runs the rebalance steps on a three-broker cluster,
// then stops one broker: a rebalance is refused while it holds replicas,
// and status lists it as not alive with its partitions under-replicated.
func TestClusterMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	bs := brokertest.StartCluster(t, 3, brokertest.Args("--auto-rebalance=false"), brokertest.Topic("t", 4))
	c, ctx := newClient(t, bs[0].Addr)
	if n, err := c.Moving(ctx); err != nil || n != 0 {
		t.Fatalf("moving: %d, %v; want 0", n, err)
	}
	plan, err := c.PlanRebalance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Moves) > 0 {
		if err := c.Rebalance(ctx, plan); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitMoves(ctx); err != nil {
		t.Fatal(err)
	}
	if plan, err = c.PlanRebalance(ctx); err != nil || len(plan.Moves) != 0 {
		t.Fatalf("after the moves: plan %v, error %v; want nothing left to move", plan, err)
	}
	s, err := c.Status(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	preferred := 0
	for _, b := range s.Brokers {
		if b.Replicas != 4 || b.Preferred < 1 || b.Preferred > 2 {
			t.Errorf("broker %+v: want a replica of all 4 partitions and 1 or 2 preferred leaders", b)
		}
		preferred += b.Preferred
	}
	if len(s.Brokers) != 3 || s.Partitions != 4 || preferred != 4 || len(s.Problems) != 0 {
		t.Fatalf("status %+v, want 3 brokers, 4 partitions with a preferred leader each, no problems", s)
	}

	if err := bs[1].Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := c.PlanRebalance(ctx)
		if err != nil && strings.Contains(err.Error(), "is not alive") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("rebalance with a broker stopped: got %v, want a refusal naming it", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		s, err = c.Status(ctx, "t")
		if err == nil && len(s.Brokers) == 3 && s.Brokers[1].Address == "(not alive)" && len(s.Problems) == 4 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status with broker 1 stopped: %+v, %v; want it listed not alive and 4 partitions with a problem", s, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
