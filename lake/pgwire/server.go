// Package pgwire serves the lake over the PostgreSQL v3 wire protocol, so
// psql, Grafana's PostgreSQL data source, psycopg, pandas and JDBC clients
// query runs with nothing to install.
//
// Every query runs on DuckDB over the lake (lake/query) after the catalog's
// pruning: a statement's own WHERE conditions on run and time (run = 'r42',
// Grafana's time BETWEEN '…' AND '…') choose the objects it reads, so a
// query of one run opens only that run's objects. Each connection keeps the
// engine of its last statement while the next one reads the same objects.
// Engines are locked down before a client's statement runs: they read only
// their own objects (DuckDB's allowed_paths with enable_external_access
// off), load no extensions, and their configuration is locked; only SELECT
// statements run. Catalog queries (pg_catalog, information_schema) run on
// a schema database in which the lake's tables are empty tables.
//
// The protocol is served with pgproto3 (github.com/jackc/pgx/v5): the
// server needs the messages themselves — per-column binary formats,
// cancel requests matched to the running statement, SCRAM exchanges — and
// pgx is also the Go client its tests use.
package pgwire

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
)

// serverVersion is the PostgreSQL version the server reports: clients
// pick their SQL by it, and 16 has every catalog column they look for.
const serverVersion = serverVersionNumber + " (simtel lake, DuckDB)"

const serverVersionNumber = "16.0"

// Config is a server's lake, limits and security.
type Config struct {
	Catalog *catalog.Catalog
	Cache   query.Fetcher
	// Users are the accounts that may connect; nil lets anyone in without a
	// password (the command allows that on loopback only).
	Users *Users
	// TLS, when set, is offered to clients that ask (sslmode=require...).
	TLS *tls.Config
	// StatementTimeout caps every statement; a client's statement_timeout
	// may only shorten it. Zero: no cap.
	StatementTimeout time.Duration
	// MemoryLimitMB and Threads are DuckDB's limits per connection's
	// engine. Threads 0 is GOMAXPROCS, the cores `simtel lake query` uses:
	// one client's query runs as fast as there, and concurrent
	// connections' queries share the cores.
	MemoryLimitMB int
	Threads       int
	// MaxRows is how many rows a statement may return; more is an error.
	MaxRows int64
	// MaxConnections refuses connections beyond it (0: no limit).
	MaxConnections int
	// CatalogTTL is how long a loaded catalog serves queries before it is
	// read again.
	CatalogTTL time.Duration
	Logger     *slog.Logger
	Metrics    *Metrics
}

// Server accepts PostgreSQL connections.
type Server struct {
	cfg  Config
	lake *lakeSource

	mu    sync.Mutex
	conns map[uint32]*conn
	next  uint32
	wg    sync.WaitGroup
}

// New makes a server; Serve runs it.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Threads <= 0 {
		cfg.Threads = runtime.GOMAXPROCS(0)
	}
	if cfg.CatalogTTL <= 0 {
		cfg.CatalogTTL = time.Second
	}
	s := &Server{cfg: cfg, conns: map[uint32]*conn{}}
	s.lake = &lakeSource{cfg: &s.cfg}
	return s
}

// Serve accepts connections on ln until ctx ends, then closes them and
// returns once they are gone.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	defer s.closeAll()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(ctx, nc)
		}()
	}
}

// closeAll closes the connections, waits for them and releases the shared
// schema database.
func (s *Server) closeAll() {
	s.mu.Lock()
	for _, c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.lake.mu.Lock()
	if s.lake.schema != nil {
		s.lake.schema.Close()
		s.lake.schema = nil
	}
	s.lake.mu.Unlock()
}

func (s *Server) register(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.MaxConnections > 0 && len(s.conns) >= s.cfg.MaxConnections {
		return false
	}
	for {
		s.next++
		if _, ok := s.conns[s.next]; !ok && s.next != 0 {
			break
		}
	}
	c.pid = s.next
	s.conns[c.pid] = c
	return true
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	delete(s.conns, c.pid)
	s.mu.Unlock()
}

