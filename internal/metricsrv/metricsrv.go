// Package metricsrv serves a long-running command's Prometheus metrics
// and health check over HTTP.
package metricsrv

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// shutdownGrace is how long a stopping server lets a scrape in progress
// finish.
const shutdownGrace = 2 * time.Second

// Serve listens on addr and serves /metrics from reg and /healthz, plus
// whatever extra adds to the mux (nil for nothing), until ctx ends. It
// returns once it listens, or the error that kept it from listening;
// wait returns once the server has shut down. A server that stops on its
// own logs why.
func Serve(ctx context.Context, addr string, reg prometheus.Gatherer, log *slog.Logger, extra func(*http.ServeMux)) (wait func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if extra != nil {
		extra(mux)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", addr, "err", err)
		}
	}()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-served:
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
	}()
	return func() { <-stopped }, nil
}

// Start is Serve until stop is called, for a command whose server lives
// as long as a function call rather than a context.
func Start(addr string, reg prometheus.Gatherer, log *slog.Logger, extra func(*http.ServeMux)) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := Serve(ctx, addr, reg, log, extra)
	if err != nil {
		cancel()
		return nil, err
	}
	return func() { cancel(); wait() }, nil
}

// Pprof adds the runtime profiles under /debug/pprof/ (go tool pprof
// http://ADDR/debug/pprof/profile?seconds=10), for finding hot paths
// under real load.
func Pprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
}
