package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/agent"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/learner/learnertest"
)

// TestPolicyDeltasAndSignatures runs a real broker and three agent
// processes that trust one key. Versions are published with `simtel
// learner publish` in format 2: a full signed version, then signed deltas
// with a few percent of the bytes changed. Agents that hold the base and
// an agent started later without it all hold exactly the published
// bytes; unsigned versions and versions signed by another key never
// reach GET /v1/policy/actor or the latest link and are counted, and so is
// a truncated manifest; workers
// polling throughout never read a file that is not a published version.
func TestPolicyDeltasAndSignatures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	bin := testutil.Binary(t)
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	keys := t.TempDir()
	trusted, trustedPub := genKey(t, keys, "learner")
	other, _ := genKey(t, keys, "intruder")

	agents := make([]*policyAgent, 3)
	for i := range agents {
		agents[i] = &policyAgent{name: fmt.Sprintf("n%d", i+1), http: testutil.FreePort(t), dir: t.TempDir()}
	}
	start := func(a *policyAgent) {
		a.args = []string{"agent", "--brokers", br, "--spool-dir", filepath.Join(a.dir, "spool"), "--listen-http", a.http,
			"--listen-udp", "", "--listen-tcp", "", "--collect-interval", "-1s", "--host", a.name, "--run", "rl-run",
			"--policies", "actor", "--policy-dir", filepath.Join(a.dir, "policy"), "--policy-keep", "3",
			"--policy-trusted-keys", trustedPub}
		a.proc = testutil.Start(t, a.dir, a.args...)
		testutil.WaitPort(t, a.http, a.proc)
	}
	for _, a := range agents[:2] {
		start(a)
	}

	// What was published, by SHA-256: workers check every file they
	// read against it.
	var mu sync.Mutex
	published := map[string]bool{}
	pub := func(data []byte, args ...string) learnerManifest {
		t.Helper()
		sum := sha256.Sum256(data)
		mu.Lock()
		published[hex.EncodeToString(sum[:])] = true
		mu.Unlock()
		if len(args) > 0 { // format 2: chunks small enough for a 16 MiB version
			args = append(args, "--chunk-size", "262144")
		}
		return learnerPublish(t, bin, br, data, args...)
	}

	ctx, stopWorkers := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	var reads, mixed sync.Map
	for _, a := range agents[:2] {
		for w := range 2 {
			workers.Add(1)
			go func() {
				defer workers.Done()
				pollWorker(ctx, a, w == 0, published, &mu, &reads, &mixed)
			}()
		}
	}

	v1 := randomBlob(16 << 20)
	if m := pub(v1, "--sign-key", trusted); m.Format != 2 || m.Base != 0 || m.KeyID == "" {
		t.Fatalf("signed full version: %+v", m)
	}
	for _, a := range agents[:2] {
		waitVersion(t, a, 1, v1)
	}
	recvBefore := actorMetric(t, agents[0].http, "simtel_agent_policy_received_bytes_total")

	// A delta with 3% of the bytes changed: agents with the base
	// receive a small part of it.
	v2 := learnertest.ChangeRegions(v1, 0.03, 2)
	if m := pub(v2, "--sign-key", trusted, "--delta-from", "auto"); m.Base != 1 || m.Sent*4 > len(m.Chunks) {
		t.Fatalf("delta: %+v", m)
	}
	for _, a := range agents[:2] {
		waitVersion(t, a, 2, v2)
	}
	recv := actorMetric(t, agents[0].http, "simtel_agent_policy_received_bytes_total") - recvBefore
	t.Logf("agent with the base received %.0f bytes for a %d-byte version with 3%% changed (%.1f%%)", recv, len(v2), 100*recv/float64(len(v2)))
	if recv > float64(len(v2))/10 {
		t.Errorf("agent with the base received %.0f bytes of a %d-byte delta version, want at most 10%%", recv, len(v2))
	}

	// An agent started now, without the base, assembles the delta from
	// the base's records.
	start(agents[2])
	waitVersion(t, agents[2], 2, v2)

	// Unsigned, signed by an unknown key: refused everywhere.
	pub(learnertest.ChangeRegions(v2, 0.03, 2), "--format", "2", "--delta-from", "auto")
	pub(learnertest.ChangeRegions(v2, 0.03, 2), "--sign-key", other, "--delta-from", "2")
	pub(randomBlob(1 << 20)) // format 1: unsigned
	for _, a := range agents {
		waitRefused(t, a, "simtel_agent_policy_untrusted_total", 3, 2)
		if l, err := os.Readlink(filepath.Join(a.dir, "policy", "actor", "latest")); err != nil || l != "2" {
			t.Errorf("%s: latest -> %q, %v; want 2", a.name, l, err)
		}
	}

	// A signed delta from version 2 is taken by everyone, the agent
	// without version 1 included.
	v6 := learnertest.ChangeRegions(v2, 0.02, 2)
	if m := pub(v6, "--sign-key", trusted, "--delta-from", "2"); m.Version != 6 || m.Base != 2 {
		t.Fatalf("signed delta from 2: %+v", m)
	}
	for _, a := range agents {
		waitVersion(t, a, 6, v6)
	}

	// A truncated format 2 manifest is counted and never exposed.
	cl, err := kgo.NewClient(kgo.SeedBrokers(br), kgo.DefaultProduceTopic("policy.actor"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	full, _ := json.Marshal(map[string]any{"format": 2, "policy": "actor", "version": 7, "chunks": []any{}})
	trunc := &kgo.Record{Value: full[:len(full)/2], Headers: []kgo.RecordHeader{
		{Key: "simtel.kind", Value: []byte("manifest")}, {Key: "simtel.version", Value: []byte("7")}, {Key: "simtel.format", Value: []byte("2")}}}
	if err := cl.ProduceSync(ctx, trunc).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		waitRefused(t, a, "simtel_agent_policy_corrupt_total", 1, 6)
	}

	stopWorkers()
	workers.Wait()
	mixed.Range(func(k, v any) bool {
		t.Errorf("a worker read a file that is no published version: %v: %v", k, v)
		return true
	})
	n := 0
	reads.Range(func(_, _ any) bool { n++; return true })
	if n < 2 {
		t.Errorf("workers read %d distinct versions, want several", n)
	}
}

