package agent

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/simtel/simtel/internal/tokenfile"
)

// The HTTP listener's tokens (--http-token-file). With tokens, every
// request but health checks and /metrics must carry one, in any of the
// forms InfluxDB's clients send:
//
//	Authorization: Token <t>       InfluxDB 2.x, Telegraf's outputs.influxdb_v2
//	Authorization: Bearer <t>      OAuth-style clients
//	Authorization: Basic <u:t>     InfluxDB 1.x clients, Slurm's profiler (curl's user and password)
//	?u=<user>&p=<t>                InfluxDB 1.x query parameters
//
// The user name of the 1.x forms is not checked: the password is the token.
// Refusals are answered as InfluxDB answers them: 401, a WWW-Authenticate
// challenge and its JSON error body.
//
// Without tokens the listener is open, as before, except that a policy is
// only published from the node itself: a POST to /v1/policy/ from another
// host gets 403. Every worker of a run loads what is published, so a
// listener bound beyond loopback must not let any host publish.

// openPaths answer without a token: a load balancer, systemd or Prometheus
// checking the agent has no token, and these reveal nothing about samples.
var openPaths = map[string]bool{"/ping": true, "/health": true, "/healthz": true, "/readyz": true, "/metrics": true}

// The reasons of simtel_agent_http_auth_failures_total.
const (
	authMissing   = "missing"       // no credentials at all
	authMalformed = "malformed"     // an Authorization header that cannot be read
	authWrong     = "wrong"         // credentials that match no token
	authRemote    = "remote_policy" // a policy POST from another host without tokens configured
)

// httpAuth checks requests against the tokens of a file, read again when
// the file changes.
type httpAuth struct {
	file     string
	log      *slog.Logger
	failures *prometheus.CounterVec
	// tokens holds the SHA-256 of each token; nil: no token file.
	tokens atomic.Pointer[tokenfile.Set]

	mu    sync.Mutex
	stamp string // the file's size and mtime at the last read

	lastLog    atomic.Int64 // unix nanoseconds of the last failure logged
	suppressed atomic.Int64 // failures not logged since
}

func newHTTPAuth(file string, log *slog.Logger, reg prometheus.Registerer) (*httpAuth, error) {
	h := &httpAuth{file: file, log: log}
	h.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "simtel_agent_http_auth_failures_total",
		Help: "HTTP requests refused for their credentials, by reason (missing, malformed, wrong, remote_policy: a policy POST from another host while no tokens are configured).",
	}, []string{"reason"})
	for _, r := range []string{authMissing, authMalformed, authWrong, authRemote} {
		h.failures.WithLabelValues(r)
	}
	reg.MustRegister(h.failures)
	if file != "" {
		h.stamp = tokenfile.Stamp(file)
		if err := h.load(); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (h *httpAuth) load() error {
	toks, err := tokenfile.Read(h.file, "HTTP token file")
	if err != nil {
		return err
	}
	h.tokens.Store(&toks)
	return nil
}

// reload reads the token file again if it changed since the last read
// (always when force). On an error the previous tokens stay in use.
func (h *httpAuth) reload(force bool) (changed bool, err error) {
	if h.file == "" {
		return false, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	stamp := tokenfile.Stamp(h.file)
	if stamp == h.stamp && !force {
		return false, nil
	}
	h.stamp = stamp
	return true, h.load()
}

// known reports whether t is one of the tokens (in constant time).
func (h *httpAuth) known(t string) bool {
	toks := h.tokens.Load()
	return toks != nil && toks.Has(t)
}

// errBadAuthHeader is an Authorization header of no known scheme or
// encoding.
var errBadAuthHeader = errors.New("unable to parse authentication credentials")

// credential finds the token a request carries; ok is false when it
// carries none.
func credential(r *http.Request) (token string, ok bool, err error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, rest, _ := strings.Cut(h, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToLower(scheme) {
		case "token", "bearer":
			return rest, true, nil
		case "basic":
			_, p, ok := r.BasicAuth()
			if !ok {
				return "", false, errBadAuthHeader
			}
			return p, true, nil
		}
		return "", false, errBadAuthHeader
	}
	q := r.URL.Query()
	if q.Has("p") {
		return q.Get("p"), true, nil
	}
	return "", false, nil
}

// wrap refuses requests without a valid token before next sees them.
// countWrite counts the refusals of the write paths with the other
// answers of those paths.
func (h *httpAuth) wrap(next http.Handler, countWrite func(path string, code int)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		if h.tokens.Load() == nil {
			if isPolicyPublish(r) && !fromLoopback(r) {
				h.fail(r, authRemote)
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "a policy is published from another host only when the agent requires tokens (--http-token-file)"})
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		t, ok, err := credential(r)
		reason := ""
		switch {
		case err != nil:
			reason = authMalformed
		case !ok:
			reason = authMissing
		case !h.known(t):
			reason = authWrong
		}
		if reason == "" {
			next.ServeHTTP(w, r)
			return
		}
		h.fail(r, reason)
		w.Header().Set("WWW-Authenticate", `Basic realm="InfluxDB"`)
		switch r.URL.Path {
		case "/api/v2/write":
			writeError(w, true, http.StatusUnauthorized, "unauthorized", "unauthorized access")
		default:
			msg := "authorization failed"
			if reason != authWrong {
				msg = errBadAuthHeader.Error()
			}
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": msg})
		}
		if r.URL.Path == "/write" || r.URL.Path == "/api/v2/write" {
			countWrite(r.URL.Path, http.StatusUnauthorized)
		}
	})
}

func isPolicyPublish(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/v1/policy/") && r.Method != http.MethodGet && r.Method != http.MethodHead
}

func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authLogEvery bounds the failure log to a line per interval, so a client
// retrying a wrong token in a loop cannot fill the node's disk.
const authLogEvery = time.Second

// fail counts a refusal and logs it with the peer.
func (h *httpAuth) fail(r *http.Request, reason string) {
	h.failures.WithLabelValues(reason).Inc()
	now := time.Now().UnixNano()
	last := h.lastLog.Load()
	if now-last < int64(authLogEvery) || !h.lastLog.CompareAndSwap(last, now) {
		h.suppressed.Add(1)
		return
	}
	h.log.Warn("http request refused", "peer", r.RemoteAddr, "path", r.URL.Path, "reason", reason,
		"refusals_not_logged", h.suppressed.Swap(0))
}
