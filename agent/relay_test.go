package agent_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simtel/simtel/agent/gossip"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// TestPolicyRelay runs a real broker and five agent processes that relay
// policy chunks to each other. A signed version reaches every node with
// exactly the published bytes while the brokers send far fewer than one
// copy per node; a relay request without the pool's key is refused; and
// a peer of the pool that serves corrupted chunks of the next version is
// detected, counted and bypassed, every node still installing exactly
// that version.
func TestPolicyRelay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	const nodes, seeds = 5, 2
	bin := testutil.Binary(t)
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	keys := t.TempDir()
	signKey, trustedPub := genKey(t, keys, "learner")
	poolKey := []byte("pool-secret-0123456789abcdef")
	keyFile := filepath.Join(keys, "relay.key")
	if err := os.WriteFile(keyFile, append(poolKey, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}

	agents, relays, gossipSeeds := startRelayAgents(t, nodes, seeds, br, trustedPub, keyFile)

	sum := func(name string) float64 {
		var s float64
		for _, a := range agents {
			s += actorMetric(t, a.http, name)
		}
		return s
	}
	v1 := randomBlob(8 << 20)
	m1 := learnerPublish(t, bin, br, v1, "--sign-key", signKey, "--chunk-size", "262144")
	for _, a := range agents {
		waitVersion(t, a, 1, v1)
	}
	fromBroker, fromPeers := sum("simtel_agent_policy_received_bytes_total"), sum("simtel_agent_policy_peer_bytes_total")
	served := sum("simtel_agent_policy_relay_served_bytes_total")
	t.Logf("%d nodes, %d-byte version: brokers sent %.2f copies, peers %.2f (relays served %.2f)",
		nodes, len(v1), fromBroker/float64(len(v1)), fromPeers/float64(len(v1)), served/float64(len(v1)))
	if fromBroker > float64((seeds+1)*len(v1)) {
		t.Errorf("the brokers sent %.2f copies of the version to %d nodes, want at most %d", fromBroker/float64(len(v1)), nodes, seeds+1)
	}
	if fromPeers < float64(len(v1)) || served != fromPeers {
		t.Errorf("nodes received %.0f bytes from peers and relays served %.0f, want equal and at least one copy (%d)", fromPeers, served, len(v1))
	}

	// The relay refuses requests without the pool's key; with it, it
	// serves the chunk's bytes.
	c0 := m1.Chunks[0].(map[string]any)
	path := fmt.Sprintf("/v1/relay/actor/1/%s", c0["h"])
	for name, auth := range map[string]string{
		"no key":    "",
		"other key": relayAuth([]byte("another-secret-0123456789"), path),
		"bearer":    "Bearer " + string(poolKey),
	} {
		if code, _ := relayGet(t, relays[0], path, auth); code != http.StatusUnauthorized {
			t.Errorf("relay request with %s: %d, want 401", name, code)
		}
	}
	if n := actorRelayRefused(t, agents[0].http); n != 3 {
		t.Errorf("simtel_agent_policy_relay_refused_total %v, want 3", n)
	}
	size := int(c0["n"].(float64))
	if code, b := relayGet(t, relays[0], path, relayAuth(poolKey, path)); code != http.StatusOK || string(b) != string(v1[:size]) {
		t.Errorf("relay request with the pool's key: %d, %d bytes; want 200 and chunk 0 (%d bytes)", code, len(b), size)
	}

	// A peer that serves every chunk with one byte flipped joins the pool
	// claiming version 2 before it is published.
	v2 := randomBlob(6 << 20)
	var m2 learnerManifest
	ready := make(chan struct{})
	var fakeServed atomic.Int64
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-ready:
		case <-r.Context().Done():
			return
		}
		hash := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		var pos int
		for _, c := range m2.Chunks {
			c := c.(map[string]any)
			n := int(c["n"].(float64))
			if c["h"] == hash {
				b := append([]byte(nil), v2[pos:pos+n]...)
				b[n/2] ^= 0x40
				fakeServed.Add(1)
				w.Write(b)
				return
			}
			pos += n
		}
		http.NotFound(w, r)
	}))
	defer fake.Close()
	pool, err := gossip.Start(gossip.Config{NodeName: "liar", Bind: "127.0.0.1:0", Join: gossipSeeds, Cluster: "relay-run",
		Relay: strings.TrimPrefix(fake.URL, "http://"), Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pool.SetHolding("actor", gossip.Holding{Version: 2})
	for _, a := range agents {
		waitRelays(t, a, nodes+1)
	}
	corruptBefore := sum("simtel_agent_policy_peer_corrupt_chunks_total")
	// The fake answers once the manifest is known; nodes that ask
	// earlier wait for it.
	m2 = learnerPublish(t, bin, br, v2, "--sign-key", signKey, "--chunk-size", "262144")
	close(ready)
	for _, a := range agents {
		waitVersion(t, a, 2, v2)
	}
	corrupt := sum("simtel_agent_policy_peer_corrupt_chunks_total") - corruptBefore
	t.Logf("the lying peer served %d chunks; nodes counted %.0f corrupt chunks", fakeServed.Load(), corrupt)
	if fakeServed.Load() == 0 || corrupt != float64(fakeServed.Load()) {
		t.Errorf("the lying peer served %d chunks, nodes counted %.0f corrupt ones; want as many, and some", fakeServed.Load(), corrupt)
	}
}

// startRelayAgents starts n agent processes following policy "actor"
// (versions signed with the key of trustedPub) that relay chunks to each
// other, and returns once every node sees every relay in the pool.
func startRelayAgents(t *testing.T, n, seeds int, br, trustedPub, keyFile string) (agents []*policyAgent, relays, gossipSeeds []string) {
	t.Helper()
	agents = make([]*policyAgent, n)
	relays = make([]string, n)
	for i := range agents {
		agents[i] = &policyAgent{name: fmt.Sprintf("n%d", i+1), http: testutil.FreePort(t), gossip: testutil.FreePort(t), dir: t.TempDir()}
		relays[i] = testutil.FreePort(t)
		gossipSeeds = append(gossipSeeds, agents[i].gossip)
	}
	for i, a := range agents {
		a.args = []string{"agent", "--brokers", br, "--spool-dir", filepath.Join(a.dir, "spool"), "--listen-http", a.http,
			"--listen-udp", "", "--listen-tcp", "", "--collect-interval", "-1s", "--host", a.name, "--run", "relay-run",
			"--policies", "actor", "--policy-dir", filepath.Join(a.dir, "policy"), "--policy-trusted-keys", trustedPub,
			"--gossip-listen", a.gossip, "--gossip-join", strings.Join(gossipSeeds, ","), "--gossip-fast",
			"--policy-relay-listen", relays[i], "--policy-relay-key", keyFile,
			"--policy-relay-seeds", fmt.Sprint(seeds), "--policy-relay-wait", "40s"}
		a.proc = testutil.Start(t, a.dir, a.args...)
	}
	for i, a := range agents {
		testutil.WaitPort(t, a.http, a.proc)
		testutil.WaitPort(t, relays[i], a.proc)
	}
	// Ranks are computed from the pool's view: publish once every node
	// sees every relay.
	for _, a := range agents {
		waitRelays(t, a, n)
	}
	return agents, relays, gossipSeeds
}

// TestPolicyRelaySpread runs a real broker and twelve relaying agent
// processes and publishes three versions: every node gets each version
// while the brokers send about seeds copies, and the relays share the
// rest, no node serving half of a version's relay copies (as when every
// node asks the first nodes of the order). How evenly they share it
// moves with how the CPU is shared among the processes: the busiest
// node's mean over the versions was 2.0-2.3 copies on a quiet machine
// and 3.2 beside a CPU-bound process, too close to the 3.4-3.7 of nodes
// that asked every holder before them for a pass/fail bound, so it is
// logged; the plan (TestRelaySourceWindows) and the spread of each
// node's chunks over its sources (TestRelaySpreadScore) are checked
// exactly.
func TestPolicyRelaySpread(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	const nodes, seeds, versions = 12, 2, 3
	bin := testutil.Binary(t)
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	keys := t.TempDir()
	signKey, trustedPub := genKey(t, keys, "learner")
	keyFile := filepath.Join(keys, "relay.key")
	if err := os.WriteFile(keyFile, []byte("pool-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agents, _, _ := startRelayAgents(t, nodes, seeds, br, trustedPub, keyFile)
	served := func() []float64 {
		out := make([]float64, len(agents))
		for i, a := range agents {
			out[i] = actorMetric(t, a.http, "simtel_agent_policy_relay_served_bytes_total")
		}
		return out
	}
	var sumMost float64
	var perVersion []string
	for v := int64(1); v <= versions; v++ {
		before := served()
		fromBroker := 0.0
		for _, a := range agents {
			fromBroker -= actorMetric(t, a.http, "simtel_agent_policy_received_bytes_total")
		}
		blob := randomBlob(8 << 20)
		learnerPublish(t, bin, br, blob, "--sign-key", signKey, "--chunk-size", "262144")
		for _, a := range agents {
			waitVersion(t, a, v, blob)
		}
		for _, a := range agents {
			fromBroker += actorMetric(t, a.http, "simtel_agent_policy_received_bytes_total")
		}
		var copies []string
		most, all := 0.0, 0.0
		for i, b := range served() {
			c := (b - before[i]) / float64(len(blob))
			copies = append(copies, fmt.Sprintf("%s %.2f", agents[i].name, c))
			most, all = max(most, c), all+c
		}
		t.Logf("version %d: brokers sent %.2f copies, relays %.2f: %s", v, fromBroker/float64(len(blob)), all, strings.Join(copies, ", "))
		if sent := fromBroker / float64(len(blob)); sent > seeds+1 {
			t.Errorf("version %d: the brokers sent %.2f copies, want at most %d (the seeds' and one more)", v, sent, seeds+1)
		}
		if most >= all/2 {
			t.Errorf("version %d: one node served %.2f of the relays' %.2f copies", v, most, all)
		}
		sumMost += most
		perVersion = append(perVersion, fmt.Sprintf("%.2f", most))
	}
	t.Logf("the busiest node of each version served %s copies to its peers, %.2f on average", strings.Join(perVersion, ", "), sumMost/versions)
}

// waitRelays waits until an agent's rollout view lists n live nodes with
// a relay address.
func waitRelays(t *testing.T, a *policyAgent, n int) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%s sees %d relays", a.name, n), func() error {
		resp, err := http.Get("http://" + a.http + "/v1/rollout/actor")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var v struct {
			Nodes []struct {
				Node  string `json:"node"`
				Relay string `json:"relay"`
				Alive bool   `json:"alive"`
			} `json:"nodes"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			return err
		}
		got := 0
		for _, nh := range v.Nodes {
			if nh.Alive && nh.Relay != "" {
				got++
			}
		}
		if got != n {
			return fmt.Errorf("%d relays: %+v", got, v.Nodes)
		}
		return nil
	})
}

// relayAuth is the Authorization header of a relay request for path
// signed with key.
func relayAuth(key []byte, path string) string {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, "GET "+path)
	return "Simtel-Relay " + hex.EncodeToString(m.Sum(nil))
}

func relayGet(t *testing.T, addr, path, auth string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func actorRelayRefused(t *testing.T, addr string) float64 {
	t.Helper()
	return metricValue(metrics(t, addr), "simtel_agent_policy_relay_refused_total")
}
