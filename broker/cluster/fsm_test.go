package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

func applyCmd(t *testing.T, f *FSM, idx uint64, c Command) Result {
	t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(&raft.Log{Index: idx, Data: data}).(Result)
}

type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

func TestFSMApplySnapshotRestore(t *testing.T) {
	f := NewFSM()
	idx := uint64(0)
	next := func() uint64 { idx++; return idx }
	for id := int32(0); id < 3; id++ {
		if r := applyCmd(t, f, next(), Command{Op: OpRegisterBroker, Broker: &BrokerInfo{ID: id, KafkaAddr: "k", RaftAddr: "r", Alive: true}}); r.Code != "" {
			t.Fatalf("register %d: %+v", id, r)
		}
	}
	applyCmd(t, f, next(), Command{Op: OpSetClusterID, ClusterID: "c1"})
	applyCmd(t, f, next(), Command{Op: OpSetClusterID, ClusterID: "c2"}) // ignored: set once
	if r := applyCmd(t, f, next(), Command{Op: OpCreateTopic, Topic: "a", TopicID: [16]byte{1}, Partitions: 6, Configs: map[string]string{"retention.ms": "1000"}}); r.Code != "" {
		t.Fatalf("create: %+v", r)
	}
	r := applyCmd(t, f, next(), Command{Op: OpCreateTopic, Topic: "a", Partitions: 1})
	if !errors.Is(r.Err(), ErrTopicExists) {
		t.Fatalf("second create: got %v, want ErrTopicExists", r.Err())
	}
	if r := applyCmd(t, f, next(), Command{Op: OpCreatePartitions, Topic: "a", Partitions: 4}); !errors.Is(r.Err(), ErrInvalidPartitions) {
		t.Fatalf("shrink: got %v, want ErrInvalidPartitions", r.Err())
	}
	if r := applyCmd(t, f, next(), Command{Op: OpCreatePartitions, Topic: "a", Partitions: 9}); r.Code != "" {
		t.Fatalf("grow: %+v", r)
	}
	applyCmd(t, f, next(), Command{Op: OpSetTopicConfigs, Topic: "a", Configs: map[string]string{"cleanup.policy": "compact"}})
	applyCmd(t, f, next(), Command{Op: OpCreateTopic, Topic: "b", Partitions: 2})
	applyCmd(t, f, next(), Command{Op: OpDeleteTopic, Topic: "b"})
	if r := applyCmd(t, f, next(), Command{Op: OpDeleteTopic, Topic: "b"}); !errors.Is(r.Err(), ErrUnknownTopic) {
		t.Fatalf("delete twice: got %v, want ErrUnknownTopic", r.Err())
	}
	applyCmd(t, f, next(), Command{Op: OpSetBrokerAlive, BrokerID: 2, Alive: false})
	if r := applyCmd(t, f, next(), Command{Op: "bogus"}); !errors.Is(r.Err(), ErrBadCommand) {
		t.Fatalf("bogus op: got %v", r.Err())
	}
	if r := f.Apply(&raft.Log{Index: next(), Data: []byte("{not json")}).(Result); !errors.Is(r.Err(), ErrBadCommand) {
		t.Fatalf("bad json: got %v", r.Err())
	}

	m := f.Metadata()
	if m.ClusterID != "c1" {
		t.Errorf("cluster id %q, want c1", m.ClusterID)
	}
	if m.Index != idx {
		t.Errorf("index %d, want %d", m.Index, idx)
	}
	a := m.Topics["a"]
	if a == nil || len(a.Partitions) != 9 || a.Configs["cleanup.policy"] != "compact" || a.ID != [16]byte{1} {
		t.Fatalf("topic a = %+v", a)
	}
	if _, ok := m.Topics["b"]; ok {
		t.Error("topic b survived its deletion")
	}
	if m.Brokers[2].Alive || !m.Brokers[1].Alive {
		t.Errorf("alive flags: %+v", m.Brokers)
	}

	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	changes := g.Changes()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Metadata(), m) {
		t.Fatalf("restored state differs:\ngot  %+v\nwant %+v", g.Metadata(), m)
	}
	select {
	case <-changes:
	default:
		t.Error("restore did not signal a change")
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader([]byte("garbage")))); err == nil {
		t.Error("restore of garbage succeeded")
	}
	if !reflect.DeepEqual(g.Metadata(), m) {
		t.Error("a failed restore changed the state")
	}
}

