package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/agent"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

type policyAgent struct {
	name, http, gossip, dir string
	proc                    *testutil.Proc
	args                    []string
}

func getPolicy(t *testing.T, url string) (agent.PolicyInfo, int) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 70 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var pi agent.PolicyInfo
	if resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(&pi); err != nil {
			t.Fatal(err)
		}
	}
	return pi, resp.StatusCode
}

func publish(t *testing.T, agentHTTP string, blob []byte) agent.PolicyInfo {
	t.Helper()
	resp, err := http.Post("http://"+agentHTTP+"/v1/policy/actor", "application/octet-stream", bytes.NewReader(blob))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 {
		t.Fatalf("POST /v1/policy/actor: %d %s", resp.StatusCode, body)
	}
	var pi agent.PolicyInfo
	json.Unmarshal(body, &pi)
	return pi
}

// waitVersion long-polls an agent until it holds at least v, and checks the
// file it names has the published bytes.
func waitVersion(t *testing.T, a *policyAgent, v int64, want []byte) agent.PolicyInfo {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pi, code := getPolicy(t, fmt.Sprintf("http://%s/v1/policy/actor?after=%d&wait=20s", a.http, v-1))
		if code == 200 && pi.Version >= v {
			if want != nil {
				got, err := os.ReadFile(pi.Path)
				if err != nil {
					t.Fatalf("%s: cannot read %s: %v", a.name, pi.Path, err)
				}
				sum := sha256.Sum256(want)
				if !bytes.Equal(got, want) || pi.SHA256 != hex.EncodeToString(sum[:]) {
					t.Fatalf("%s: version %d file differs from what was published", a.name, pi.Version)
				}
			}
			return pi
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: version %d not held within 60s (last answer %d %+v)", a.name, v, code, pi)
		}
	}
}

