package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/simtel/simtel/internal/testutil"
)

// freeAddr is a loopback address to listen on later. Not one the kernel
// picks for port 0: that is in the ephemeral range, where another
// process's outgoing connection took it before the node listened (a CI
// run: "bind: address already in use").
func freeAddr(t *testing.T) string {
	t.Helper()
	return testutil.FreePort(t)
}

type testNode struct {
	*Node
	cancel context.CancelFunc
	done   chan struct{}
}

func startNode(t *testing.T, cfg Config) *testNode {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Tick = 100 * time.Millisecond
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn := &testNode{Node: n, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(tn.done); _ = n.Run(ctx) }()
	t.Cleanup(tn.stop)
	return tn
}

func (tn *testNode) stop() {
	tn.cancel()
	<-tn.done
}

// clusterConfigs returns the Configs of n nodes with fresh directories and
// addresses that bootstrap a controller of three: node 0 starts without
// Join, the others join through its gossip address.
func clusterConfigs(t *testing.T, n int) []Config {
	cfgs := make([]Config, n)
	for i := range cfgs {
		cfgs[i] = Config{NodeID: int32(i), DataDir: t.TempDir(), KafkaAddr: "127.0.0.1:" + strconv.Itoa(9000+i),
			RaftListen: freeAddr(t), GossipListen: freeAddr(t), BootstrapExpect: 3}
		if i > 0 {
			cfgs[i].Join = []string{cfgs[0].GossipListen}
		}
	}
	return cfgs
}

func startNodes(t *testing.T, cfgs []Config) []*testNode {
	var nodes []*testNode
	for _, c := range cfgs {
		nodes = append(nodes, startNode(t, c))
	}
	return nodes
}

// raftServer returns the server id of n's raft configuration; ok is false
// when it is not there or the configuration cannot be read.
func raftServer(n *testNode, id string) (s raft.Server, ok bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNodesBootstrapForwardJoin: three nodes bootstrap a controller, a
// follower's Apply is forwarded to the leader, a fourth node joins as a
// non-voter (MaxVoters 3), and a restarted node keeps its state without
// bootstrapping again.
func TestNodesBootstrapForwardJoin(t *testing.T) {
	skipElections(t)
	cfgs := clusterConfigs(t, 4)
	for i := range cfgs {
		cfgs[i].MaxVoters = 3
	}
	cfgs[3].BootstrapExpect = 0
	nodes := startNodes(t, cfgs[:3])
	leader := func() *testNode { return leaderNode(nodes) }
	waitFormed(t, nodes)
	if id, ok := nodes[2].LeaderID(); !ok || id != int32(leaderIndex(nodes)) {
		t.Fatalf("node 2 names leader %d (%v), want %d", id, ok, leaderIndex(nodes))
	}
	var follower *testNode
	for _, n := range nodes {
		if !n.IsLeader() {
			follower = n
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := follower.Apply(ctx, Command{Op: OpCreateTopic, Topic: "fwd", Partitions: 3})
	if err != nil {
		t.Fatalf("forwarded apply: %v", err)
	}
	if err := follower.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if follower.Metadata().Index < res.Index || follower.Metadata().Topics["fwd"] == nil {
		t.Fatalf("after CatchUp the follower is at %d without topic fwd (applied at %d)", follower.Metadata().Index, res.Index)
	}
	if _, err := follower.Apply(ctx, Command{Op: OpCreateTopic, Topic: "fwd", Partitions: 3}); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("forwarded duplicate create: got %v, want ErrTopicExists", err)
	}

	// A fourth node joins: registered, added as a non-voter.
	nodes = append(nodes, startNode(t, cfgs[3]))
	waitFor(t, "node 3 registered and in the raft configuration", func() bool {
		l := leader()
		if l == nil || !l.Metadata().Brokers[3].Alive {
			return false
		}
		s, ok := raftServer(l, "3")
		return ok && s.Suffrage == raft.Nonvoter
	})
	waitFor(t, "node 3 has the metadata", func() bool { return nodes[3].Metadata().Topics["fwd"] != nil })

	// Stop a follower: it is marked not alive; restart it with the same
	// directory: it comes back alive with its state, without bootstrapping.
	idx := 0
	for i, n := range nodes[:3] {
		if !n.IsLeader() {
			idx = i
		}
	}
	nodes[idx].stop()
	waitFor(t, "the stopped node marked not alive", func() bool {
		l := leader()
		return l != nil && !l.Metadata().Brokers[int32(idx)].Alive
	})
	nodes[idx] = startNode(t, cfgs[idx])
	if !nodes[idx].hasState {
		t.Fatal("restarted node found no raft state")
	}
	if nodes[idx].Metadata().Topics["fwd"] == nil {
		// Restored from the log replay once a leader is known.
		waitFor(t, "restarted node has its metadata", func() bool { return nodes[idx].Metadata().Topics["fwd"] != nil })
	}
	waitFor(t, "the restarted node alive again", func() bool {
		l := leader()
		return l != nil && l.Metadata().Brokers[int32(idx)].Alive
	})
}

// waitFormed waits until one of nodes leads and every one of them sees
// all of them alive and knows the cluster id.
func waitFormed(t *testing.T, nodes []*testNode) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a leader and %d alive brokers everywhere", len(nodes)), func() bool {
		if leaderNode(nodes) == nil {
			return false
		}
		for _, n := range nodes {
			if len(n.Metadata().AliveBrokers()) != len(nodes) || n.Metadata().ClusterID == "" {
				return false
			}
		}
		return true
	})
}

// leaderNode is the node of nodes that leads, or nil.
func leaderNode(nodes []*testNode) *testNode {
	if i := leaderIndex(nodes); i >= 0 {
		return nodes[i]
	}
	return nil
}

func leaderIndex(nodes []*testNode) int {
	for i, n := range nodes {
		if n.IsLeader() {
			return i
		}
	}
	return -1
}

// TestApplyWithoutLeader: a lone node that never bootstraps has no leader;
// Apply gives up with ErrNoLeader when its context ends.
func TestApplyWithoutLeader(t *testing.T) {
	n := startNode(t, Config{NodeID: 0, DataDir: t.TempDir(), RaftListen: freeAddr(t), GossipListen: freeAddr(t), BootstrapExpect: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := n.Apply(ctx, Command{Op: OpCreateTopic, Topic: "x", Partitions: 1}); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("got %v, want ErrNoLeader", err)
	}
}
