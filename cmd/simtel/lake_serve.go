package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/simtel/simtel/internal/metricsrv"
	"github.com/simtel/simtel/internal/tick"
	"github.com/simtel/simtel/internal/tlsfiles"
	"github.com/simtel/simtel/lake/pgwire"
)

// lakeServeFlags are lake serve's flags; the PostgreSQL server's start
// with --pg-.
type lakeServeFlags struct {
	pgListen, pgUsers, pgTLSCert, pgTLSKey string
	pgInsecure, pgHashPassword             bool
	pgStatementTimeout, pgReload           time.Duration
	pgMemoryMB, pgThreads, pgMaxConns      int
	pgMaxRows                              int64
	metricsListen                          string
	ice                                    icebergServeFlags
}

const lakeServeLong = `Serve the lake to PostgreSQL clients: psql, Grafana's PostgreSQL data
source, psycopg/pandas, JDBC and ODBC tools connect to --pg-listen as to a
PostgreSQL 16 database (any database name) and query the same tables as
'simtel lake query': one table per measurement, raw_<topic> and
deadletter_<topic>.

Every statement runs on DuckDB over the lake's Parquet objects. Its own
WHERE conditions choose which objects are read through the catalog: with
run = 'r42' only that run's objects are opened, and time conditions (>=, <,
BETWEEN, as Grafana's $__timeFilter(time) writes them) leave out objects
outside the range. The catalog is read again at most once a second, so
runs being written show up as they go.

The server is read-only: only queries run, and they read nothing but the
lake's objects (no read_csv of other files, COPY, ATTACH, INSTALL/LOAD,
PRAGMA or SET of DuckDB settings). Each connection has its own DuckDB
engine with --pg-memory-limit-mb and --pg-threads (by default as many
threads as 'simtel lake query' uses, so one client's query takes as long
as there; concurrent clients share the cores); every statement stops
at --pg-statement-timeout (a client's SET statement_timeout may only
shorten it) or at a cancel request (psql's Ctrl-C), and a result of more
than --pg-max-rows rows is an error.

Authentication: --pg-users names a file of users with SCRAM-SHA-256
verifiers (PostgreSQL's format, one "name:SCRAM-SHA-256$..." a line; make
a line with --pg-hash-password). Without it anyone may connect, which is
allowed only on a loopback address unless --pg-insecure says otherwise.
--pg-tls-cert and --pg-tls-key offer TLS (sslmode=require); the files, and
the users file, are read again when they change and on SIGHUP.

` + lakeServeIcebergLong