func TestReplicationFactorAndLeaders(t *testing.T) {
	f := NewFSM()
	idx := uint64(0)
	for id := int32(0); id < 3; id++ {
		idx++
		applyCmd(t, f, idx, Command{Op: OpRegisterBroker, Broker: &BrokerInfo{ID: id, Alive: true}})
	}
	idx++
	if r := applyCmd(t, f, idx, Command{Op: OpCreateTopic, Topic: "four", Partitions: 1, ReplicationFactor: 4}); !errors.Is(r.Err(), ErrReplicationFactor) {
		t.Fatalf("RF 4 on 3 brokers: %v, want ErrReplicationFactor", r.Err())
	}
	idx++
	applyCmd(t, f, idx, Command{Op: OpCreateTopic, Topic: "two", TopicID: [16]byte{7}, Partitions: 3, ReplicationFactor: 2})
	tp := f.Metadata().Topics["two"]
	for _, a := range tp.Partitions {
		if len(a.Replicas) != 2 || a.Replicas[0] == a.Replicas[1] {
			t.Fatalf("RF 2 assignment %+v", a)
		}
	}
	a := tp.Partitions[0]
	other := a.Replicas[1]
	setLeader := func(leader, epoch int32) {
		idx++
		applyCmd(t, f, idx, Command{Op: OpSetPartitionLeader, Topic: "two", TopicID: [16]byte{7}, Partition: 0, Leader: leader, LeaderEpoch: epoch})
	}
	setLeader(other, 5)
	if got := f.Metadata().Topics["two"].Partitions[0]; got.Leader != other || got.LeaderEpoch != 5 {
		t.Fatalf("after a leader report: %+v, want leader %d epoch 5", got, other)
	}
	setLeader(a.Replicas[0], 4) // stale: an older term
	if got := f.Metadata().Topics["two"].Partitions[0]; got.Leader != other || got.LeaderEpoch != 5 {
		t.Fatalf("a stale report changed the leader: %+v", got)
	}
	notReplica := int32(3) - a.Replicas[0] - a.Replicas[1]
	setLeader(notReplica, 9) // not a replica
	if got := f.Metadata().Topics["two"].Partitions[0]; got.Leader != other {
		t.Fatalf("a non-replica became leader: %+v", got)
	}
	// Growing the topic keeps its replication factor.
	idx++
	applyCmd(t, f, idx, Command{Op: OpCreatePartitions, Topic: "two", Partitions: 5})
	for _, a := range f.Metadata().Topics["two"].Partitions {
		if len(a.Replicas) != 2 {
			t.Fatalf("grown topic assignment %+v, want 2 replicas", a)
		}
	}
}

