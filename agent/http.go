package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/internal/tick"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// The agent speaks enough of InfluxDB's HTTP API for unchanged clients:
// Telegraf's outputs.influxdb (v1: /ping, /query for CREATE DATABASE,
// /write) and outputs.influxdb_v2 (/api/v2/write), the influx client
// libraries and curl. Status codes and error bodies follow InfluxDB:
// 204 when every line was stored, 400 naming the first bad line (the good
// lines of the body are kept), for a field type conflict 400 (/write) or 422
// (/api/v2/write), 413 for a body over the limit, 503 when the spool cannot
// take the samples in time.

const influxVersion = "1.8.10"

// spoolWait bounds how long an HTTP write waits for spool space (block
// policy) before answering 503 so the client retries later.
const spoolWait = 30 * time.Second

func (a *Agent) httpHandler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) { a.handleWrite(ctx, w, r, false) })
	mux.HandleFunc("/api/v2/write", func(w http.ResponseWriter, r *http.Request) { a.handleWrite(ctx, w, r, true) })
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Influxdb-Version", influxVersion)
		if r.URL.Query().Get("verbose") == "true" {
			writeJSON(w, http.StatusOK, map[string]string{"version": influxVersion})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"name": "simtel-agent", "message": "ready for writes", "status": "pass", "version": influxVersion})
	})
	// Telegraf's v1 output creates its database at start; there is no
	// database here, so any CREATE DATABASE succeeds and other queries
	// are refused with a clear message.
	mux.HandleFunc("/query", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Influxdb-Version", influxVersion)
		q := strings.ToUpper(strings.TrimSpace(r.FormValue("q")))
		if strings.HasPrefix(q, "CREATE DATABASE") {
			writeJSON(w, http.StatusOK, map[string]any{"results": []map[string]int{{"statement_id": 0}}})
			return
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the simtel agent only accepts writes; query the lake with `simtel lake query`"})
	})
	mux.HandleFunc("/v1/policy/", a.handlePolicy)
	mux.HandleFunc("/v1/rollout/", a.handleRollout)
	// The page is a few kilobytes. Compressing it (Prometheus asks for
	// gzip) would cost the agent more CPU a scrape than the few kilobytes
	// of a compute node's network are worth: it is sent as it is.
	mux.Handle("/metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{DisableCompression: true}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	// An execution trace shows every goroutine wake-up: what the agent's
	// fixed cost per second at low rates is made of.
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ready\n")) })
	return a.httpAuth.wrap(mux, func(path string, code int) {
		a.metrics.httpRequests.WithLabelValues(path, fmt.Sprint(code)).Inc()
	})
}

// setupHTTP reads the HTTP listener's token file and TLS files, so that a
// mistake in them stops the agent at start.
func (a *Agent) setupHTTP() error {
	var err error
	if a.httpAuth, err = newHTTPAuth(a.cfg.HTTPTokenFile, a.log.With("part", "http"), a.metrics.reg); err != nil {
		return err
	}
	if a.cfg.HTTPTLSCert != "" {
		files := tlsfiles.Files{Cert: a.cfg.HTTPTLSCert, Key: a.cfg.HTTPTLSKey}
		if a.httpTLS, err = tlsfiles.NewServer(files, a.log.With("part", "http")); err != nil {
			return fmt.Errorf("cannot serve HTTPS: %w", err)
		}
	}
	return nil
}

// serveHTTP serves the HTTP listener (over TLS when configured) and
// watches its token and TLS files, in goroutines started by start.
func (a *Agent) serveHTTP(ctx context.Context, start func(func(context.Context))) {
	ln := a.httpLn
	if a.httpTLS != nil {
		ln = tls.NewListener(ln, a.httpTLS.Config(tlsfiles.ClientAuthNone))
		start(func(ctx context.Context) { a.httpTLS.Watch(ctx, a.cfg.HTTPReloadInterval) })
	}
	if a.cfg.HTTPTokenFile != "" {
		start(a.watchTokens)
	} else if ta, ok := a.httpLn.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		a.log.Warn("the HTTP listener takes writes from other hosts without a token; policies are published from this node only (see --http-token-file)", "addr", ta.String())
	}
	a.httpSrv = &http.Server{
		Handler:           a.httpHandler(ctx),
		ReadHeaderTimeout: 10 * time.Second,
		// TLS handshake errors (a scanner, a client that does not trust
		// the certificate) are the server's to log; they name the peer.
		ErrorLog: slog.NewLogLogger(a.log.With("part", "http").Handler(), slog.LevelInfo),
	}
	start(func(context.Context) {
		if err := a.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("http listener stopped", "err", err)
		}
	})
}

// watchTokens reads the token file again whenever it changes, until ctx
// ends. A file that cannot be read or holds no token leaves the previous
// tokens in use.
func (a *Agent) watchTokens(ctx context.Context) {
	tick.Every(ctx, a.cfg.HTTPReloadInterval, func() {
		switch changed, err := a.httpAuth.reload(false); {
		case err != nil:
			a.log.Warn("cannot reload the HTTP token file; the previous tokens stay in use", "err", err)
		case changed:
			a.log.Info("HTTP token file reloaded", "file", a.cfg.HTTPTokenFile)
		}
	})
}

