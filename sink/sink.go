package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/metricsrv"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/scheduler"
)

// Defaults of Config.
const (
	DefaultGroup      = "simtel-sink"
	DefaultFlushBytes = 64 << 20
	DefaultFlushAge   = 60 * time.Second
)

// Config configures Run.
type Config struct {
	// Brokers are seed broker addresses (host:port). Required.
	Brokers []string
	// ClientOpts are added to every Kafka client of the sink: the
	// connection's TLS and SASL (internal/kafkasec).
	ClientOpts []kgo.Opt
	// Topics are the topics to consume. Required.
	Topics []string
	// TelemetryTopics are the topics among Topics whose values are
	// canonical line protocol and are decoded into telemetry objects;
	// the others are written raw. Default: ["telemetry"].
	TelemetryTopics []string
	// Lake is the lake root URL: file:///dir or s3://bucket/prefix. Required.
	Lake string
	// S3Endpoint is the base URL of an S3-compatible service; empty means
	// AWS (credentials come from the usual AWS environment and config).
	S3Endpoint string
	// Group is the consumer group; sinks in one group share partitions.
	// Default DefaultGroup.
	Group string
	// FlushBytes flushes a partition once its buffered input (keys,
	// values and per-record overhead) reaches this many bytes. Default
	// DefaultFlushBytes (64 MiB). It bounds the memory per partition.
	FlushBytes int64
	// FlushRows flushes a partition once it buffers this many records.
	// 0 means no row limit.
	FlushRows int
	// FlushAge flushes a partition once its oldest buffered record was
	// consumed this long ago. Default DefaultFlushAge (60 s).
	FlushAge time.Duration
	// JobsTopic carries the scheduler's job events; a run's completion
	// flushes its rows and marks it in the catalog. Default
	// scheduler.JobsTopic. "-" turns the watcher off.
	JobsTopic string
	// HTTPListen is host:port for /metrics, /healthz and /debug/pprof;
	// empty: off.
	HTTPListen string
	// ShutdownTimeout bounds the final flush after ctx ends (default 30 s);
	// what is not flushed by then is read again by the next sink.
	ShutdownTimeout time.Duration
	// Logger receives the sink's logs. Default: discard.
	Logger *slog.Logger
	// Registry receives the sink's metrics. Default: a new registry (with
	// the Go and process collectors) served on HTTPListen.
	Registry *prometheus.Registry
	// Store, when set, is used instead of opening Lake (tests, simtel dev).
	Store store.Store
	// Compact merges the small objects of the partitions this sink owns in
	// the background (see CompactConfig; zero: off).
	Compact CompactConfig
	// CompactPause pauses before and after each compaction commit. For
	// crash tests only (it opens a window for a kill at those points).
	CompactPause time.Duration
	// Retention applies the lake's retention policies in the background
	// (see RetentionConfig; zero: off).
	Retention RetentionConfig
	// IcebergCatalog, when set (sqlite:PATH or postgres://...), makes
	// every flush also commit its objects to the lake's Iceberg tables
	// (see lake/iceberg); compaction rewrites them too (lake/compact).
	IcebergCatalog string
	// IcebergPause pauses before each Iceberg commit, after the catalog
	// commits of the flushes it covers. For crash tests only.
	IcebergPause time.Duration
	// IcebergExpire expires old snapshots of the Iceberg tables in the
	// background (see IcebergExpireConfig; on by default with
	// IcebergCatalog).
	IcebergExpire IcebergExpireConfig
}