func randomBlob(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestPolicyFanOutAcrossAgentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	agents := make([]*policyAgent, 3)
	var seeds []string
	for i := range agents {
		a := &policyAgent{name: fmt.Sprintf("n%d", i+1), http: testutil.FreePort(t), gossip: testutil.FreePort(t), dir: t.TempDir()}
		seeds = append(seeds, a.gossip)
		agents[i] = a
	}
	start := func(a *policyAgent) {
		a.args = []string{"agent", "--brokers", br, "--spool-dir", filepath.Join(a.dir, "spool"), "--listen-http", a.http,
			"--listen-udp", "", "--listen-tcp", "", "--collect-interval", "-1s", "--host", a.name, "--run", "rl-run",
			"--policies", "actor", "--policy-dir", filepath.Join(a.dir, "policy"), "--policy-keep", "2",
			"--gossip-listen", a.gossip, "--gossip-join", strings.Join(seeds, ","), "--gossip-fast"}
		a.proc = testutil.Start(t, a.dir, a.args...)
		testutil.WaitPort(t, a.http, a.proc)
	}
	for _, a := range agents {
		start(a)
	}

	// Nothing published yet: 404, and a short long-poll answers 304.
	if _, code := getPolicy(t, "http://"+agents[0].http+"/v1/policy/actor"); code != 404 {
		t.Fatalf("before any publish: got %d, want 404", code)
	}
	if _, code := getPolicy(t, "http://"+agents[0].http+"/v1/policy/actor?after=0&wait=300ms"); code != 304 {
		t.Fatalf("long poll with nothing new: got %d, want 304", code)
	}

	// v1 published through one agent's HTTP API reaches every agent.
	v1 := randomBlob(3<<20 + 12345)
	if pi := publish(t, agents[0].http, v1); pi.Version != 1 {
		t.Fatalf("first publish got version %d, want 1", pi.Version)
	}
	for _, a := range agents {
		waitVersion(t, a, 1, v1)
	}

	// Long poll answers promptly when a new version lands.
	got := make(chan agent.PolicyInfo, 1)
	go func() {
		pi, _ := getPolicy(t, "http://"+agents[1].http+"/v1/policy/actor?after=1&wait=60s")
		got <- pi
	}()
	time.Sleep(200 * time.Millisecond)
	v2 := randomBlob(1 << 20)
	published := time.Now()
	publish(t, agents[2].http, v2)
	select {
	case pi := <-got:
		if pi.Version != 2 {
			t.Fatalf("long poll returned version %d, want 2", pi.Version)
		}
		t.Logf("long poll answered %v after the publish returned", time.Since(published).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("long poll did not answer within 30s of a new version (its wait was 60s)")
	}

	// A stalled agent skips intermediate versions: it is stopped while v3,
	// v4 and v5 are published, and fetches only v5.
	slow := agents[2]
	testutil.Pause(t, slow.proc.Cmd.Process)
	var v5 []byte
	for i := 3; i <= 5; i++ {
		v5 = randomBlob(512<<10 + i)
		publish(t, agents[0].http, v5)
	}
	slow.proc.Cmd.Process.Signal(syscall.SIGCONT)
	waitVersion(t, slow, 5, v5)
	for _, v := range []string{"3", "4"} {
		if _, err := os.Stat(filepath.Join(slow.dir, "policy", "actor", v)); err == nil {
			t.Errorf("the stalled agent fetched intermediate version %s", v)
		}
	}
	for _, a := range agents[:2] {
		waitVersion(t, a, 5, v5)
	}

	// An agent killed mid-transfer serves its previous version at once
	// after a restart and then completes the new one.
	victim := agents[1]
	big := randomBlob(48 << 20)
	pubDone := make(chan struct{})
	go func() { defer close(pubDone); publish(t, agents[0].http, big) }()
	time.Sleep(300 * time.Millisecond)
	victim.proc.Kill()
	<-pubDone
	victim.proc = testutil.Start(t, victim.dir, victim.args...)
	testutil.WaitPort(t, victim.http, victim.proc)
	if pi, code := getPolicy(t, "http://"+victim.http+"/v1/policy/actor"); code != 200 || pi.Version < 5 {
		t.Fatalf("restarted agent: got %d version %d, want its cached version (>= 5) at once", code, pi.Version)
	}
	waitVersion(t, victim, 6, big)

	// A corrupted version is never exposed: chunks whose bytes do not
	// match the manifest's hash.
	produceCorrupt(t, br, 7)
	time.Sleep(3 * time.Second)
	for _, a := range agents {
		pi, code := getPolicy(t, "http://"+a.http+"/v1/policy/actor")
		if code != 200 || pi.Version != 6 {
			t.Errorf("%s after a corrupt v7: serves %d (code %d), want 6", a.name, pi.Version, code)
		}
		m := metrics(t, a.http)
		if !strings.Contains(m, `simtel_agent_policy_corrupt_total{policy="actor"} 1`) {
			t.Errorf("%s: corrupt version not counted:\n%s", a.name, grepLines(m, "policy"))
		}
	}

	// Rollout status: every node of the pool holds v6.
	testutil.WaitFor(t, 30*time.Second, "rollout view of 3 nodes at v6", func() error {
		resp, err := http.Get("http://" + agents[0].http + "/v1/rollout/actor")
		if err != nil {
			t.Fatal(err)
		}
		var view struct {
			Newest    int64           `json:"newest"`
			ByVersion map[int64]int   `json:"by_version"`
			Nodes     json.RawMessage `json:"nodes"`
		}
		json.NewDecoder(resp.Body).Decode(&view)
		resp.Body.Close()
		if view.ByVersion[6] != 3 {
			return fmt.Errorf("newest %d, by version %v, nodes %s", view.Newest, view.ByVersion, view.Nodes)
		}
		return nil
	})
	out, err := exec.Command(testutil.Binary(t), "learner", "status", "--policy", "actor", "--agent", agents[1].http).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "newest version 6 on 3 nodes") {
		t.Fatalf("simtel learner status: %v\n%s", err, out)
	}
}

func metrics(t *testing.T, addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// produceCorrupt writes version v by hand: two chunks and a manifest whose
// hash is of other bytes.
func produceCorrupt(t *testing.T, br string, v int64) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(br), kgo.DefaultProduceTopic("policy.actor"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	hdr := func(kind string, idx int) []kgo.RecordHeader {
		h := []kgo.RecordHeader{{Key: "simtel.kind", Value: []byte(kind)}, {Key: "simtel.version", Value: []byte(fmt.Sprint(v))}}
		if kind == "chunk" {
			h = append(h, kgo.RecordHeader{Key: "simtel.index", Value: []byte(fmt.Sprint(idx))})
		}
		return h
	}
	var first, last int64
	for i := 0; i < 2; i++ {
		r := &kgo.Record{Value: bytes.Repeat([]byte{byte(i)}, 1000), Headers: hdr("chunk", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.Offset
		}
		last = r.Offset
	}
	other := sha256.Sum256([]byte("not these bytes"))
	m := map[string]any{"policy": "actor", "version": v, "size": 2000, "chunks": 2, "first_chunk_offset": first,
		"last_chunk_offset": last, "sha256": hex.EncodeToString(other[:]), "published": time.Now()}
	val, _ := json.Marshal(m)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: val, Headers: hdr("manifest", 0)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
