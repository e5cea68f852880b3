package cluster

import (
	"errors"
	"slices"
	"testing"
)

// TestFSMReassignment walks one partition through a reassignment: start,
// progress reports, finish, and the refusals on the way.
func TestFSMReassignment(t *testing.T) {
	f := NewFSM()
	idx := uint64(0)
	next := func() uint64 { idx++; return idx }
	for id := int32(0); id < 4; id++ {
		applyCmd(t, f, next(), Command{Op: OpRegisterBroker, Broker: &BrokerInfo{ID: id, Alive: id < 3}})
	}
	id := [16]byte{7}
	if r := applyCmd(t, f, next(), Command{Op: OpCreateTopic, Topic: "a", TopicID: id, Partitions: 2, ReplicationFactor: 3}); r.Code != "" {
		t.Fatalf("create: %+v", r)
	}
	applyCmd(t, f, next(), Command{Op: OpRegisterBroker, Broker: &BrokerInfo{ID: 3, Alive: true}})
	part := func() Assignment { return f.Metadata().Topics["a"].Partitions[0] }
	old := part().Replicas
	target := slices.Clone(old)
	target[1] = 3

	for _, bad := range []Command{
		{Op: OpReassign, Topic: "a", TopicID: id, Partition: 0, Replicas: []int32{0, 0, 1}},
		{Op: OpReassign, Topic: "a", TopicID: id, Partition: 0, Replicas: []int32{0, 1, 9}},
		{Op: OpReassign, Topic: "a", TopicID: id, Partition: 0, Replicas: []int32{0}},
		{Op: OpFinishReassignment, Topic: "a", TopicID: id, Partition: 0, Replicas: target},
	} {
		if r := applyCmd(t, f, next(), bad); !errors.Is(r.Err(), ErrReassignment) {
			t.Errorf("%+v: got %v, want ErrReassignment", bad, r.Err())
		}
	}
	if r := applyCmd(t, f, next(), Command{Op: OpReassign, Topic: "a", TopicID: [16]byte{8}, Partition: 0, Replicas: target}); !errors.Is(r.Err(), ErrUnknownTopic) {
		t.Errorf("reassign with a stale topic id: got %v, want ErrUnknownTopic", r.Err())
	}
	if r := applyCmd(t, f, next(), Command{Op: OpReassign, Topic: "a", TopicID: id, Partition: 0, Replicas: target}); r.Code != "" {
		t.Fatalf("reassign: %+v", r)
	}
	if r := applyCmd(t, f, next(), Command{Op: OpReassign, Topic: "a", TopicID: id, Partition: 0, Replicas: old}); !errors.Is(r.Err(), ErrReassignment) {
		t.Errorf("second reassign while one is in progress: got %v, want ErrReassignment", r.Err())
	}
	if got, want := part().Members(), append(slices.Clone(old), 3); !slices.Equal(got, want) {
		t.Errorf("members during the move %v, want %v", got, want)
	}
	// The new leader may be a target replica not yet in Replicas.
	applyCmd(t, f, next(), Command{Op: OpSetPartitionLeader, Topic: "a", TopicID: id, Partition: 0, Leader: 3, LeaderEpoch: 5})
	if a := part(); a.Leader != 3 || a.LeaderEpoch != 5 {
		t.Errorf("leader %d epoch %d, want 3 and 5", a.Leader, a.LeaderEpoch)
	}
	applyCmd(t, f, next(), Command{Op: OpReplicaProgress, Topic: "a", TopicID: id, Partition: 0, Leader: 3, Offset: 40})
	applyCmd(t, f, next(), Command{Op: OpReplicaProgress, Topic: "a", TopicID: id, Partition: 0, Leader: 3, Offset: 20}) // older report
	if got := part().Progress[3]; got != 40 {
		t.Errorf("progress %d, want 40", got)
	}
	// Override replaces the target (a target broker died); progress of
	// replicas no longer in it is dropped.
	other := slices.Clone(old)
	other[2] = 3
	if r := applyCmd(t, f, next(), Command{Op: OpReassign, Topic: "a", TopicID: id, Partition: 0, Replicas: other, Override: true}); r.Code != "" {
		t.Fatalf("override: %+v", r)
	}
	if a := part(); !slices.Equal(a.Target, other) || a.Progress[3] != 40 {
		t.Errorf("after override: target %v progress %v, want %v and broker 3 at 40", a.Target, a.Progress, other)
	}
	applyCmd(t, f, next(), Command{Op: OpReassign, Topic: "a", TopicID: id, Partition: 0, Replicas: target, Override: true})
	if r := applyCmd(t, f, next(), Command{Op: OpFinishReassignment, Topic: "a", TopicID: id, Partition: 0, Replicas: target}); r.Code != "" {
		t.Fatalf("finish: %+v", r)
	}
	a := part()
	if !slices.Equal(a.Replicas, target) || a.Target != nil || a.Progress != nil || !a.Moved {
		t.Errorf("after finish: %+v, want replicas %v, no target or progress, moved", a, target)
	}
	// Reordering only (preferred leader change) is not a move.
	p1 := f.Metadata().Topics["a"].Partitions[1]
	order := []int32{p1.Replicas[2], p1.Replicas[1], p1.Replicas[0]}
	applyCmd(t, f, next(), Command{Op: OpReassign, Topic: "a", TopicID: id, Partition: 1, Replicas: order})
	applyCmd(t, f, next(), Command{Op: OpFinishReassignment, Topic: "a", TopicID: id, Partition: 1, Replicas: order})
	if p1 = f.Metadata().Topics["a"].Partitions[1]; !slices.Equal(p1.Replicas, order) || p1.Moved {
		t.Errorf("after reorder: %+v, want replicas %v, not moved", p1, order)
	}
}
