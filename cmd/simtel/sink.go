package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/retention"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/sink"
)

func newSinkCmd(g *globalFlags) *cobra.Command {
	var cfg sink.Config
	var topics, telemetryTopics, compactTarget string
	var uploadDelay time.Duration
	var kf kafkaFlags
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Write topics into the Parquet lake (local directory or S3), exactly once",
		Long: `Run the sink: a consumer-group connector that writes topics into the lake as
Parquet objects. Records of the telemetry topics (--telemetry-topics) are
decoded from line protocol into one table per measurement
(telemetry/<measurement>/run=<run>/date=<day>/...): a time column
(TIMESTAMP micros, UTC), one column per tag and per field, and _partition,
_offset, _time_ns. Lines that cannot be decoded go to deadletter/<topic>/...;
other topics are kept whole in raw/<topic>/....

Each partition is flushed when its buffer reaches --flush-bytes or
--flush-rows, when its oldest record is --flush-age old, when a run ends on
the jobs topic, on rebalance and on shutdown. Every flush is recorded in the
lake's catalog before its Kafka offset is committed, and a sink that crashed
mid-flush rewrites the same objects: every record lands in the lake exactly
once. While the store is unreachable the sink retries (100 ms up to 30 s
between attempts) and stops consuming.

Every --compact-interval the sink merges the small telemetry objects of the
partitions it owns (same measurement, run, day and partition; flushed more
than --compact-settle ago) into objects of up to --compact-target-size, once
a group has --compact-min-files of them. Readers see every row exactly once
throughout; replaced objects are deleted --compact-delete-delay later.

With --retention-interval the sink applies the lake's retention policies
('simtel lake retention'; default raw samples 30 days, 10 s rollups 90
days, the rest forever) that often: partitions whose time has passed leave
the catalog, and their objects are deleted --retention-grace later. Off by
default, so an upgrade deletes nothing an operator did not ask for.

With --iceberg-catalog every flush is also committed to the lake's Iceberg
tables (namespace telemetry, one table per measurement, the dead letters in
telemetry.dlq; namespace raw, one table per raw topic), exactly once, for
Spark, Trino, PyIceberg and DuckDB; retention removes expired partitions
from the tables too. Every --iceberg-expire-interval the sink expires the
snapshots older than --iceberg-snapshot-retention and deletes the files only
they used, as simtel lake expire does. See docs/lake-iceberg.md.

Start several sinks with the same --group to share the partitions. S3
credentials come from the usual AWS environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_PROFILE) and config files.`,
		Example: `  simtel sink --brokers 127.0.0.1:9092 --topics telemetry --lake file:///var/lib/simtel/lake
  AWS_ACCESS_KEY_ID=KEY AWS_SECRET_ACCESS_KEY=SECRET simtel sink --brokers 127.0.0.1:9092 \
      --topics telemetry,jobs --lake s3://lake/simtel --s3-endpoint http://127.0.0.1:7070 --http-listen 127.0.0.1:9645`,
		Args: cobra.NoArgs,
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			cfg.Logger = log
			cfg.Topics = splitList(topics)
			cfg.TelemetryTopics = splitList(telemetryTopics)
			var err error
			if cfg.Brokers, cfg.ClientOpts, err = kf.dial(cmd.Context()); err != nil {
				return fmt.Errorf("sink: %w", err)
			}
			if cfg.Compact.TargetSize, err = parseSize(compactTarget); err != nil {
				return fmt.Errorf("--compact-target-size: %w", err)
			}
			if cfg.TelemetryTopics == nil {
				cfg.TelemetryTopics = []string{}
			}
			if cfg.IcebergExpire.Interval == 0 {
				cfg.IcebergExpire.Interval = -1 // sink.Config: off
			}
			if uploadDelay > 0 {
				st, err := store.Open(cmd.Context(), cfg.Lake, store.Options{S3Endpoint: cfg.S3Endpoint})
				if err != nil {
					return fmt.Errorf("sink: cannot open lake %s: %w", cfg.Lake, err)
				}
				cr, ok := st.(store.Creator)
				if !ok {
					return fmt.Errorf("sink: lake %s cannot create objects atomically", cfg.Lake)
				}
				cfg.Store = slowUploads{Creator: cr, delay: uploadDelay}
			}
			return sink.Run(cmd.Context(), cfg)
		}),
	}
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&topics, "topics", "telemetry", "comma-separated topics to write into the lake")
	f.StringVar(&telemetryTopics, "telemetry-topics", "telemetry", "comma-separated topics holding line protocol, decoded into telemetry tables (others are written raw)")
	f.StringVar(&cfg.Lake, "lake", "", "lake root: file:///dir or s3://bucket/prefix (required)")
	f.StringVar(&cfg.S3Endpoint, "s3-endpoint", "", "S3-compatible endpoint URL, e.g. http://127.0.0.1:7070 (empty: AWS)")
	f.StringVar(&cfg.Group, "group", sink.DefaultGroup, "consumer group; sinks in one group share the partitions")
	f.Int64Var(&cfg.FlushBytes, "flush-bytes", sink.DefaultFlushBytes, "flush a partition when its buffered input reaches this many bytes (bounds memory per partition)")
	f.IntVar(&cfg.FlushRows, "flush-rows", 0, "flush a partition when it buffers this many records (0: no limit)")
	f.DurationVar(&cfg.FlushAge, "flush-age", sink.DefaultFlushAge, "flush a partition when its oldest buffered record is this old")
	f.StringVar(&cfg.JobsTopic, "jobs-topic", "jobs", "topic of job events; a run's completion flushes its rows (\"-\": off)")
	f.StringVar(&cfg.HTTPListen, "http-listen", "", "host:port for /metrics, /healthz and /debug/pprof (empty: off)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long the final flush may take after SIGTERM")
	f.DurationVar(&uploadDelay, "upload-delay", 0, "pause before each object upload (crash tests only)")
	_ = f.MarkHidden("upload-delay")
	f.DurationVar(&cfg.Compact.Interval, "compact-interval", sink.DefaultCompactInterval, "merge the small telemetry objects of the owned partitions this often (0: off)")
	f.StringVar(&compactTarget, "compact-target-size", "128MiB", "largest merged object (input bytes); bigger objects are left alone")
	f.IntVar(&cfg.Compact.MinFiles, "compact-min-files", sink.DefaultCompactMinFiles, "merge a group once it has this many small objects")
	f.DurationVar(&cfg.Compact.Settle, "compact-settle", sink.DefaultCompactSettle, "leave objects alone until their flush is this old")
	f.DurationVar(&cfg.Compact.DeleteDelay, "compact-delete-delay", sink.DefaultCompactDeleteDelay, "delete replaced objects this long after their compaction (running queries may still read them)")
	f.DurationVar(&cfg.Retention.Interval, "retention-interval", 0, "apply the lake's retention policies this often (0: off; see simtel lake retention)")
	f.DurationVar(&cfg.Retention.Grace, "retention-grace", retention.DefaultGrace, "delete expired objects this long after they left the catalog (running queries may still read them)")
	f.DurationVar(&cfg.CompactPause, "compact-pause", 0, "pause before and after each compaction commit (crash tests only)")
	_ = f.MarkHidden("compact-pause")
	f.StringVar(&cfg.IcebergCatalog, "iceberg-catalog", "", "also commit every flush to the lake's Apache Iceberg tables, in this catalog: sqlite:PATH or postgres://user:pass@host/db (empty: off)")
	f.DurationVar(&cfg.IcebergPause, "iceberg-pause", 0, "pause between a flush's catalog and Iceberg commits (crash tests only)")
	_ = f.MarkHidden("iceberg-pause")
	f.DurationVar(&cfg.IcebergExpire.Interval, "iceberg-expire-interval", sink.DefaultIcebergExpireInterval, "with --iceberg-catalog, expire old snapshots of the tables this often (0: off; see simtel lake expire)")
	f.DurationVar(&cfg.IcebergExpire.Retention, "iceberg-snapshot-retention", sink.DefaultSnapshotRetention, "the expiry keeps the snapshots committed this recently: how far back time travel reaches")
	f.IntVar(&cfg.IcebergExpire.RetainLast, "iceberg-retain-last", 1, "the expiry keeps at least this many of each table's newest snapshots, whatever their age")
	return cmd
}

// slowUploads pauses before each object upload (the catalog's writes are
// not delayed): --upload-delay widens the window a crash test's kill lands
// in mid-flush.
type slowUploads struct {
	store.Creator
	delay time.Duration
}

func (s slowUploads) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if !strings.HasPrefix(key, catalog.Prefix) {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Creator.Put(ctx, key, r, size)
}

// Unwrap lets readers of a local lake still use its files in place.
func (s slowUploads) Unwrap() store.Store { return s.Creator }
