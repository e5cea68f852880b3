package agent

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPolicyPublishFromAnotherHost: without tokens a policy is published
// from loopback only; reads and writes stay open from anywhere. With
// tokens, the peer's address does not matter, the token does.
func TestPolicyPublishFromAnotherHost(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	noCount := func(string, int) {}
	open, err := newHTTPAuth("", slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	closed, err := newHTTPAuth(tokens, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		auth         *httpAuth
		method, path string
		peer, token  string
		want         int
	}{
		{open, "POST", "/v1/policy/actor", "10.1.2.3:4000", "", 403},
		{open, "PUT", "/v1/policy/actor", "[2001:db8::1]:4000", "", 403},
		{open, "POST", "/v1/policy/actor", "127.0.0.1:4000", "", 204},
		{open, "POST", "/v1/policy/actor", "[::1]:4000", "", 204},
		{open, "GET", "/v1/policy/actor", "10.1.2.3:4000", "", 204},
		{open, "POST", "/write?db=x", "10.1.2.3:4000", "", 204},
		{closed, "POST", "/v1/policy/actor", "10.1.2.3:4000", "secret", 204},
		{closed, "POST", "/v1/policy/actor", "127.0.0.1:4000", "", 401},
		{closed, "POST", "/v1/policy/actor", "127.0.0.1:4000", "secre", 401},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader("x"))
		req.RemoteAddr = c.peer
		if c.token != "" {
			req.Header.Set("Authorization", "Token "+c.token)
		}
		w := httptest.NewRecorder()
		c.auth.wrap(ok, noCount).ServeHTTP(w, req)
		if w.Code != c.want {
			t.Errorf("%s %s from %s with token %q: %d (%s), want %d", c.method, c.path, c.peer, c.token, w.Code, w.Body, c.want)
		}
	}
	if got := testutil.ToFloat64(open.failures.WithLabelValues(authRemote)); got != 2 {
		t.Errorf("remote policy refusals counted %v, want 2", got)
	}
}

func TestCredential(t *testing.T) {
	for _, c := range []struct {
		header, query string
		token         string
		ok, bad       bool
	}{
		{"Token abc", "", "abc", true, false},
		{"token abc", "", "abc", true, false},
		{"Bearer abc", "", "abc", true, false},
		{"Token user:pass", "", "user:pass", true, false},
		{"Basic dTpzZWNyZXQ=", "", "secret", true, false}, // u:secret
		{"Basic !!!", "", "", false, true},
		{"Digest abc", "", "", false, true},
		{"", "u=a&p=secret", "secret", true, false},
		{"", "u=a", "", false, false},
		{"", "", "", false, false},
		{"Token abc", "p=other", "abc", true, false}, // the header wins
	} {
		req := httptest.NewRequest("POST", "/write?"+c.query, nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		tok, ok, err := credential(req)
		if tok != c.token || ok != c.ok || (err != nil) != c.bad {
			t.Errorf("header %q query %q: got %q %v %v, want %q %v bad=%v", c.header, c.query, tok, ok, err, c.token, c.ok, c.bad)
		}
	}
}