func newLakeServeCmd(f *lakeFlags) *cobra.Command {
	var o lakeServeFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the lake to PostgreSQL clients (psql, Grafana, pandas) and as Iceberg tables over the Iceberg REST catalog API",
		Long:  lakeServeLong,
		Example: `  simtel lake serve --lake file:///var/lib/simtel/lake --pg-listen 127.0.0.1:5433
  psql -h 127.0.0.1 -p 5433 -U grafana lake -c '\dt'
  echo -n secret | simtel lake serve --pg-hash-password   # a line for --pg-users: grafana:<output>
  simtel lake serve --pg-listen 0.0.0.0:5433 --pg-users /etc/simtel/pg-users --pg-tls-cert server.pem --pg-tls-key server.key --metrics-listen :9465
  simtel lake serve --listen 127.0.0.1:8181 --iceberg-catalog sqlite:simtel-data/iceberg.db   # Iceberg REST: uri=http://127.0.0.1:8181`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.pgHashPassword {
				return hashPassword(cmd)
			}
			return runLakeServe(cmd, f, &o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.pgListen, "pg-listen", "", "serve the PostgreSQL wire protocol on this host:port, e.g. 127.0.0.1:5433")
	fl.StringVar(&o.pgUsers, "pg-users", "", "file of users allowed to connect, one name:SCRAM-SHA-256$… verifier a line (see --pg-hash-password); empty: no password, on loopback only")
	fl.BoolVar(&o.pgInsecure, "pg-insecure", false, "allow --pg-listen on a non-loopback address without --pg-users (anyone who reaches the port reads the lake)")
	fl.BoolVar(&o.pgHashPassword, "pg-hash-password", false, "read a password on stdin, print its SCRAM-SHA-256 verifier for --pg-users and exit")
	fl.StringVar(&o.pgTLSCert, "pg-tls-cert", "", "PEM certificate (chain) offered to clients asking for TLS; reloaded when it changes and on SIGHUP")
	fl.StringVar(&o.pgTLSKey, "pg-tls-key", "", "PEM private key of --pg-tls-cert")
	fl.DurationVar(&o.pgStatementTimeout, "pg-statement-timeout", 5*time.Minute, "longest a statement may run (0: no limit); clients may set a shorter statement_timeout")
	fl.IntVar(&o.pgMemoryMB, "pg-memory-limit-mb", 1024, "DuckDB memory limit of each connection's engine, MiB (sorts and joins beyond it spill to disk or fail)")
	fl.IntVar(&o.pgThreads, "pg-threads", 0, "DuckDB threads of each connection's engine (0: GOMAXPROCS, the cores 'simtel lake query' uses; concurrent connections share them)")
	fl.Int64Var(&o.pgMaxRows, "pg-max-rows", 1000000, "most rows a statement may return; a larger result is an error (0: no limit)")
	fl.IntVar(&o.pgMaxConns, "pg-max-connections", 64, "most clients connected at once (0: no limit)")
	fl.DurationVar(&o.pgReload, "pg-reload-interval", 10*time.Second, "how often the users and TLS files are checked for changes")
	fl.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this host:port (empty: off)")
	addIcebergServeFlags(fl, &o.ice)
	return cmd
}

func hashPassword(cmd *cobra.Command) error {
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if err != nil && line == "" {
		return errors.New("--pg-hash-password reads the password on stdin, e.g. echo -n secret | simtel lake serve --pg-hash-password")
	}
	v, err := pgwire.HashPassword(strings.TrimRight(line, "\r\n"))
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), v)
	return nil
}