// Reload reads the HTTP listener's token and TLS files again (SIGHUP).
// On an error the previous ones stay in use.
func (a *Agent) Reload() error {
	var errs []error
	if _, err := a.httpAuth.reload(true); err != nil {
		errs = append(errs, err)
	}
	if a.httpTLS != nil {
		errs = append(errs, a.httpTLS.Reload())
	}
	return errors.Join(errs...)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers in the shape of the API version the client used:
// v1 {"error": "..."}, v2 {"code": "...", "message": "..."}.
func writeError(w http.ResponseWriter, v2 bool, code int, v2code, msg string) {
	w.Header().Set("X-Influxdb-Error", msg)
	if v2 {
		writeJSON(w, code, map[string]string{"code": v2code, "message": msg})
		return
	}
	writeJSON(w, code, map[string]string{"error": msg})
}

func (a *Agent) handleWrite(ctx context.Context, w http.ResponseWriter, r *http.Request, v2 bool) {
	path := "/write"
	if v2 {
		path = "/api/v2/write"
	}
	code := a.serveWrite(ctx, w, r, v2)
	a.metrics.httpRequests.WithLabelValues(path, fmt.Sprint(code)).Inc()
}

func (a *Agent) serveWrite(ctx context.Context, w http.ResponseWriter, r *http.Request, v2 bool) int {
	w.Header().Set("X-Influxdb-Version", influxVersion)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, v2, http.StatusMethodNotAllowed, "method not allowed", "use POST")
		return http.StatusMethodNotAllowed
	}
	q := r.URL.Query()
	if v2 {
		if q.Get("bucket") == "" {
			writeError(w, v2, http.StatusBadRequest, "invalid", "bucket is required (any name: the agent writes to its Kafka topic)")
			return http.StatusBadRequest
		}
	} else if q.Get("db") == "" {
		writeError(w, v2, http.StatusBadRequest, "invalid", "database is required")
		return http.StatusBadRequest
	}
	prec, err := lineproto.ParsePrecision(q.Get("precision"))
	if err != nil {
		writeError(w, v2, http.StatusBadRequest, "invalid", err.Error())
		return http.StatusBadRequest
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			writeError(w, v2, http.StatusBadRequest, "invalid", "body is not valid gzip: "+err.Error())
			return http.StatusBadRequest
		}
		defer zr.Close()
		// Bound the decompressed size too: a small gzip bomb must not
		// make the agent allocate gigabytes.
		body = io.LimitReader(zr, a.cfg.MaxBodyBytes+1)
	}
	buf := a.bodyBuffer(r.ContentLength)
	defer a.putBodyBuffer(buf)
	_, err = buf.ReadFrom(body)
	data := buf.Bytes()
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || int64(len(data)) > a.cfg.MaxBodyBytes {
		msg := fmt.Sprintf("request body is larger than the limit of %d bytes: send smaller batches", a.cfg.MaxBodyBytes)
		writeError(w, v2, http.StatusRequestEntityTooLarge, "request too large", msg)
		return http.StatusRequestEntityTooLarge
	}
	if err != nil {
		writeError(w, v2, http.StatusBadRequest, "invalid", "cannot read body: "+err.Error())
		return http.StatusBadRequest
	}
	wctx, cancel := context.WithTimeout(ctx, spoolWait)
	defer cancel()
	n, ref, err := a.ingest(wctx, "http", data, prec)
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeError(w, v2, http.StatusServiceUnavailable, "unavailable", "cannot store the samples now ("+err.Error()+"); retry later")
		return http.StatusServiceUnavailable
	}
	if ref.count() > 0 {
		code, v2code, msg := refusedAnswer(v2, n, ref)
		writeError(w, v2, code, v2code, msg)
		return code
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// refusedAnswer words the answer to a body some lines of which were refused
// (the others are stored), as InfluxDB words it: malformed lines get 400;
// field type conflicts get 400 on /write (1.x) and 422 "unprocessable
// entity" on /api/v2/write (2.x), with InfluxDB's text, which clients look
// for ("partial write: field type conflict: input field ..."). A body with
// both gets 400, which names the first malformed line and then the first
// conflict: a malformed body is the sender's error whatever the types.
// dropped counts every refused line.
func refusedAnswer(v2 bool, written int, r refusals) (code int, v2code, msg string) {
	var reason string
	switch {
	case r.firstBad != nil && r.firstConflict != nil:
		reason = r.firstBad.Error() + "; " + r.firstConflict.Error()
	case r.firstBad != nil:
		reason = r.firstBad.Error()
	default:
		reason = r.firstConflict.Error()
	}
	switch {
	case !v2:
		return http.StatusBadRequest, "invalid", fmt.Sprintf("partial write: %s dropped=%d", reason, r.count())
	case r.bad == 0:
		return http.StatusUnprocessableEntity, "unprocessable entity",
			fmt.Sprintf("failure writing points to database: partial write: %s dropped=%d", reason, r.count())
	default:
		return http.StatusBadRequest, "invalid", fmt.Sprintf("partial write error (%d written): %s", written, reason)
	}
}

// bodyBuffer returns a pooled buffer with room for a body of the announced
// length (bounded by MaxBodyBytes), so reading a body does not grow a slice
// by doubling for every request.
func (a *Agent) bodyBuffer(contentLength int64) *bytes.Buffer {
	buf, _ := a.bodies.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	if contentLength > 0 {
		buf.Grow(int(min(contentLength, a.cfg.MaxBodyBytes) + bytes.MinRead))
	}
	return buf
}

func (a *Agent) putBodyBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 8<<20 {
		a.bodies.Put(buf)
	}
}