// cancel handles a CancelRequest: the statement running on the connection
// with that process ID and secret is interrupted.
func (s *Server) cancel(req *pgproto3.CancelRequest) {
	s.mu.Lock()
	c := s.conns[req.ProcessID]
	s.mu.Unlock()
	if c == nil || subtle.ConstantTimeCompare(c.secret, req.SecretKey) != 1 {
		s.cfg.Logger.Debug("cancel request for no connection", "pid", req.ProcessID)
		return
	}
	s.cfg.Metrics.cancels.Inc()
	c.cancelRunning()
}

// handshakeTimeout bounds the startup and authentication of a connection.
const handshakeTimeout = 30 * time.Second

func (s *Server) handle(ctx context.Context, nc net.Conn) {
	defer nc.Close()
	log := s.cfg.Logger.With("remote", nc.RemoteAddr().String())
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	be := pgproto3.NewBackend(nc, nc)
	var startup *pgproto3.StartupMessage
	tlsDone := false
	for startup == nil {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			log.Debug("bad startup packet", "err", err)
			s.cfg.Metrics.errors.WithLabelValues("08P01").Inc()
			be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "08P01", Message: "invalid startup packet: " + err.Error()})
			be.Flush()
			return
		}
		switch m := msg.(type) {
		case *pgproto3.CancelRequest:
			s.cancel(m)
			return
		case *pgproto3.SSLRequest:
			if s.cfg.TLS == nil || tlsDone {
				nc.Write([]byte{'N'})
				continue
			}
			nc.Write([]byte{'S'})
			tc := tls.Server(nc, s.cfg.TLS)
			if err := tc.HandshakeContext(ctx); err != nil {
				log.Debug("TLS handshake failed", "err", err)
				return
			}
			nc, tlsDone = tc, true
			defer tc.Close()
			be = pgproto3.NewBackend(nc, nc)
		case *pgproto3.GSSEncRequest:
			nc.Write([]byte{'N'})
		case *pgproto3.StartupMessage:
			startup = m
		default:
			return
		}
	}
	c := &conn{srv: s, nc: nc, be: be, log: log, tls: tlsDone}
	c.user = startup.Parameters["user"]
	db := startup.Parameters["database"]
	if db == "" {
		db = c.user
	}
	c.params = defaultParams(c.user, db, startup.Parameters["application_name"])
	if !s.register(c) {
		c.fatal("53300", "sorry, too many clients already")
		return
	}
	defer s.unregister(c)
	if err := c.authenticate(); err != nil {
		s.cfg.Metrics.authFailures.Inc()
		log.Info("PostgreSQL client refused", "user", c.user, "err", err)
		c.fatal("28P01", err.Error())
		return
	}
	nc.SetDeadline(time.Time{})
	c.secret = make([]byte, 4)
	rand.Read(c.secret)
	be.Send(&pgproto3.AuthenticationOk{})
	for _, p := range reportedParams {
		be.Send(&pgproto3.ParameterStatus{Name: displayName(p), Value: c.params[p]})
	}
	be.Send(&pgproto3.BackendKeyData{ProcessID: c.pid, SecretKey: c.secret})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := be.Flush(); err != nil {
		return
	}
	s.cfg.Metrics.connections.Inc()
	s.cfg.Metrics.connectionsTotal.Inc()
	defer func() {
		s.cfg.Metrics.connections.Dec()
		c.shutdown()
	}()
	log.Debug("PostgreSQL client connected", "user", c.user, "database", db, "tls", tlsDone)
	c.serve(ctx)
}

// authenticate runs the password exchange, if the server has users.
func (c *conn) authenticate() error {
	users := c.srv.cfg.Users
	if users == nil {
		return nil
	}
	if c.user == "" {
		return errors.New("no user name given")
	}
	return c.scram(users)
}

// fatal sends a FATAL error; the connection then closes.
func (c *conn) fatal(code, msg string) {
	c.be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg})
	c.be.Flush()
}

// errorf is an error with an SQLSTATE.
type pgError struct {
	code string
	msg  string
}

func (e *pgError) Error() string { return e.msg }

func errorf(code, format string, args ...any) error {
	return &pgError{code: code, msg: fmt.Sprintf(format, args...)}
}
