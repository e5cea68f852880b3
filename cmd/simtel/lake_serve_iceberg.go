package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/simtel/simtel/internal/tick"
	"github.com/simtel/simtel/internal/tlsfiles"
	"github.com/simtel/simtel/internal/tokenfile"
	lakeiceberg "github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/iceberg/rest"
	"github.com/simtel/simtel/lake/store"
)

// icebergServeFlags are lake serve's flags of the Iceberg REST catalog.
type icebergServeFlags struct {
	listen, catalog, prefix    string
	tokenFile, tlsCert, tlsKey string
	insecure                   bool
}

const lakeServeIcebergLong = `With --listen and --iceberg-catalog (the catalog 'simtel sink' commits
to: sqlite:PATH or postgres://...) it also serves the lake's Iceberg tables
over the Apache Iceberg REST catalog API, so Spark, Trino, PyIceberg and
DuckDB attach one http(s) endpoint: namespaces and tables listed, a table
loaded (its metadata-location, metadata and, for an S3 lake, the
s3.endpoint, s3.region and s3.path-style-access to read its files with;
credentials stay the client's). The catalog is read-only: the sink is the
only writer of the tables, so creates, commits, renames and drops are
answered 405. --token-file requires Authorization: Bearer <token> (one
token a line, as the agent's --http-token-file; without it anyone may read
the catalog, allowed on a loopback address only unless --insecure);
--tls-cert and --tls-key serve HTTPS. Both files are read again when they
change and on SIGHUP. Client settings (PyIceberg, Spark, Trino, DuckDB):
docs/lake-iceberg.md.`

// icebergReloadEvery is how often the token and TLS files are checked.
const icebergReloadEvery = 10 * time.Second

func addIcebergServeFlags(fl *pflag.FlagSet, o *icebergServeFlags) {
	fl.StringVar(&o.listen, "listen", "", "serve the Iceberg REST catalog API on this host:port, e.g. 127.0.0.1:8181 (needs --iceberg-catalog)")
	fl.StringVar(&o.catalog, "iceberg-catalog", "", "the Iceberg catalog the sink commits to: sqlite:PATH or postgres://user:pass@host/db (read only)")
	fl.StringVar(&o.prefix, "iceberg-prefix", "", "serve the catalog under /v1/<prefix>/ (announced by /v1/config); empty: /v1/")
	fl.StringVar(&o.tokenFile, "token-file", "", "bearer tokens --listen requires, one a line (# comments); reloaded when it changes and on SIGHUP; empty: no authentication, loopback only")
	fl.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate (chain) --listen serves HTTPS with; reloaded when it changes and on SIGHUP")
	fl.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fl.BoolVar(&o.insecure, "insecure", false, "allow --listen on a non-loopback address without --token-file (anyone who reaches it reads the catalog)")
}

// check reports flags that cannot go together.
func (o *icebergServeFlags) check() error {
	switch {
	case o.listen == "" && (o.catalog != "" || o.tokenFile != "" || o.tlsCert != "" || o.prefix != ""):
		return errors.New("--iceberg-catalog, --iceberg-prefix, --token-file and --tls-cert serve the Iceberg REST catalog: give --listen host:port too")
	case o.listen != "" && o.catalog == "":
		return errors.New("--listen serves the Iceberg REST catalog: give --iceberg-catalog, the catalog the sink commits to (sqlite:PATH or postgres://...)")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case o.listen != "" && o.tokenFile == "" && !o.insecure && !loopbackOnly(o.listen):
		return fmt.Errorf("--listen %s is not a loopback address: give --token-file (bearer tokens), or --insecure to let anyone who reaches it read the Iceberg catalog", o.listen)
	}
	if err := rest.CheckPrefix(o.prefix); err != nil {
		return fmt.Errorf("--iceberg-prefix: %w", err)
	}
	return nil
}

// icebergServer is lake serve's Iceberg REST catalog, listening.
type icebergServer struct {
	srv     *rest.Server
	ln      net.Listener
	lake    *lakeiceberg.Lake
	metrics *rest.Metrics
	tokens  *tokenfile.File
	tls     *tlsfiles.Server
	log     *slog.Logger
	addr    string
	ran     atomic.Bool
}

// closeUnlessRun closes the listener and the catalog of a server whose
// run never started (lake serve failed before serving).
func (s *icebergServer) closeUnlessRun() {
	if !s.ran.Load() {
		s.ln.Close()
		s.lake.Close()
	}
}

