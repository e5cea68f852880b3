package broker_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// TestClusterRaftOneConnectionPerPair: three brokers with cluster TLS and
// a topic of 50 partitions at RF 3 (150 raft groups beside the
// controller) taking writes: every group's raft traffic between two
// brokers shares one TLS session per direction, and their coalesced
// heartbeats one link of their own, so each broker's raft port has
// accepted at most two connections from each other broker, and each
// broker has dialed at most one session to each.
func TestClusterRaftOneConnectionPerPair(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker processes")
	}
	ca := testutil.NewCA(t)
	peer := ca.Peer(t, "broker")
	bs, _ := startClusterWith(t, 3, func(cb *clusterBroker) []string {
		return []string{"--listeners", "plain=PLAINTEXT://" + cb.Addr + ",secure=SSL://" + testutil.FreePort(t), "--inter-broker-listener", "secure",
			"--tls-cert", peer.CertFile, "--tls-key", peer.KeyFile, "--tls-ca", ca.CAFile, "--tls-client-auth", "required", "--cluster-tls"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	seeds := brokertest.Addrs(bs)
	createTopic(t, ctx, seeds, "pairs", 50, 3)
	waitLeaders(t, ctx, seeds, "pairs", 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 200 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "pairs", Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	for _, b := range bs {
		_, port, err := net.SplitHostPort(b.RaftAddr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		// A Metadata answer may probe a raft port (Node.Refused): such a
		// connection lasts a moment, a raft group's pool would stay.
		waitUntil(t, 20*time.Second, "a session and a heartbeat link from each peer", func() string {
			n, err := testutil.EstablishedTo(p)
			if err != nil {
				t.Skipf("cannot count connections: %v", err)
			}
			if n < 1 || n > 2*(len(bs)-1) {
				return fmt.Sprintf("broker %d: %d established connections on raft port %d, want 1 to %d", b.ID, n, p, 2*(len(bs)-1))
			}
			return ""
		})
		out, err := metricSum(b.HTTPAddr, "simtel_broker_cluster_mux_sessions", `direction="out"`)
		if err != nil {
			t.Fatal(err)
		}
		streams, err := metricSum(b.HTTPAddr, "simtel_broker_cluster_mux_streams", `direction="out"`)
		if err != nil {
			t.Fatal(err)
		}
		if out < 1 || out > float64(len(bs)-1) || streams <= out {
			t.Errorf("broker %d: %v dialed sessions carrying %v streams, want 1 to %d sessions carrying more streams than that", b.ID, out, streams, len(bs)-1)
		}
	}
}
