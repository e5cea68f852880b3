package cluster

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestNewGroupFirstElection: a new group is led by its preferred replica
// (the first peer), which stands at once while the others hold their
// elections; once a leader is seen the replicas have their normal
// timeouts again. Its raft connections, closed when idle, are dialed
// again for the next write.
func TestNewGroupFirstElection(t *testing.T) {
	skipElections(t)
	nodes := startSettledNodes(t)
	const hb = time.Second
	var grps []*Group
	for _, n := range nodes {
		grps = append(grps, startTestGroup(t, n, 300, true, hb))
	}
	waitFor(t, "a leader known to every replica", func() bool {
		for _, g := range grps {
			if _, id := g.Raft().LeaderWithID(); id == "" {
				return false
			}
		}
		return true
	})
	if grps[0].Raft().State() != raft.Leader {
		t.Fatalf("the preferred replica is %v, want the leader", grps[0].Raft().State())
	}
	for i, g := range grps {
		if d := g.Raft().ReloadableConfig().HeartbeatTimeout; d == heldElectionTimeouts*hb {
			t.Fatalf("replica %d still has the held timeout %v after seeing a leader", i, d)
		}
	}

	write := func(what string) {
		t.Helper()
		data, err := json.Marshal(Command{Op: OpSetClusterID, ClusterID: what})
		if err != nil {
			t.Fatal(err)
		}
		f := grps[0].Raft().Apply(data, 10*time.Second)
		if err := f.Error(); err != nil {
			t.Fatalf("write %s: %v", what, err)
		}
		waitFor(t, what+" applied on every replica", func() bool {
			for _, g := range grps {
				if g.Raft().AppliedIndex() < f.Index() {
					return false
				}
			}
			return true
		})
	}
	write("before")
	closed := 0
	for _, n := range nodes {
		closed += n.closeIdleStreams(time.Now().Add(time.Hour), idleStreamsAfter)
	}
	if closed == 0 {
		t.Fatal("no group's raft connections were closed as idle")
	}
	write("after")
}

// TestNewGroupElectsWithoutPreferred: when the preferred replica of a new
// group never opens it, the others elect one of them after the held
// timeout.
func TestNewGroupElectsWithoutPreferred(t *testing.T) {
	skipElections(t)
	nodes := startSettledNodes(t)
	// Short, so that the held timeout ends well within waitFor's time.
	const hb = 200 * time.Millisecond
	var grps []*Group
	for _, n := range nodes[1:] {
		grps = append(grps, startTestGroup(t, n, 301, true, hb))
	}
	waitFor(t, "a leader among the replicas that opened the group", func() bool {
		return grps[0].Raft().State() == raft.Leader || grps[1].Raft().State() == raft.Leader
	})
}
