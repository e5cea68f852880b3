package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// TestClusterSeedRestartRejoins: the first broker of a cluster is started
// without --join (docs/broker-cluster.md's example). It is SIGKILLed while
// producers write and restarted with exactly the same flags, still
// without --join. Within 15 s every broker, the restarted one included,
// lists all three in Metadata; then leadership goes back to it as the
// preferred leader of its partitions, `simtel cluster status` shows no
// problem, and nothing acknowledged is lost, duplicated or reordered.
//
// In "remembered peers" the restarted broker joins the gossip of the
// brokers its data directory remembers; in "peers file lost" that file is
// deleted before the restart: then the others, which keep trying the
// killed broker's gossip address from the metadata, find it, unless it
// finds them first from the metadata raft replays to it (the counts of
// successful rejoins in the log say which; TestRejoinKeepsTryingKnownBroker
// in broker/cluster checks the others' side alone).
func TestClusterSeedRestartRejoins(t *testing.T) {
	t.Run("remembered peers", func(t *testing.T) { testSeedRestart(t, false) })
	t.Run("peers file lost", func(t *testing.T) { testSeedRestart(t, true) })
}

func testSeedRestart(t *testing.T, losePeers bool) {
	bs, controller, seeds, ctx := startClusterFor(t, 3, 5*time.Minute)
	seed := bs[0] // started with --bootstrap-expect 3 and no --join
	const topic = "rejoin"
	spreadOut := createSpreadTopic(t, ctx, bs, controller, topic)
	load := startLoad(t, ctx, seeds, topic, 2)
	load.waitAcks(t, 2000)

	seed.Proc.Kill()
	killed := time.Now()
	others := brokertest.Addrs(bs[1:])
	// The others see it gone and mark it not alive, as users saw.
	waitUntil(t, 60*time.Second, "the others mark the killed broker not alive", func() string {
		for _, a := range others {
			ids, err := brokerIDs(ctx, a)
			if err != nil || slices.Contains(ids, int32(seed.ID)) {
				return fmt.Sprintf("%s lists %v (%v)", a, ids, err)
			}
		}
		return ""
	})
	t.Logf("broker %d marked not alive %v after the kill", seed.ID, time.Since(killed).Round(time.Millisecond))

	if losePeers {
		if err := os.Remove(filepath.Join(seed.Dir, "controller", "peers.json")); err != nil {
			t.Fatal(err)
		}
	}
	restarted := time.Now()
	seed.StartNode(nil, 3) // the same flags as its first start
	waitUntil(t, 15*time.Second, "every broker lists all three in Metadata after the restart", func() string {
		for _, b := range bs {
			ids, err := brokerIDs(ctx, b.Addr)
			if err != nil || len(ids) != 3 {
				return fmt.Sprintf("broker %d lists %v (%v)", b.ID, ids, err)
			}
		}
		return ""
	})
	rejoin := time.Since(restarted)
	n, err := metricSum(seed.HTTPAddr, "simtel_broker_cluster_gossip_members")
	if err != nil || n != 3 {
		t.Errorf("restarted broker sees %v gossip members (%v), want 3", n, err)
	}
	// The leaders' moves back, for the log: leaders per broker, as they
	// change, with the time since the restart.
	var moves []string
	last := ""
	waitUntil(t, 2*time.Minute, "leaders spread 2/2/2 again (preferred leaders)", func() string {
		if _, leaders, _, err := spread(ctx, seeds, topic, 3); err == nil && fmt.Sprint(leaders) != last {
			last = fmt.Sprint(leaders)
			moves = append(moves, fmt.Sprintf("%v %s", time.Since(restarted).Round(100*time.Millisecond), last))
		}
		return spreadOut()
	})
	t.Logf("leaders by broker after the restart: %s", strings.Join(moves, ", "))
	lead := time.Since(restarted)
	waitUntil(t, 60*time.Second, "simtel cluster status shows three brokers and no problem", func() string {
		st, out, why := clusterStatusOf(t, seed.Addr, topic, 3)
		if why != "" {
			return why
		}
		for _, b := range st.Brokers {
			if b.Address == "(not alive)" || b.Leaders != 2 {
				return fmt.Sprintf("broker %d at %s leads %d:\n%s", b.ID, b.Address, b.Leaders, out)
			}
		}
		return ""
	})
	var rejoins []float64 // successful gossip joins of known brokers, per broker
	for _, b := range bs {
		n, err := metricSum(b.HTTPAddr, "simtel_broker_cluster_gossip_rejoins_total", `result="ok"`)
		if err != nil {
			t.Fatal(err)
		}
		rejoins = append(rejoins, n)
	}
	t.Logf("broker %d restarted without --join: in every broker's Metadata after %v, leading its 2 preferred partitions after %v (load %s); successful gossip rejoins by broker: %v",
		seed.ID, rejoin.Round(time.Millisecond), lead.Round(time.Millisecond), loadAvg(), rejoins)
	load.waitMore(t, "writes go on", 2000)
	load.finishAndCheck(ctx, t, seeds, topic)
}

// TestConfigRestartNeedsNoJoin: a cluster broker without --join and
// --bootstrap-expect is refused on its first start, accepted once its data
// directory remembers the brokers it met.
func TestConfigRestartNeedsNoJoin(t *testing.T) {
	dir := t.TempDir()
	cfg := broker.Config{DataDir: dir, RaftListen: "127.0.0.1:1", GossipListen: "127.0.0.1:2"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("first start: got %v, want an error asking for --join", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "controller"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "controller", "peers.json"), []byte(`{"brokers":{"1":"127.0.0.1:3"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("restart: got %v, want no error", err)
	}
}

// brokerIDs is the sorted ids of the brokers one broker's Metadata lists.
func brokerIDs(ctx context.Context, addr string) ([]int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := metadataFrom(ctx, addr)
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, b := range m.Brokers {
		ids = append(ids, b.NodeID)
	}
	slices.Sort(ids)
	return ids, nil
}
