package cluster

import (
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// gatedFSM applies like appliedFSM while its gate is unlocked; a test locks
// it to hold the state machine in the middle of an entry.
type gatedFSM struct {
	*appliedFSM
	gate *sync.Mutex
}

func (f gatedFSM) Apply(l *raft.Log) any {
	f.gate.Lock()
	defer f.gate.Unlock()
	return f.appliedFSM.Apply(l)
}

// TestInSyncWaitsForTheStateMachine: a follower whose state machine is
// held while raft hands it committed entries (raft's AppliedIndex then
// already counts them) is not in sync; once they are applied it is.
func TestInSyncWaitsForTheStateMachine(t *testing.T) {
	skipElections(t)
	nodes := startSettledNodes(t)
	var grps []*Group
	var gates []*sync.Mutex
	for _, n := range nodes {
		gate := &sync.Mutex{}
		grp, err := n.StartGroup(GroupConfig{Group: 77, Dir: t.TempDir(), Peers: []int32{0, 1, 2}, Bootstrap: true, Logger: n.log,
			FSM: gatedFSM{&appliedFSM{applied: map[uint64]string{}}, gate}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = grp.Close() })
		grps, gates = append(grps, grp), append(gates, gate)
	}
	leader := -1
	waitFor(t, "a leader of the group", func() bool {
		for i, g := range grps {
			if g.Raft().State() == raft.Leader {
				leader = i
				return true
			}
		}
		return false
	})
	apply := func(what string) {
		t.Helper()
		if err := grps[leader].Raft().Apply([]byte(what), 0).Error(); err != nil {
			t.Fatal(err)
		}
	}
	apply("first")
	// Raft's own entries (configuration, no-op) come before it: a
	// follower that applied every command is in sync.
	waitFor(t, "every replica in sync", func() bool {
		return grps[0].InSync() && grps[1].InSync() && grps[2].InSync()
	})

	f := (leader + 1) % 3
	gates[f].Lock()
	for i := range 5 {
		apply(fmt.Sprintf("held-%d", i))
	}
	end := grps[leader].Raft().LastIndex()
	waitFor(t, "the held follower handed every entry by raft", func() bool {
		return grps[f].Raft().AppliedIndex() >= end && grps[f].trans.leaderCommit.Load() >= end
	})
	if grps[f].InSync() {
		gates[f].Unlock()
		t.Fatalf("a follower whose state machine has not applied entries %d reported in sync", end)
	}
	gates[f].Unlock()
	waitFor(t, "the follower in sync once its state machine applied them", grps[f].InSync)
}