func TestPlacementEven(t *testing.T) {
	f := NewFSM()
	idx := uint64(0)
	reg := func(id int32) {
		idx++
		applyCmd(t, f, idx, Command{Op: OpRegisterBroker, Broker: &BrokerInfo{ID: id, Alive: true}})
	}
	leaders := func() map[int32]int {
		out := map[int32]int{}
		for _, tp := range f.Metadata().Topics {
			for _, a := range tp.Partitions {
				// Default replication factor: 3 (every topic here is
				// created with at least 3 alive brokers).
				if len(a.Replicas) != 3 || a.Replicas[0] != a.Leader || len(slices.Compact(slices.Sorted(slices.Values(a.Replicas)))) != 3 {
					t.Fatalf("assignment %+v: want 3 distinct replicas, the first leading", a)
				}
				out[a.Leader]++
			}
		}
		return out
	}
	for id := int32(0); id < 3; id++ {
		reg(id)
	}
	idx++
	applyCmd(t, f, idx, Command{Op: OpCreateTopic, Topic: "six", Partitions: 6})
	if got := leaders(); !reflect.DeepEqual(got, map[int32]int{0: 2, 1: 2, 2: 2}) {
		t.Fatalf("6 partitions on 3 brokers: leaders %v, want 2 each", got)
	}
	for i := range 20 {
		idx++
		applyCmd(t, f, idx, Command{Op: OpCreateTopic, Topic: "t" + string(rune('a'+i)), Partitions: int32(1 + i%5)})
	}
	assertEven := func(want int) {
		t.Helper()
		got := leaders()
		lo, hi := 1<<30, 0
		for _, n := range got {
			lo, hi = min(lo, n), max(hi, n)
		}
		if len(got) != want || hi-lo > 1 {
			t.Fatalf("leaders %v: want %d brokers within one of each other", got, want)
		}
	}
	assertEven(3)
	// Every broker holds a replica of every partition (RF 3 on 3).
	for _, tp := range f.Metadata().Topics {
		for _, a := range tp.Partitions {
			if !slices.Contains(a.Replicas, 0) || !slices.Contains(a.Replicas, 1) || !slices.Contains(a.Replicas, 2) {
				t.Fatalf("assignment %+v on 3 brokers with RF 3", a)
			}
		}
	}
	// A new broker gets the next partitions until it has caught up.
	reg(3)
	idx++
	applyCmd(t, f, idx, Command{Op: OpCreateTopic, Topic: "after", Partitions: 60})
	assertEven(4)
	holds := map[int32]int{}
	for _, a := range f.Metadata().Topics["after"].Partitions {
		for _, r := range a.Replicas {
			holds[r]++
		}
	}
	if len(holds) != 4 || holds[3] < 60 {
		t.Fatalf("replicas of the 60 partitions placed after broker 3 joined: %v, want broker 3 to get the most", holds)
	}
	// A dead broker gets nothing new.
	idx++
	applyCmd(t, f, idx, Command{Op: OpSetBrokerAlive, BrokerID: 0, Alive: false})
	before := leaders()[0]
	idx++
	applyCmd(t, f, idx, Command{Op: OpCreateTopic, Topic: "nodead", Partitions: 9})
	if got := leaders()[0]; got != before {
		t.Fatalf("dead broker 0 got %d new partitions", got-before)
	}
	for id := int32(1); id < 4; id++ {
		idx++
		applyCmd(t, f, idx, Command{Op: OpSetBrokerAlive, BrokerID: id, Alive: false})
	}
	idx++
	if r := applyCmd(t, f, idx, Command{Op: OpCreateTopic, Topic: "none", Partitions: 1}); !errors.Is(r.Err(), ErrNoAliveBrokers) {
		t.Fatalf("create with no alive broker: got %v, want ErrNoAliveBrokers", r.Err())
	}
}

// TestFSMChangesEveryReader: every reader of Changes hears of every
// change; one reader taking its token leaves the others theirs.
func TestFSMChangesEveryReader(t *testing.T) {
	f := NewFSM()
	a, b := f.Changes(), f.Changes()
	applyCmd(t, f, 1, Command{Op: OpSetClusterID, ClusterID: "one"})
	for name, c := range map[string]<-chan struct{}{"first": a, "second": b} {
		select {
		case <-c:
		default:
			t.Errorf("the %s reader did not hear of the change", name)
		}
	}
	applyCmd(t, f, 2, Command{Op: OpSetClusterID, ClusterID: "two"})
	<-a
	select {
	case <-b:
	default:
		t.Error("the second reader missed a change the first one took")
	}
}