// loopbackOnly reports whether addr listens on loopback addresses only.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runLakeServe(cmd *cobra.Command, f *lakeFlags, o *lakeServeFlags) error {
	if err := o.ice.check(); err != nil {
		return err
	}
	if o.pgListen == "" {
		if o.ice.listen != "" {
			return runIcebergServe(cmd, f, &o.ice, o.metricsListen)
		}
		return errors.New("give --pg-listen host:port, e.g. --pg-listen 127.0.0.1:5433, or --listen host:port for the Iceberg REST catalog")
	}
	if o.pgUsers == "" && !o.pgInsecure && !loopbackOnly(o.pgListen) {
		return fmt.Errorf("--pg-listen %s is not a loopback address: give --pg-users (passwords), or --pg-insecure to let anyone who reaches it read the lake", o.pgListen)
	}
	if (o.pgTLSCert == "") != (o.pgTLSKey == "") {
		return errors.New("--pg-tls-cert and --pg-tls-key go together")
	}
	if o.pgStatementTimeout < 0 || o.pgMemoryMB < 0 || o.pgThreads < 0 || o.pgMaxRows < 0 || o.pgMaxConns < 0 || o.pgReload <= 0 {
		return errors.New("--pg-statement-timeout, --pg-memory-limit-mb, --pg-threads, --pg-max-rows and --pg-max-connections cannot be negative, --pg-reload-interval must be positive")
	}
	ctx := cmd.Context()
	ls, err := f.session(cmd)
	if err != nil {
		return err
	}
	log := ls.log.With("part", "pgwire")
	cfg := pgwire.Config{
		Catalog: ls.cat, Cache: ls.cache,
		StatementTimeout: o.pgStatementTimeout, MemoryLimitMB: o.pgMemoryMB, Threads: o.pgThreads,
		MaxRows: o.pgMaxRows, MaxConnections: o.pgMaxConns, Logger: log, Metrics: pgwire.NewMetrics(),
	}
	var reloads []func() error
	if o.pgUsers != "" {
		if cfg.Users, err = pgwire.LoadUsers(o.pgUsers); err != nil {
			return err
		}
		if cfg.Users.Len() == 0 {
			log.Warn("the users file has no users: every connection will be refused", "file", o.pgUsers)
		}
		reloads = append(reloads, cfg.Users.Reload)
	}
	var tlsSrv *tlsfiles.Server
	if o.pgTLSCert != "" {
		if tlsSrv, err = tlsfiles.NewServer(tlsfiles.Files{Cert: o.pgTLSCert, Key: o.pgTLSKey}, log); err != nil {
			return fmt.Errorf("cannot serve TLS: %w", err)
		}
		cfg.TLS = tlsSrv.Config(tlsfiles.ClientAuthNone)
		reloads = append(reloads, tlsSrv.Reload)
	}
	var ice *icebergServer
	if o.ice.listen != "" {
		if ice, err = newIcebergServer(ctx, f, &o.ice, ls.log.With("part", "iceberg-rest")); err != nil {
			return err
		}
		defer ice.closeUnlessRun()
	}
	if o.metricsListen != "" {
		register := []func(prometheus.Registerer) error{cfg.Metrics.Register}
		if ice != nil {
			register = append(register, ice.metrics.Register)
		}
		stop, err := lakeServeMetrics(o.metricsListen, register...)
		if err != nil {
			return err
		}
		defer stop()
	}
	ln, err := net.Listen("tcp", o.pgListen)
	if err != nil {
		return fmt.Errorf("cannot listen on --pg-listen %s: %w", o.pgListen, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if tlsSrv != nil {
		go tlsSrv.Watch(ctx, o.pgReload)
	}
	if cfg.Users != nil {
		go watchUsers(ctx, o.pgUsers, cfg.Users, o.pgReload, log.Warn)
	}
	stopHangup := reloadOnHangup(ctx, func() error {
		var errs []error
		for _, r := range reloads {
			errs = append(errs, r())
		}
		return errors.Join(errs...)
	}, log)
	defer stopHangup()
	log.Info("serving the lake to PostgreSQL clients", "addr", ln.Addr().String(), "lake", ls.st.String(),
		"auth", map[bool]string{true: "scram-sha-256", false: "none"}[cfg.Users != nil], "tls", tlsSrv != nil)
	if ice == nil {
		return pgwire.New(cfg).Serve(ctx, ln)
	}
	// Either server's end (an error, or ctx) ends the other.
	var g errgroup.Group
	g.Go(func() error { defer cancel(); return ice.run(ctx) })
	g.Go(func() error { defer cancel(); return pgwire.New(cfg).Serve(ctx, ln) })
	return g.Wait()
}

// lakeServeMetrics serves the process's and the servers' metrics on
// http://addr/metrics.
func lakeServeMetrics(addr string, register ...func(prometheus.Registerer) error) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range register {
		if err := r(reg); err != nil {
			return nil, err
		}
	}
	stop, err = metricsrv.Start(addr, reg, slog.Default(), nil)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on --metrics-listen %s: %w", addr, err)
	}
	return stop, nil
}

// watchUsers reads the users file again when its size or modification
// time changes.
func watchUsers(ctx context.Context, path string, u *pgwire.Users, every time.Duration, warn func(string, ...any)) {
	stamp := func() string {
		st, err := os.Stat(path)
		if err != nil {
			return ""
		}
		return fmt.Sprint(st.Size(), st.ModTime().UnixNano())
	}
	last := stamp()
	tick.Every(ctx, every, func() {
		if s := stamp(); s != last {
			last = s
			if err := u.Reload(); err != nil {
				warn("cannot reload the users file; the previous users stay", "err", err)
			}
		}
	})
}