// pollWorker reads the version an agent announces (GET /v1/policy, or the
// latest link when viaLink) until ctx ends, and records each read's hash
// in reads, or in mixed if it is not a published version.
func pollWorker(ctx context.Context, a *policyAgent, viaLink bool, published map[string]bool, mu *sync.Mutex, reads, mixed *sync.Map) {
	for ctx.Err() == nil {
		var data []byte
		var err error
		var claimed string
		if viaLink {
			data, err = os.ReadFile(filepath.Join(a.dir, "policy", "actor", "latest"))
		} else {
			var resp *http.Response
			if resp, err = http.Get("http://" + a.http + "/v1/policy/actor"); err == nil {
				var pi agent.PolicyInfo
				if resp.StatusCode == 200 {
					json.NewDecoder(resp.Body).Decode(&pi)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				} else {
					claimed = pi.SHA256
					data, err = os.ReadFile(pi.Path)
				}
			}
		}
		if err == nil {
			sum := sha256.Sum256(data)
			h := hex.EncodeToString(sum[:])
			mu.Lock()
			ok := published[h]
			mu.Unlock()
			if !ok || claimed != "" && claimed != h {
				mixed.Store(fmt.Sprintf("%s %s", a.name, h[:12]), fmt.Sprintf("%d bytes, agent claimed %q", len(data), claimed))
			} else {
				reads.Store(h, true)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type learnerManifest struct {
	Version int64  `json:"version"`
	Format  int    `json:"format"`
	Base    int64  `json:"base"`
	Sent    int    `json:"sent"`
	KeyID   string `json:"key_id"`
	Chunks  []any  `json:"chunks"`
}

func (m learnerManifest) String() string {
	return fmt.Sprintf("version %d format %d base %d sent %d of %d key %q", m.Version, m.Format, m.Base, m.Sent, len(m.Chunks), m.KeyID)
}

// learnerPublish runs simtel learner publish with data on stdin.
func learnerPublish(t *testing.T, bin, br string, data []byte, args ...string) learnerManifest {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"learner", "publish", "--brokers", br, "--policy", "actor", "--quiet", "--timeout", "60s"}, args...)...)
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("learner publish %v: %v\n%s", args, err, stderr.String())
	}
	var m struct {
		learnerManifest
		Chunks json.RawMessage `json:"chunks"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("learner publish printed %s: %v", out, err)
	}
	if m.Format == 2 {
		json.Unmarshal(m.Chunks, &m.learnerManifest.Chunks)
	}
	return m.learnerManifest
}

// genKey writes an ed25519 key pair with openssl, as the docs say to, and
// returns the private and public key files.
func genKey(t *testing.T, dir, name string) (priv, pub string) {
	t.Helper()
	priv, pub = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".pub")
	for _, args := range [][]string{
		{"genpkey", "-algorithm", "ed25519", "-out", priv},
		{"pkey", "-in", priv, "-pubout", "-out", pub},
	} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	return priv, pub
}

// actorMetric reads one policy="actor" series from an agent's /metrics.
// waitRefused waits until the agent's counter metric of refused versions
// reaches n, then checks that it still serves version want.
func waitRefused(t *testing.T, a *policyAgent, metric string, n float64, want int64) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%s counts %v in %s", a.name, n, metric), func() error {
		if got := actorMetric(t, a.http, metric); got != n {
			return fmt.Errorf("%s %v", metric, got)
		}
		return nil
	})
	if pi, code := getPolicy(t, "http://"+a.http+"/v1/policy/actor"); code != 200 || pi.Version != want {
		t.Errorf("%s serves version %d (%d) after %v refused in %s, want %d", a.name, pi.Version, code, n, metric, want)
	}
}

func actorMetric(t *testing.T, addr, name string) float64 {
	t.Helper()
	return metricValue(metrics(t, addr), name+`{policy="actor"}`)
}
