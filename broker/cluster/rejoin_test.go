package cluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPeersFileRoundTrip: the saved peers read back as written; a torn or
// foreign file is an error naming the file, a missing one no peer.
func TestPeersFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, peersFileName)
	got, err := readPeers(path)
	if err != nil || len(got) != 0 {
		t.Fatalf("missing file: got %v, %v; want no peer, no error", got, err)
	}
	want := map[int32]string{1: "10.0.0.1:7946", 2: "broker-2:7946"}
	if err := writePeers(path, want); err != nil {
		t.Fatal(err)
	}
	if got, err = readPeers(path); err != nil || len(got) != 2 || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left behind: %v", err)
	}
	for _, bad := range []string{`{"brokers":{"x":"a:1"}}`, `{"brokers":{"1":""}}`, `{"brok`} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readPeers(path); err == nil {
			t.Errorf("%s: read without error", bad)
		}
	}
}

// TestRestartWithoutJoinRejoins: the node that bootstrapped the cluster
// (started without Join) stops and starts again with the same Config: it
// rejoins the gossip of the brokers saved in its data directory and the
// leader marks it alive again.
func TestRestartWithoutJoinRejoins(t *testing.T) {
	skipElections(t)
	cfgs := clusterConfigs(t, 3)
	nodes := startNodes(t, cfgs)
	aliveEverywhere := func(want int) func() bool {
		return func() bool {
			for _, n := range nodes {
				md := n.Metadata()
				if len(md.AliveBrokers()) != want {
					return false
				}
				for _, b := range md.AliveBrokers() {
					if b.GossipAddr == "" {
						return false
					}
				}
			}
			return true
		}
	}
	waitFor(t, "3 alive brokers with gossip addresses everywhere", aliveEverywhere(3))
	waitFor(t, "node 0 saved both peers", func() bool { return RemembersPeers(cfgs[0].DataDir) && len(nodes[0].knownPeers()) == 2 })

	nodes[0].stop()
	waitFor(t, "node 0 marked not alive", func() bool {
		md := nodes[1].Metadata()
		return !md.Brokers[0].Alive && len(md.AliveBrokers()) == 2
	})
	restarted := time.Now()
	nodes[0] = startNode(t, cfgs[0])
	waitFor(t, "node 0 alive again everywhere", aliveEverywhere(3))
	if n := nodes[0].ml.NumMembers(); n != 3 {
		t.Errorf("restarted node sees %d gossip members, want 3", n)
	}
	t.Logf("node 0 alive again %v after its restart", time.Since(restarted).Round(time.Millisecond))
}

// TestRejoinKeepsTryingKnownBroker: a broker registered in the metadata
// but not in the gossip is tried again and again; when a process comes up
// at its gossip address knowing nobody (no Join, nothing saved), the
// cluster finds it, marks it alive and adds it to the controller.
func TestRejoinKeepsTryingKnownBroker(t *testing.T) {
	skipElections(t)
	a := startNode(t, Config{NodeID: 0, DataDir: t.TempDir(), RaftListen: freeAddr(t), GossipListen: freeAddr(t), BootstrapExpect: 1,
		RejoinInterval: 100 * time.Millisecond})
	waitFor(t, "node 0 leads", func() bool { return a.IsLeader() && a.Metadata().Brokers[0].Alive })
	later := Config{NodeID: 5, DataDir: t.TempDir(), RaftListen: freeAddr(t), GossipListen: freeAddr(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Apply(ctx, Command{Op: OpRegisterBroker, Broker: &BrokerInfo{ID: 5, RaftAddr: "127.0.0.1:1", GossipAddr: later.GossipListen}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node 0 knows broker 5's gossip address", func() bool { return a.knownPeers()[5] == later.GossipListen })
	waitFor(t, "three failed tries (nothing listens yet)", func() bool {
		return testutil.ToFloat64(a.rejoins.WithLabelValues("error")) >= 3
	})
	if a.Metadata().Brokers[5].Alive {
		t.Fatal("broker 5 alive before it started")
	}
	b := startNode(t, later)
	waitFor(t, "broker 5 found, alive and in the controller", func() bool {
		if !a.Metadata().Brokers[5].Alive || b.Metadata().ClusterID == "" {
			return false
		}
		_, ok := raftServer(a, "5")
		return ok
	})
}

// TestGossipRefusesAnotherCluster: a broker of one cluster joining the
// gossip address of a broker of another (a remembered address now used by
// someone else) is refused from both sides, counted, and never becomes a
// member or a voter of the other's controller.
func TestGossipRefusesAnotherCluster(t *testing.T) {
	skipElections(t)
	var nodes []*testNode
	for i := range 2 {
		cfg := Config{NodeID: int32(i), DataDir: t.TempDir(), KafkaAddr: freeAddr(t),
			RaftListen: freeAddr(t), GossipListen: freeAddr(t), BootstrapExpect: 1}
		nodes = append(nodes, startNode(t, cfg))
		waitFormed(t, nodes[i:])
	}
	a, b := nodes[0], nodes[1]
	waitFor(t, "both clusters' ids gossiped", func() bool {
		return a.gossipClusterID() != "" && b.gossipClusterID() != ""
	})
	if a.gossipClusterID() == b.gossipClusterID() {
		t.Fatalf("two bootstraps made one cluster id %s", a.gossipClusterID())
	}
	if _, err := b.ml.Join([]string{a.gossipAddr}); err == nil {
		t.Fatal("join of another cluster's gossip address succeeded")
	}
	time.Sleep(time.Second) // gossip that slipped through would show by now
	if got := len(a.members()); got != 1 {
		t.Errorf("a sees %d members, want itself only", got)
	}
	if got := len(b.members()); got != 1 {
		t.Errorf("b sees %d members, want itself only", got)
	}
	if _, ok := raftServer(a, "1"); ok {
		t.Error("b became a server of a's controller")
	}
	if testutil.ToFloat64(a.foreignMembers)+testutil.ToFloat64(b.foreignMembers) == 0 {
		t.Error("no refusal counted")
	}
}