// newIcebergServer opens the catalog read-only and listens on --listen.
func newIcebergServer(ctx context.Context, f *lakeFlags, o *icebergServeFlags, log *slog.Logger) (*icebergServer, error) {
	st, err := store.Open(ctx, f.lake, store.Options{S3Endpoint: f.s3Endpoint, Region: f.s3Region})
	if err != nil {
		return nil, err
	}
	s := &icebergServer{metrics: rest.NewMetrics(), log: log}
	cfg := rest.Config{Prefix: o.prefix, Metrics: s.metrics, Logger: log, TableConfig: icebergTableConfig(f)}
	if o.tokenFile != "" {
		if s.tokens, err = tokenfile.Open(o.tokenFile, "token file"); err != nil {
			return nil, err
		}
		cfg.Tokens = s.tokens
	}
	if o.tlsCert != "" {
		if s.tls, err = tlsfiles.NewServer(tlsfiles.Files{Cert: o.tlsCert, Key: o.tlsKey}, log); err != nil {
			return nil, fmt.Errorf("cannot serve TLS: %w", err)
		}
		cfg.TLS = s.tls.Config(tlsfiles.ClientAuthNone)
	}
	s.lake, err = lakeiceberg.Open(ctx, lakeiceberg.Options{Catalog: o.catalog, Store: st, S3Endpoint: f.s3Endpoint, Region: f.s3Region, Logger: log, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	cfg.Catalog = s.lake.Catalog()
	if s.srv, err = rest.New(cfg); err != nil {
		s.lake.Close()
		return nil, err
	}
	if s.ln, err = net.Listen("tcp", o.listen); err != nil {
		s.lake.Close()
		return nil, fmt.Errorf("cannot listen on --listen %s: %w", o.listen, err)
	}
	s.addr = "http://" + s.ln.Addr().String()
	if s.tls != nil {
		s.addr = "https://" + s.ln.Addr().String()
	}
	return s, nil
}

// icebergTableConfig is what a loaded table tells clients about the
// lake's S3 service; a local lake needs nothing.
func icebergTableConfig(f *lakeFlags) iceberg.Properties {
	if !strings.HasPrefix(f.lake, "s3://") {
		return nil
	}
	region := f.s3Region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" {
		region = "us-east-1"
	}
	p := iceberg.Properties{"s3.region": region, "client.region": region}
	if f.s3Endpoint != "" {
		// simtel addresses every S3-compatible service path-style.
		p["s3.endpoint"] = f.s3Endpoint
		p["s3.path-style-access"] = "true"
	}
	return p
}

// run serves until ctx ends, reloading the token and TLS files when they
// change and on SIGHUP, then closes the catalog.
func (s *icebergServer) run(ctx context.Context) error {
	s.ran.Store(true)
	defer s.lake.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var g errgroup.Group
	if s.tls != nil {
		g.Go(func() error { s.tls.Watch(ctx, icebergReloadEvery); return nil })
	}
	if s.tokens != nil {
		g.Go(func() error {
			tick.Every(ctx, icebergReloadEvery, func() {
				if _, err := s.tokens.ReloadIfChanged(); err != nil {
					s.log.Warn("cannot reload the token file; the previous tokens stay", "err", err)
				}
			})
			return nil
		})
	}
	stopHangup := reloadOnHangup(ctx, func() error {
		var errs []error
		if s.tokens != nil {
			errs = append(errs, s.tokens.Reload())
		}
		if s.tls != nil {
			errs = append(errs, s.tls.Reload())
		}
		return errors.Join(errs...)
	}, s.log)
	defer stopHangup()
	s.log.Info("serving the lake's Iceberg tables over the Iceberg REST catalog API", "uri", s.addr,
		"auth", map[bool]string{true: "bearer", false: "none"}[s.tokens != nil])
	err := s.srv.Serve(ctx, s.ln)
	cancel()
	g.Wait()
	return err
}

// runIcebergServe is lake serve with --listen and no --pg-listen.
func runIcebergServe(cmd *cobra.Command, f *lakeFlags, o *icebergServeFlags, metricsListen string) error {
	log, err := f.g.logger()
	if err != nil {
		return err
	}
	s, err := newIcebergServer(cmd.Context(), f, o, log.With("part", "iceberg-rest"))
	if err != nil {
		return err
	}
	if metricsListen != "" {
		stop, err := lakeServeMetrics(metricsListen, s.metrics.Register)
		if err != nil {
			s.ln.Close()
			s.lake.Close()
			return err
		}
		defer stop()
	}
	return s.run(cmd.Context())
}
