package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/simtel/simtel/agent/collector"
	"github.com/simtel/simtel/agent/producer"
	"github.com/simtel/simtel/agent/spool"
	"github.com/simtel/simtel/agent/tune"
	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// Agent is a running node agent. New opens the spool and binds every
// listener (so addresses are known before Run); Run serves until its
// context ends, then drains the spool to the broker for up to
// ShutdownTimeout and closes everything.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	spool   *spool.Spool
	metrics *metrics

	procs       *tune.Procs // nil: GOMAXPROCS left alone
	normalizers sync.Pool   // *ingestBatch
	bodies      sync.Pool   // *bytes.Buffer for HTTP bodies
	types       *fieldTypes // nil: field types not checked
	refusalLog  refusalLog

	udp, statsd packetSource
	tcp, unix   net.Listener
	httpLn      net.Listener
	httpSrv     *http.Server
	httpAuth    *httpAuth
	httpTLS     *tlsfiles.Server // nil: plain HTTP

	policies *policyState
}

// New validates cfg, opens the spool and binds the listeners.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger}
	if cfg.FieldTypesMemory > 0 {
		a.types = newFieldTypes(cfg.FieldTypesMemory)
	}
	a.metrics = newMetrics(a)
	if err := a.setupHTTP(); err != nil {
		return nil, err
	}
	if _, err := lineproto.NewNormalizer(cfg.Tags); err != nil {
		return nil, fmt.Errorf("cannot use the agent's tags: %w", err)
	}
	runFrom, _ := newRunFromTag(cfg.RunFromTag) // checked by Validate
	a.normalizers.New = func() any {
		n, _ := lineproto.NewNormalizer(cfg.Tags, lineproto.WithMaxLineBytes(cfg.MaxLineBytes))
		return &ingestBatch{norm: n, types: a.types, runFrom: runFrom}
	}
	sp, err := spool.Open(spool.Config{
		Dir:          cfg.SpoolDir,
		MaxBytes:     cfg.SpoolMaxBytes,
		Policy:       cfg.spoolPolicy(),
		SyncInterval: cfg.SpoolSync,
		// After a crash the spool resends what was acknowledged since its
		// last cursor checkpoint; checkpointing often keeps those
		// duplicates few, at the cost of a tiny write.
		CheckpointInterval: 200 * time.Millisecond,
		Logger:             a.log.With("part", "spool"),
	})
	if err != nil {
		return nil, fmt.Errorf("cannot open spool in %s: %w", cfg.SpoolDir, err)
	}
	a.spool = sp
	if err := a.bind(); err != nil {
		a.closeListeners()
		sp.Close()
		return nil, err
	}
	return a, nil
}

func (a *Agent) bind() (err error) {
	listenTCP := func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	bindTo(&err, &a.udp, a.cfg.ListenUDP, listenPacket, "on udp")
	bindTo(&err, &a.statsd, a.cfg.ListenStatsD, listenPacket, "for statsd on udp")
	bindTo(&err, &a.tcp, a.cfg.ListenTCP, listenTCP, "on tcp")
	bindTo(&err, &a.unix, a.cfg.ListenUnix, listenUnix, "on unix socket")
	bindTo(&err, &a.httpLn, a.cfg.ListenHTTP, listenTCP, "for http on")
	return err
}

// bindTo sets *ln to what listen makes of addr, unless addr is empty (that
// listener is off) or an earlier one failed (*err is set: bind stops at the
// first failure, and New closes what was bound). what names the listener
// in the error.
func bindTo[L any](err *error, ln *L, addr string, listen func(string) (L, error), what string) {
	if *err != nil || addr == "" {
		return
	}
	var lerr error
	if *ln, lerr = listen(addr); lerr != nil {
		*err = fmt.Errorf("cannot listen %s %s: %w", what, addr, lerr)
	}
}

// Addrs reports the bound addresses by listener name (udp, statsd, tcp,
// unix, http), for tests and logs.
func (a *Agent) Addrs() map[string]string {
	m := map[string]string{}
	if a.udp != nil {
		m["udp"] = a.udp.LocalAddr().String()
	}
	if a.statsd != nil {
		m["statsd"] = a.statsd.LocalAddr().String()
	}
	if a.tcp != nil {
		m["tcp"] = a.tcp.Addr().String()
	}
	if a.unix != nil {
		m["unix"] = a.unix.Addr().String()
	}
	if a.httpLn != nil {
		m["http"] = a.httpLn.Addr().String()
	}
	return m
}