// Validate fills in defaults and checks the configuration.
func (c *Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("sink: no brokers given (--brokers host:port,...)")
	}
	if len(c.Topics) == 0 {
		return errors.New("sink: no topics given (--topics telemetry,...)")
	}
	if c.Lake == "" && c.Store == nil {
		return errors.New("sink: no lake given (--lake file:///dir or s3://bucket/prefix)")
	}
	if c.TelemetryTopics == nil {
		c.TelemetryTopics = []string{"telemetry"}
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if err := orDefault(&c.FlushBytes, DefaultFlushBytes, "flush-bytes"); err != nil {
		return err
	}
	if c.FlushBytes > 1<<31 {
		return fmt.Errorf("sink: --flush-bytes %d is over 2 GiB; a flush is held in memory", c.FlushBytes)
	}
	if c.FlushRows < 0 {
		return fmt.Errorf("sink: --flush-rows %d is negative", c.FlushRows)
	}
	if err := orDefault(&c.FlushAge, DefaultFlushAge, "flush-age"); err != nil {
		return err
	}
	if c.JobsTopic == "" {
		c.JobsTopic = scheduler.JobsTopic
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := c.Compact.validate(); err != nil {
		return err
	}
	if err := c.Retention.validate(); err != nil {
		return err
	}
	if err := c.IcebergExpire.validate(); err != nil {
		return err
	}
	for _, t := range slices.Concat(c.Topics, c.TelemetryTopics) {
		if t == "" || strings.ContainsAny(t, " /") {
			return fmt.Errorf("sink: topic name %q is not valid", t)
		}
	}
	return nil
}

// orDefault checks that the setting of flag is not negative and gives it
// def when it is 0 (unset).
func orDefault[T int | int64 | time.Duration](v *T, def T, flag string) error {
	if *v < 0 {
		return fmt.Errorf("sink: --%s %v is negative", flag, *v)
	}
	if *v == 0 {
		*v = def
	}
	return nil
}

// Run consumes cfg.Topics in cfg.Group and writes them to the lake exactly
// once until ctx ends, then flushes what it holds (bounded by
// ShutdownTimeout) and leaves the group. It returns nil after a clean
// shutdown, or the error that stopped it.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	st := cfg.Store
	if st == nil {
		var err error
		st, err = store.Open(ctx, cfg.Lake, store.Options{S3Endpoint: cfg.S3Endpoint})
		if err != nil {
			return fmt.Errorf("sink: cannot open lake %s: %w", cfg.Lake, err)
		}
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		registerProcessCollectors(reg)
	}
	host, _ := os.Hostname()
	s := &sinker{
		cfg:   cfg,
		log:   log,
		store: st,
		cat:   catalog.New(st),
		m:     newMetrics(reg),
		id:    fmt.Sprintf("%s/%d", host, os.Getpid()),
		runs:  make(chan runDone, 64),
	}
	s.mu.parts = map[tp]*partState{}
	if cfg.IcebergCatalog != "" {
		ice, err := iceberg.Open(ctx, iceberg.Options{Catalog: cfg.IcebergCatalog, Store: st, S3Endpoint: cfg.S3Endpoint, Logger: log})
		if err != nil {
			return fmt.Errorf("sink: %w", err)
		}
		defer ice.Close()
		s.ice = ice
	}
	for _, t := range cfg.TelemetryTopics {
		s.telemetry = append(s.telemetry, t)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	if cfg.HTTPListen != "" {
		wait, err := metricsrv.Serve(bg, cfg.HTTPListen, reg, log, metricsrv.Pprof)
		if err != nil {
			return fmt.Errorf("sink: cannot listen on %s for metrics: %w", cfg.HTTPListen, err)
		}
		wg.Go(wait)
	}

	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(s.onAssigned),
		kgo.AdjustFetchOffsetsFn(s.adjustOffsets),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
		kgo.FetchMaxBytes(32 << 20),
		// A crashed sink's partitions move after 10 s instead of 45.
		kgo.SessionTimeout(10 * time.Second),
		kgo.HeartbeatInterval(time.Second),
	}, cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("sink: cannot create Kafka client for %v: %w", cfg.Brokers, err)
	}
	s.cl = cl
	if cfg.JobsTopic != "-" {
		wg.Go(func() { s.watchJobs(bg) })
	}
	if cfg.Compact.Interval > 0 {
		c := newCompactor(s, cfg.Compact, reg)
		c.pauseAroundCommit(cfg.CompactPause)
		wg.Go(func() { c.run(bg) })
	}
	if cfg.Retention.Interval > 0 {
		r := newRetainer(s, cfg.Retention, reg)
		wg.Go(func() { r.run(bg) })
	}
	if s.ice != nil && cfg.IcebergExpire.Interval > 0 {
		x := &icebergExpirer{s: s, cfg: cfg.IcebergExpire, m: newIcebergExpireMetrics(reg)}
		wg.Go(func() { x.run(bg) })
	}
	log.Info("sink started", "lake", st.String(), "group", cfg.Group, "topics", cfg.Topics,
		"flush_bytes", cfg.FlushBytes, "flush_rows", cfg.FlushRows, "flush_age", cfg.FlushAge)
	runErr := s.loop(ctx)

	// Final flush of everything still buffered, on a context of its own:
	// ctx has ended.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	if runErr == nil {
		s.mu.Lock()
		for _, ps := range s.sortedParts() {
			if err := s.flush(fctx, ps, "shutdown"); err != nil {
				log.Warn("shutdown flush not done; the records will be read again by the next sink",
					"topic", ps.topic, "partition", ps.partition, "err", err)
			}
		}
		if err := s.commitBatch(fctx); err != nil {
			log.Warn("shutdown Iceberg commit not done; the partitions' next owners reconcile the flushes", "err", err)
		}
		s.mu.Unlock()
	}
	cancel()
	stopBG()
	cl.AllowRebalance()
	s.closing.Store(true)
	cl.Close()
	log.Info("sink stopped")
	return runErr
}