// TestFSMApplyBatchAsOneByOne: a sequence of commands (leader changes,
// stale ones, reassignments, failures, a topic replaced, configs changed
// between leader changes) applied in batches of every size from 1 to 7
// leaves the state, and each command's result, as applying them one by
// one does; a state published before a batch is never changed by it.
func TestFSMApplyBatchAsOneByOne(t *testing.T) {
	a, b := [16]byte{1}, [16]byte{2}
	cmds := []Command{
		{Op: OpSetClusterID, ClusterID: "c"},
		{Op: OpCreateTopic, Topic: "t", TopicID: a, Partitions: 5, ReplicationFactor: 3},
		{Op: OpCreateTopic, Topic: "u", TopicID: b, Partitions: 3, ReplicationFactor: 2},
	}
	for p := range int32(5) {
		cmds = append(cmds, Command{Op: OpSetPartitionLeader, Topic: "t", TopicID: a, Partition: p, Leader: p % 3, LeaderEpoch: 2})
	}
	cmds = append(cmds,
		Command{Op: OpSetPartitionLeader, Topic: "t", TopicID: a, Partition: 1, Leader: 2, LeaderEpoch: 1}, // stale
		Command{Op: OpSetPartitionLeader, Topic: "t", TopicID: a, Partition: 9, Leader: 0, LeaderEpoch: 3}, // no such partition
		Command{Op: OpSetPartitionLeader, Topic: "t", TopicID: b, Partition: 0, Leader: 0, LeaderEpoch: 3}, // wrong id
		Command{Op: OpSetTopicConfigs, Topic: "t", Configs: map[string]string{"retention.ms": "5"}},
		Command{Op: OpSetPartitionLeader, Topic: "t", TopicID: a, Partition: 0, Leader: 1, LeaderEpoch: 3},
		Command{Op: OpSetPartitionLeader, Topic: "u", TopicID: b, Partition: 2, Leader: 1, LeaderEpoch: 4},
		Command{Op: OpReassign, Topic: "t", TopicID: a, Partition: 2, Replicas: []int32{0, 1, 3}}, // broker 3 unknown
		Command{Op: OpReassign, Topic: "t", TopicID: a, Partition: 2, Replicas: []int32{1, 0}},
		Command{Op: OpReplicaProgress, Topic: "t", TopicID: a, Partition: 2, Leader: 1, Offset: 7},
		Command{Op: OpSetPartitionLeader, Topic: "t", TopicID: a, Partition: 2, Leader: 1, LeaderEpoch: 5},
		Command{Op: OpFinishReassignment, Topic: "t", TopicID: a, Partition: 2, Replicas: []int32{1, 0}},
		Command{Op: OpCreatePartitions, Topic: "t", Partitions: 7},
		Command{Op: OpSetPartitionLeader, Topic: "t", TopicID: a, Partition: 6, Leader: 2, LeaderEpoch: 2},
		Command{Op: OpDeleteTopic, Topic: "u"},
		Command{Op: OpSetPartitionLeader, Topic: "u", TopicID: b, Partition: 1, Leader: 1, LeaderEpoch: 6}, // deleted
		Command{Op: OpCreateTopic, Topic: "u", TopicID: a, Partitions: 2, ReplicationFactor: 3},
		Command{Op: OpSetPartitionLeader, Topic: "u", TopicID: a, Partition: 1, Leader: 0, LeaderEpoch: 2},
		Command{Op: OpSetPartitionLeader, Topic: "t", TopicID: a, Partition: 3, Leader: 2, LeaderEpoch: 7},
	)
	fresh := func() (*FSM, uint64) {
		f := NewFSM()
		for id := range int32(3) {
			applyCmd(t, f, uint64(id+1), Command{Op: OpRegisterBroker, Broker: &BrokerInfo{ID: id, KafkaAddr: "k", RaftAddr: "r", Alive: true}})
		}
		return f, 3
	}
	logs := make([]*raft.Log, len(cmds))
	for i, c := range cmds {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = &raft.Log{Index: uint64(i + 4), Type: raft.LogCommand, Data: data}
	}
	// A configuration entry inside a batch gets no result and changes
	// nothing but the index.
	logs = slices.Insert(logs, 9, &raft.Log{Index: 0, Type: raft.LogConfiguration})
	for i, l := range logs {
		l.Index = uint64(i + 4)
	}

	one, _ := fresh()
	var want []any
	for _, l := range logs {
		if l.Type != raft.LogCommand {
			want = append(want, nil)
			one.Apply(l) // the index
			continue
		}
		want = append(want, one.Apply(l))
	}
	wantState, err := json.Marshal(one.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	for size := 1; size <= 7; size++ {
		f, _ := fresh()
		var got []any
		for lo := 0; lo < len(logs); lo += size {
			before := f.Metadata()
			was, _ := json.Marshal(before)
			got = append(got, f.ApplyBatch(logs[lo:min(lo+size, len(logs))])...)
			if now, _ := json.Marshal(before); !bytes.Equal(was, now) {
				t.Fatalf("batches of %d: a batch changed the state published before it", size)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("batches of %d: results\n%+v\nwant\n%+v", size, got, want)
		}
		if st, _ := json.Marshal(f.Metadata()); !bytes.Equal(st, wantState) {
			t.Fatalf("batches of %d: state\n%s\nwant\n%s", size, st, wantState)
		}
	}
}