func (a *Agent) closeListeners() {
	for _, c := range []interface{ Close() error }{a.udp, a.statsd, a.tcp, a.unix, a.httpLn} {
		if c != nil && !isNilCloser(c) {
			c.Close()
		}
	}
}

// Run serves until ctx ends. Shutdown order: stop accepting (listeners
// close, in-flight HTTP requests finish), stop the collector, let the
// producer send what is spooled for up to ShutdownTimeout, close the
// producer and the spool.
func (a *Agent) Run(ctx context.Context) error {
	prod, err := producer.New(producer.Config{
		Brokers:       a.cfg.Brokers,
		ClientOpts:    a.cfg.ClientOpts,
		Topic:         a.cfg.Topic,
		Linger:        a.cfg.Linger,
		BatchMaxBytes: a.cfg.BatchMaxBytes,
		Logger:        a.log,
		OnDelivery:    a.metrics.delivered,
	})
	if err != nil {
		return err
	}

	tuning := tune.Config{MaxProcs: a.cfg.MaxProcs, ReleaseExecPages: a.cfg.ReleaseExecPages, MonitorSlack: a.cfg.MonitorSlack, Logger: a.log}
	a.procs = tune.StartProcs(tuning)

	ingestCtx, stopIngest := context.WithCancel(ctx)
	defer stopIngest()
	var ingestWG sync.WaitGroup
	start := func(f func(context.Context)) {
		ingestWG.Add(1)
		go func() {
			defer ingestWG.Done()
			f(ingestCtx)
		}()
	}
	if err := a.startPolicies(ingestCtx, &ingestWG); err != nil {
		stopIngest()
		ingestWG.Wait()
		a.stopPolicies()
		prod.Close()
		a.closeListeners()
		a.spool.Close()
		return err
	}
	if a.udp != nil {
		start(func(ctx context.Context) { a.servePackets(ctx, a.udp, "udp", false) })
	}
	if a.statsd != nil {
		start(func(ctx context.Context) { a.servePackets(ctx, a.statsd, "statsd", true) })
	}
	if a.tcp != nil {
		start(func(ctx context.Context) { a.serveStream(ctx, a.tcp, "tcp") })
	}
	if a.unix != nil {
		start(func(ctx context.Context) { a.serveStream(ctx, a.unix, "unix") })
	}
	if a.httpLn != nil {
		a.serveHTTP(ingestCtx, start)
	}
	if a.cfg.CollectInterval > 0 {
		start(a.collect)
	}

	shipCtx, stopShip := context.WithCancel(context.Background())
	shipDone := make(chan struct{})
	go func() {
		defer close(shipDone)
		prod.Run(shipCtx, a.spool)
	}()

	tune.AfterStart(tuning)
	a.log.Info("agent serving", "listeners", a.Addrs(), "brokers", a.cfg.Brokers, "topic", a.cfg.Topic,
		"host", a.cfg.Tags.Host, "job", a.cfg.Tags.Job, "run", a.cfg.Tags.Run, "spool", a.cfg.SpoolDir)
	<-ctx.Done()

	// 1. Stop accepting. HTTP requests in flight finish (they are already
	// spooled or get an error), stream readers see their listener close.
	if a.httpSrv != nil {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.httpSrv.Shutdown(sctx)
		c()
	}
	a.closeListeners()
	stopIngest()
	ingestWG.Wait()
	a.stopPolicies()

	// 2. Drain: give the producer time to send what is spooled.
	deadline := time.Now().Add(a.cfg.ShutdownTimeout)
	for a.spool.Stats().Pending > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := a.spool.Stats().Pending; n > 0 {
		a.log.Warn("samples left in the spool for the next start", "samples", n)
	}
	// Stopping the producer abandons the batch in flight (not acked, so
	// it stays spooled).
	stopShip()
	prod.Close()
	<-shipDone
	return a.spool.Close()
}

// collect runs the node collector every CollectInterval.
func (a *Agent) collect(ctx context.Context) {
	c := collector.New(collector.Config{JobID: a.cfg.Tags.Job, UID: a.cfg.JobUID, Logger: a.log.With("part", "collector")})
	t := time.NewTicker(a.cfg.CollectInterval)
	defer t.Stop()
	var buf []byte
	for {
		var err error
		buf, err = c.Collect(ctx, buf[:0])
		if err != nil && ctx.Err() == nil {
			a.log.Warn("node metrics collection failed", "err", err)
		}
		if len(buf) > 0 {
			if _, _, err := a.ingest(ctx, "collector", buf, lineproto.Nanosecond); err != nil && ctx.Err() == nil {
				a.log.Warn("cannot spool node metrics", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
