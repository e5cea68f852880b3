package broker_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// writeGossipKey writes a gossip key file of one random 32-byte key.
func writeGossipKey(t *testing.T) string {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClusterTLSProcesses: three broker processes with --cluster-tls, a
// gossip key and an SSL inter-broker listener requiring client
// certificates: a transaction whose partitions lead on other brokers
// commits (the coordinator's markers go over the inter-broker listener
// with the cluster certificate). A fourth broker with the gossip key but a
// certificate of another CA and a fifth without the gossip key are never
// part of the cluster, garbage on a raft port is refused, each is counted,
// and the cluster keeps serving.
func TestClusterTLSProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker processes")
	}
	ca, other := testutil.NewCA(t), testutil.NewCA(t)
	peer, intruder := ca.Peer(t, "broker"), other.Peer(t, "broker")
	key := writeGossipKey(t)
	flags := func(cb *clusterBroker, cert testutil.Cert, caFile string, withKey bool) []string {
		s := testutil.FreePort(t)
		args := []string{"--listeners", "plain=PLAINTEXT://" + cb.Addr + ",secure=SSL://" + s, "--inter-broker-listener", "secure",
			"--tls-cert", cert.CertFile, "--tls-key", cert.KeyFile, "--tls-ca", caFile, "--tls-client-auth", "required", "--cluster-tls"}
		if withKey {
			args = append(args, "--gossip-key-file", key)
		}
		return args
	}
	bs, _ := startClusterWith(t, 3, func(cb *clusterBroker) []string { return flags(cb, peer, ca.CAFile, true) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seeds := brokertest.Addrs(bs)
	cl := listenerClient(t, seeds[0], nil)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 3, nil, "ctls"); err != nil {
		t.Fatal(err)
	}
	txnRound := func(tag string) {
		t.Helper()
		p := listenerClient(t, seeds[1], nil, kgo.TransactionalID("ctls-"+tag), kgo.DefaultProduceTopic("ctls"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for part := range int32(3) {
			if err := p.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte(tag)}).FirstErr(); err != nil {
				t.Fatalf("transactional produce to partition %d: %v", part, err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit of a transaction over three brokers with cluster TLS: %v", err)
		}
		p.Close()
	}
	txnRound("before")

	// A broker with the gossip key and a certificate of another CA.
	b3 := newClusterBroker(t, 3)
	b3.ExtraArgs = flags(b3, intruder, other.CAFile, true)
	bs = append(bs, b3)
	b3.StartNode([]string{bs[0].GossipAddr}, 0)
	// A broker with the cluster's certificate and no gossip key.
	b4 := newClusterBroker(t, 4)
	b4.ExtraArgs = flags(b4, peer, ca.CAFile, false)
	bs = append(bs, b4)
	b4.StartNode([]string{bs[0].GossipAddr}, 0)

	// Garbage to a raft port.
	for range 2 {
		c, err := net.DialTimeout("tcp", bs[1].RaftAddr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("\x01\x00\x00\x00\x00\x00\x00\x00\x00garbage that is no TLS record"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}
	testutil.WaitFor(t, 60*time.Second, "the refusals counted", func() error {
		var tlsFail, gossipFail float64
		for _, b := range bs[:3] {
			v, _ := metricSum(b.HTTPAddr, "simtel_broker_cluster_tls_failures_total")
			tlsFail += v
			v, _ = metricSum(b.HTTPAddr, "simtel_broker_cluster_gossip_auth_failures_total")
			gossipFail += v
		}
		// Garbage twice on broker 1, and the leader's probes of broker 3.
		if tlsFail < 3 || gossipFail == 0 {
			return fmt.Errorf("cluster TLS failures %v, gossip failures %v", tlsFail, gossipFail)
		}
		return nil
	})
	testutil.WaitFor(t, 30*time.Second, "the broker without the gossip key logs its failed join", func() error {
		if !strings.Contains(logOf(b4), "cannot join gossip yet") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	txnRound("after")
	for _, b := range bs[:3] {
		if m, err := metadataFrom(ctx, b.Addr); err != nil {
			t.Fatal(err)
		} else if len(m.Brokers) != 3 {
			t.Errorf("broker %d lists %d brokers in Metadata, want 3 (the outsiders are not members)", b.ID, len(m.Brokers))
		}
	}
	for _, b := range bs[3:] {
		if b.Proc.Exited() {
			t.Errorf("outsider broker %d exited; it should keep trying", b.ID)
		}
	}
	if !strings.Contains(logOf(bs[1]), "raft mux refused a TLS connection") {
		t.Error("broker 1 did not log the garbage on its raft port")
	}
	count := map[string]int{}
	for _, v := range brokertest.Values(brokertest.Read(t, ctx, seeds, "ctls", 6,
		brokertest.ReadClient(kgo.FetchIsolationLevel(kgo.ReadCommitted())), brokertest.OnFetchError(brokertest.IgnoreFetchErrors))) {
		count[v]++
	}
	if got := fmt.Sprintf("after:%d before:%d", count["after"], count["before"]); got != "after:3 before:3" {
		t.Fatalf("read committed %s, want both transactions on all three partitions", got)
	}
}

func logOf(b *clusterBroker) string {
	data, _ := os.ReadFile(b.Proc.Log)
	return string(data)
}

// TestClusterSecurityConfig: cluster TLS and a gossip key need cluster
// mode; a cluster broker asked for TLS without a certificate and CA, or
// given a bad gossip key file, does not start, and says why.
func TestClusterSecurityConfig(t *testing.T) {
	for _, cfg := range []broker.Config{
		{DataDir: "d", ClusterTLS: true},
		{DataDir: "d", ClusterTLSFiles: cluster.TLSFiles{CA: "ca.pem"}},
		{DataDir: "d", GossipKeyFile: "k"},
	} {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "need --raft-listen") {
			t.Errorf("%+v: got %v, want an error naming --raft-listen", cfg, err)
		}
	}
	badKey := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(badKey, []byte("c2hvcnQ=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mod  func(*broker.Config)
		want string
	}{
		{func(c *broker.Config) { c.ClusterTLS = true }, "needs a certificate and a key"},
		{func(c *broker.Config) { c.ClusterTLSFiles.Cert, c.ClusterTLSFiles.Key = "c.pem", "k.pem" }, "needs the cluster's CA"},
		{func(c *broker.Config) { c.GossipKeyFile = badKey }, "16, 24 or 32 wanted"},
	} {
		cfg := broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", RaftListen: "127.0.0.1:0",
			GossipListen: testutil.FreePort(t), BootstrapExpect: 1, Logger: slog.New(slog.DiscardHandler)}
		tc.mod(&cfg)
		b, err := broker.New(cfg)
		if err == nil {
			b.Close()
			t.Errorf("a broker started with %q missing", tc.want)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error with %q", err, tc.want)
		}
	}
}
