package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/simtel/simtel/internal/testutil"
)

func newGossipKey(t *testing.T) []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func clusterTLS(t *testing.T, ca *testutil.CA, name string) *TLS {
	t.Helper()
	c := ca.Server(t, name)
	tl, err := NewTLS(TLSFiles{Cert: c.CertFile, Key: c.KeyFile, CA: ca.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// TestClusterTLSAndGossipKey: three brokers with the cluster's certificates
// and gossip key form a controller; a fourth with the gossip key but a
// certificate of another CA gossips yet is never registered nor added to
// raft; a fifth with the right certificate but no gossip key cannot join
// gossip; garbage sent to a raft port is refused. Each refusal is logged
// and counted, and the cluster keeps applying commands.
func TestClusterTLSAndGossipKey(t *testing.T) {
	skipElections(t)
	ca, other := testutil.NewCA(t), testutil.NewCA(t)
	key := newGossipKey(t)
	cfgs := clusterConfigs(t, 5)
	regs := make([]*prometheus.Registry, len(cfgs))
	logs := make([]*testutil.SyncBuffer, len(cfgs))
	for i := range cfgs {
		regs[i], logs[i] = prometheus.NewRegistry(), &testutil.SyncBuffer{}
		cfgs[i].Registerer = regs[i]
		cfgs[i].Logger = slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfgs[i].TLS = clusterTLS(t, ca, "broker-"+strconv.Itoa(i))
		cfgs[i].GossipKeys = [][]byte{key}
	}
	cfgs[3].TLS = clusterTLS(t, other, "intruder-3")
	cfgs[4].GossipKeys = nil
	cfgs[3].BootstrapExpect, cfgs[4].BootstrapExpect = 0, 0
	nodes := startNodes(t, cfgs[:3])
	leader := func() *testNode { return leaderNode(nodes[:3]) }
	waitFormed(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	apply := func(topic string) {
		t.Helper()
		for _, n := range nodes[:3] {
			if !n.IsLeader() {
				if _, err := n.Apply(ctx, Command{Op: OpCreateTopic, Topic: topic, Partitions: 1}); err != nil {
					t.Fatalf("forwarded apply over TLS: %v", err)
				}
				return
			}
		}
	}
	apply("before")

	// The intruder with the gossip key but another CA's certificate.
	nodes = append(nodes, startNode(t, cfgs[3]))
	waitFor(t, "the intruder seen in gossip", func() bool { return nodes[0].ml.NumMembers() == 4 })
	waitFor(t, "the leader's refusal of the intruder's raft mux counted", func() bool {
		l := leader()
		return l != nil && promtest.ToFloat64(l.tlsFailures.WithLabelValues("dial", "bad_cert")) > 0
	})
	waitFor(t, "the intruder's refusal logged by the leader", func() bool {
		for i := range 3 {
			if strings.Contains(logs[i].String(), "does not answer over the cluster's TLS") && strings.Contains(logs[i].String(), "node_id=3") {
				return true
			}
		}
		return false
	})
	apply("with-intruder")

	// The broker without the gossip key.
	nodes = append(nodes, startNode(t, cfgs[4]))
	waitFor(t, "node 0 counts gossip it cannot decrypt", func() bool {
		return promtest.ToFloat64(nodes[0].gossipFailures) > 0
	})
	if !strings.Contains(logs[4].String(), "cannot join gossip yet") {
		time.Sleep(time.Second)
		if !strings.Contains(logs[4].String(), "cannot join gossip yet") {
			t.Errorf("the broker without the gossip key did not log a failed join:\n%s", logs[4].String())
		}
	}

	// Garbage, then a raft header in clear, to a voter's raft port.
	for _, payload := range [][]byte{[]byte("GET / HTTP/1.0\r\n\r\n"), append([]byte{kindRaft, 0, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 64)...)} {
		c, err := net.DialTimeout("tcp", nodes[1].RaftAddr(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(payload)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := io.Copy(io.Discard, c); err != nil && !isReset(err) {
			t.Errorf("raft port answered %d bytes, then %v; want the connection closed", n, err)
		}
		c.Close()
	}
	waitFor(t, "the garbage counted on node 1", func() bool {
		return promtest.ToFloat64(nodes[1].tlsFailures.WithLabelValues("accept", "not_tls")) >= 2
	})
	if !strings.Contains(logs[1].String(), "raft mux refused a TLS connection") {
		t.Errorf("node 1 did not log the refused connections:\n%s", logs[1].String())
	}

	apply("after")
	// Give the leader a few more reconcile ticks with both outsiders around.
	time.Sleep(2 * time.Second)
	for _, n := range nodes[:3] {
		md := n.Metadata()
		if _, ok := md.Brokers[3]; ok {
			t.Errorf("node %d registered the broker with a foreign certificate", n.cfg.NodeID)
		}
		if _, ok := md.Brokers[4]; ok {
			t.Errorf("node %d registered the broker without the gossip key", n.cfg.NodeID)
		}
		for _, id := range []string{"3", "4"} {
			if _, ok := raftServer(n, id); ok {
				t.Errorf("node %d has broker %s in its raft configuration", n.cfg.NodeID, id)
			}
		}
	}
	if nodes[4].ml.NumMembers() != 1 {
		t.Errorf("the broker without the gossip key sees %d gossip members, want itself only", nodes[4].ml.NumMembers())
	}
	if nodes[3].inCluster.Load() || nodes[4].inCluster.Load() {
		t.Error("an outsider believes it is in the controller")
	}
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe"))
}

// TestReadGossipKeys: a key per line, the first primary; bad sizes,
// bad base64 and an empty file are refused.
func TestReadGossipKeys(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := newGossipKey(t), newGossipKey(t)[:16]
	write := func(s string) string {
		p := filepath.Join(dir, "k")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keys, err := ReadGossipKeys(write("# rotation\n" + base64.StdEncoding.EncodeToString(k1) + "\n\n " + base64.StdEncoding.EncodeToString(k2) + "\n"))
	if err != nil || len(keys) != 2 || string(keys[0]) != string(k1) || string(keys[1]) != string(k2) {
		t.Fatalf("got %d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", "# none\n", "not base64!\n", base64.StdEncoding.EncodeToString(make([]byte, 20))} {
		if _, err := ReadGossipKeys(write(bad)); err == nil {
			t.Errorf("key file %q accepted", bad)
		}
	}
	if _, err := ReadGossipKeys(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing key file accepted")
	}
}

// TestClusterTLSPeerNames: with PeerNames, a certificate of the cluster
// CA but another name is refused on both sides of a mux connection.
func TestClusterTLSPeerNames(t *testing.T) {
	ca := testutil.NewCA(t)
	good := ca.Server(t, "broker-a")
	bad := ca.Server(t, "someone")
	mk := func(c testutil.Cert) *TLS {
		tl, err := NewTLS(TLSFiles{Cert: c.CertFile, Key: c.KeyFile, CA: ca.CAFile, PeerNames: []string{"broker-a", "broker-b"}})
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	srv := serveTLSMux(t, mk(good).ServerConfig())
	okCl, err := NewMux("127.0.0.1:0", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer okCl.Close()
	okCl.clientTLS = mk(good).ClientConfig()
	c, err := okCl.dial(srv.Addr(), 5*time.Second, []byte{kindWatch})
	if err != nil {
		t.Fatalf("a peer named in the list: %v", err)
	}
	c.Close()
	badCl, err := NewMux("127.0.0.1:0", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer badCl.Close()
	badCl.clientTLS = mk(bad).ClientConfig()
	if c, err := badCl.dial(srv.Addr(), 5*time.Second, []byte{kindWatch}); err == nil {
		// TLS 1.3: the server's verdict on the client certificate
		// arrives with the first read.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a peer with a name outside the list was let in")
		}
		c.Close()
	}
	waitFor(t, "the refusal counted", func() bool {
		return promtest.ToFloat64(srv.tlsFailures.WithLabelValues("accept", "peer_name")) == 1
	})
	// A client of the cluster refuses a server with another name.
	srv2 := serveTLSMux(t, mk(bad).ServerConfig())
	if c, err := okCl.dial(srv2.Addr(), 5*time.Second, []byte{kindWatch}); err == nil {
		c.Close()
		t.Fatal("dialed a mux whose certificate names no broker")
	}
}

// serveTLSMux starts a mux on a loopback port with this server TLS
// configuration, serving until the test ends.
func serveTLSMux(t *testing.T, cfg *tls.Config) *Mux {
	t.Helper()
	m, err := NewMux("127.0.0.1:0", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.serverTLS = cfg
	m.tlsFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "f"}, []string{"side", "reason"})
	done := make(chan struct{})
	go func() { defer close(done); m.Serve() }()
	t.Cleanup(func() { m.Close(); <-done })
	return m
}

// TestSetGossipKeys: a rotation step by step on a running node: the new
// key added second, then made primary, then the old one dropped.
func TestSetGossipKeys(t *testing.T) {
	k1, k2 := newGossipKey(t), newGossipKey(t)
	cfg := clusterConfigs(t, 1)[0]
	cfg.GossipKeys = [][]byte{k1}
	n := startNode(t, cfg)
	check := func(step string, primary []byte, all ...[]byte) {
		t.Helper()
		if got := n.keyring.GetPrimaryKey(); string(got) != string(primary) {
			t.Errorf("%s: another primary key", step)
		}
		if got := n.keyring.GetKeys(); len(got) != len(all) {
			t.Errorf("%s: %d keys, want %d", step, len(got), len(all))
		}
	}
	for _, step := range []struct {
		name    string
		keys    [][]byte
		primary []byte
	}{{"add", [][]byte{k1, k2}, k1}, {"switch", [][]byte{k2, k1}, k2}, {"drop", [][]byte{k2}, k2}} {
		if err := n.SetGossipKeys(step.keys); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		check(step.name, step.primary, step.keys...)
	}
	plain := clusterConfigs(t, 1)[0]
	if err := startNode(t, plain).SetGossipKeys([][]byte{k1}); err == nil {
		t.Error("keys set on a node started without gossip encryption")
	}
}

// TestClusterTLSBootstrapSkipsForeignCert: of four brokers that gossip
// with the same key before any controller exists, the one with the
// lowest id holds another CA's certificate: the other three bootstrap the
// controller without it.
func TestClusterTLSBootstrapSkipsForeignCert(t *testing.T) {
	skipElections(t)
	ca, other := testutil.NewCA(t), testutil.NewCA(t)
	key := newGossipKey(t)
	cfgs := clusterConfigs(t, 4)
	for i := range cfgs {
		cfgs[i].TLS = clusterTLS(t, ca, "broker-"+strconv.Itoa(i))
		cfgs[i].GossipKeys = [][]byte{key}
		cfgs[i].Registerer = prometheus.NewRegistry()
	}
	cfgs[0].TLS = clusterTLS(t, other, "intruder-0")
	nodes := startNodes(t, cfgs)
	waitFor(t, "brokers 1-3 in a controller with 3 alive brokers", func() bool {
		for _, n := range nodes[1:] {
			if len(n.Metadata().AliveBrokers()) != 3 || n.Metadata().ClusterID == "" {
				return false
			}
		}
		return true
	})
	for _, n := range nodes[1:] {
		if _, ok := raftServer(n, "0"); ok {
			t.Errorf("node %d has the intruder in its raft configuration", n.cfg.NodeID)
		}
		if _, ok := n.Metadata().Brokers[0]; ok {
			t.Errorf("node %d registered the intruder", n.cfg.NodeID)
		}
	}
	if nodes[0].inCluster.Load() {
		t.Error("the intruder believes it is in the controller")
	}
}

// A second connection to the same peer resumes the first one's session
// (no certificate signatures), and the peer is still verified.
func TestClusterTLSResumes(t *testing.T) {
	ca := testutil.NewCA(t)
	c := ca.Server(t, "broker-a")
	tl, err := NewTLS(TLSFiles{Cert: c.CertFile, Key: c.KeyFile, CA: ca.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tl.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			sc, err := ln.Accept()
			if err != nil {
				return
			}
			var b [1]byte
			if _, err := io.ReadFull(sc, b[:]); err == nil {
				_, _ = sc.Write(b[:])
			}
			sc.Close()
		}
	}()
	var resumed []bool
	for range 2 {
		cc, err := tls.Dial("tcp", ln.Addr().String(), tl.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := cc.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(cc, b[:]); err != nil {
			t.Fatal(err)
		}
		st := cc.ConnectionState()
		if len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "broker-a" {
			t.Fatalf("peer certificate after the handshake: %v", st.PeerCertificates)
		}
		resumed = append(resumed, st.DidResume)
		cc.Close()
	}
	if resumed[0] || !resumed[1] {
		t.Fatalf("resumed = %v, want [false true]", resumed)
	}
}
