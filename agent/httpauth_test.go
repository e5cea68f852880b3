package agent_test

import (
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

	"github.com/simtel/simtel/agent"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// authCase is one request to the agent and the answer it must get.
type authCase struct {
	name, method, path string
	header             map[string]string
	basic              [2]string // user, password; empty: none
	body               string
	code               int
	// bodyHas is a part of the answer's JSON body.
	bodyHas string
}

func (c authCase) do(t *testing.T, cl *http.Client, base string) {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	if c.basic[0] != "" {
		req.SetBasicAuth(c.basic[0], c.basic[1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != c.code {
		t.Errorf("%s: %s %s: status %d (%s), want %d", c.name, c.method, c.path, resp.StatusCode, b, c.code)
		return
	}
	if c.bodyHas != "" && !strings.Contains(string(b), c.bodyHas) {
		t.Errorf("%s: body %s lacks %s", c.name, b, c.bodyHas)
	}
	if c.code == http.StatusUnauthorized {
		if got := resp.Header.Get("WWW-Authenticate"); got != `Basic realm="InfluxDB"` {
			t.Errorf("%s: WWW-Authenticate %q, want InfluxDB's Basic challenge", c.name, got)
		}
		if !json.Valid(b) {
			t.Errorf("%s: 401 body %q is not JSON", c.name, b)
		}
	}
}

// TestHTTPTokensOverTLS: an agent serving HTTPS with a token file refuses
// writes and policy POSTs without a known token, as InfluxDB does, accepts
// each form clients send the token in, leaves /metrics and health checks
// open, counts the refusals by reason, and takes a new token file without
// a restart.
func TestHTTPTokensOverTLS(t *testing.T) {
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	ca := testutil.NewCA(t)
	cert := ca.Server(t, "agent")
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# the node's tokens\ntok-one\n  tok-two  \n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, br, func(c *agent.Config) {
		c.HTTPTLSCert, c.HTTPTLSKey = cert.CertFile, cert.KeyFile
		c.HTTPTokenFile = tokens
		c.HTTPReloadInterval = 50 * time.Millisecond
		c.Policies = []string{"actor"}
		c.PolicyDir = filepath.Join(t.TempDir(), "policy")
	})
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS()}, Timeout: 30 * time.Second}
	base := "https://" + a.addrs["http"]
	tok := func(s string) map[string]string { return map[string]string{"Authorization": s} }

	for _, c := range []authCase{
		{name: "v1 without token", method: "POST", path: "/write?db=x", body: "m v=1", code: 401, bodyHas: `"error":"unable to parse authentication credentials"`},
		{name: "v2 without token", method: "POST", path: "/api/v2/write?bucket=b", body: "m v=1", code: 401, bodyHas: `"code":"unauthorized"`},
		{name: "v1 wrong token", method: "POST", path: "/write?db=x", header: tok("Token tok-three"), body: "m v=1", code: 401, bodyHas: `"error":"authorization failed"`},
		{name: "v2 wrong token", method: "POST", path: "/api/v2/write?bucket=b", header: tok("Token tok-on"), body: "m v=1", code: 401, bodyHas: `"message":"unauthorized access"`},
		{name: "wrong basic password", method: "POST", path: "/write?db=x", basic: [2]string{"slurm", "tok-onex"}, body: "m v=1", code: 401},
		{name: "wrong p", method: "POST", path: "/write?db=x&u=slurm&p=nope", body: "m v=1", code: 401},
		{name: "unknown scheme", method: "POST", path: "/write?db=x", header: tok("Digest tok-one"), body: "m v=1", code: 401},
		{name: "policy POST without token", method: "POST", path: "/v1/policy/actor", body: "weights", code: 401},
		{name: "policy GET without token", method: "GET", path: "/v1/policy/actor", code: 401},
		{name: "pprof without token", method: "GET", path: "/debug/pprof/", code: 401},

		{name: "Token", method: "POST", path: "/api/v2/write?bucket=b", header: tok("Token tok-one"), body: "auth_token v=1", code: 204},
		{name: "Bearer", method: "POST", path: "/write?db=x", header: tok("Bearer tok-two"), body: "auth_bearer v=1", code: 204},
		{name: "Basic (Slurm's profiler)", method: "POST", path: "/write?db=x&rp=&precision=s", basic: [2]string{"slurm", "tok-one"}, body: "auth_basic v=1", code: 204},
		{name: "u and p", method: "POST", path: "/write?db=x&u=telegraf&p=tok-two", body: "auth_query v=1", code: 204},
		{name: "policy POST with token", method: "POST", path: "/v1/policy/actor", header: tok("Token tok-one"), body: "weights", code: 201},

		{name: "metrics", method: "GET", path: "/metrics", code: 200},
		{name: "healthz", method: "GET", path: "/healthz", code: 200},
		{name: "ping", method: "GET", path: "/ping", code: 204},
	} {
		c.do(t, cl, base)
	}

	// Plain HTTP to the HTTPS listener stores nothing.
	if resp, err := http.Post("http://"+a.addrs["http"]+"/write?db=x", "text/plain", strings.NewReader("plain v=1")); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 204 {
			t.Error("a plain HTTP write to the HTTPS listener was accepted")
		}
	}

	// The refusals are counted by reason: 3 without credentials (the two
	// writes and the policy POST, the policy GET and pprof make 5), 4 with
	// a wrong token, 1 of an unknown scheme; the write paths' 401s also
	// count as answers of those paths.
	resp, err := cl.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, series := range []string{
		`simtel_agent_http_auth_failures_total{reason="missing"} 5`,
		`simtel_agent_http_auth_failures_total{reason="wrong"} 4`,
		`simtel_agent_http_auth_failures_total{reason="malformed"} 1`,
		`simtel_agent_http_auth_failures_total{reason="remote_policy"} 0`,
		`simtel_agent_http_requests_total{code="401",path="/write"} 5`,
		`simtel_agent_http_requests_total{code="401",path="/api/v2/write"} 2`,
	} {
		if !strings.Contains(string(m), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}

	counts, _ := readTopic(t, br, "telemetry", 4, 20*time.Second)
	for _, name := range []string{"auth_token,", "auth_bearer,", "auth_basic,", "auth_query,"} {
		if _, ok := find(counts, name); !ok {
			t.Errorf("%s missing from the topic: %v", name, counts)
		}
	}
	if _, ok := find(counts, "m,"); ok {
		t.Errorf("a refused write was shipped: %v", counts)
	}

	// A new token file replaces the tokens without a restart.
	if err := os.WriteFile(tokens, []byte("tok-three\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(token string) int {
		req, _ := http.NewRequest("POST", base+"/api/v2/write?bucket=b", strings.NewReader("reloaded v=1"))
		req.Header.Set("Authorization", "Token "+token)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testutil.WaitFor(t, 10*time.Second, "the new token file", func() error {
		if code := write("tok-three"); code != 204 {
			return fmt.Errorf("the new token gets %d", code)
		}
		return nil
	})
	if code := write("tok-one"); code != 401 {
		t.Errorf("a token removed from the file gets %d, want 401", code)
	}
	// A token file emptied by mistake keeps the tokens in use.
	if err := os.WriteFile(tokens, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if code := write("tok-three"); code != 204 {
		t.Errorf("after the token file was emptied, the token in use gets %d, want 204", code)
	}
}

// TestHTTPSettingsRefusedAtStart: a token file without a token, an
// unreadable one, or a certificate without its key stop the agent at
// start instead of leaving the listener open.
func TestHTTPSettingsRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# no token yet\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := testutil.NewCA(t)
	cert := ca.Server(t, "agent")
	for _, c := range []struct {
		name string
		mod  func(*agent.Config)
		want string
	}{
		{"empty token file", func(c *agent.Config) { c.HTTPTokenFile = empty }, "holds no token"},
		{"missing token file", func(c *agent.Config) { c.HTTPTokenFile = filepath.Join(dir, "nope") }, "cannot read the HTTP token file"},
		{"certificate without key", func(c *agent.Config) { c.HTTPTLSCert = cert.CertFile }, "--http-tls-key"},
		{"key that is not a key", func(c *agent.Config) { c.HTTPTLSCert, c.HTTPTLSKey = cert.CertFile, empty }, "cannot serve HTTPS"},
	} {
		cfg := agent.Config{Brokers: []string{"127.0.0.1:1"}, ListenHTTP: "127.0.0.1:0", SpoolDir: filepath.Join(dir, c.name), Logger: testutil.Logger()}
		cfg.Tags.Host = "node1"
		c.mod(&cfg)
		_, err := agent.New(cfg)
		if err == nil {
			t.Errorf("%s: the agent started", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want one with %q", c.name, err, c.want)
		}
	}
}

// TestAgentProcessTokensAndSIGHUP: a `simtel agent` process serving HTTPS
// with tokens publishes a policy only with a token, `simtel learner status`
// reaches it with --agent-tls-ca and --agent-token-file, and SIGHUP makes it
// read a new token file at once and keep serving.
func TestAgentProcessTokensAndSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an agent process")
	}
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	dir := t.TempDir()
	ca := testutil.NewCA(t)
	cert := ca.Server(t, "agent")
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, gossipAddr := testutil.FreePort(t), testutil.FreePort(t)
	p := testutil.Start(t, dir, "agent", "--brokers", br, "--spool-dir", filepath.Join(dir, "spool"),
		"--listen-http", addr, "--listen-udp", "", "--listen-tcp", "", "--collect-interval", "-1s",
		"--http-tls-cert", cert.CertFile, "--http-tls-key", cert.KeyFile, "--http-token-file", tokens,
		"--policies", "actor", "--policy-dir", filepath.Join(dir, "policy"),
		"--gossip-listen", gossipAddr, "--gossip-fast", "--run", "tok-run")
	testutil.WaitPort(t, addr, p)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS()}, Timeout: 30 * time.Second}
	base := "https://" + addr
	tok := func(s string) map[string]string { return map[string]string{"Authorization": "Token " + s} }
	authCase{name: "policy POST without token", method: "POST", path: "/v1/policy/actor", body: "w1", code: 401}.do(t, cl, base)
	authCase{name: "policy POST with token", method: "POST", path: "/v1/policy/actor", header: tok("first-token"), body: "w1", code: 201}.do(t, cl, base)

	status := func(extra ...string) (string, error) {
		args := append([]string{"learner", "status", "--policy", "actor", "--agent", "https://" + addr, "--agent-tls-ca", ca.CAFile, "--timeout", "5s"}, extra...)
		out, err := exec.Command(testutil.Binary(t), args...).CombinedOutput()
		return string(out), err
	}
	tokenFile := filepath.Join(dir, "client-token")
	if err := os.WriteFile(tokenFile, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "learner status through HTTPS with a token", func() error {
		out, err := status("--agent-token-file", tokenFile)
		if err != nil || !strings.Contains(out, "newest version 1 on 1 nodes") {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	if out, err := status(); err == nil || !strings.Contains(out, "401") {
		t.Errorf("learner status without a token: %v %s, want a 401", err, out)
	}

	// SIGHUP reads the new file at once (the periodic check is 10 s).
	if err := os.WriteFile(tokens, []byte("second-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 3*time.Second, "the token file read on SIGHUP", func() error {
		req, _ := http.NewRequest("POST", base+"/api/v2/write?bucket=b", strings.NewReader("hup v=1"))
		req.Header.Set("Authorization", "Token second-token")
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 204 {
			return fmt.Errorf("the new token gets %d", resp.StatusCode)
		}
		return nil
	})
	authCase{name: "old token after SIGHUP", method: "POST", path: "/write?db=x", header: tok("first-token"), body: "m v=1", code: 401}.do(t, cl, base)
	if p.Exited() {
		t.Fatalf("the agent exited on SIGHUP; log %s", p.Log)
	}
	if err := p.Stop(20 * time.Second); err != nil {
		t.Errorf("agent stop: %v", err)
	}
}
