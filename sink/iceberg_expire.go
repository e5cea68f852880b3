package sink

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/simtel/simtel/internal/tick"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
)

// Defaults of IcebergExpireConfig.
const (
	// DefaultIcebergExpireInterval: with a flush every 10 s a table gains
	// 60 snapshots between passes, each listed in every metadata file the
	// table writes until a pass expires it.
	DefaultIcebergExpireInterval = 10 * time.Minute
	// DefaultSnapshotRetention is how far back time travel reaches.
	DefaultSnapshotRetention = time.Hour
)

// IcebergExpireConfig makes a sink with an Iceberg catalog expire old
// snapshots of the tables in the background, as `simtel lake expire` does:
// each commit writes a metadata file that lists every snapshot the table
// holds, so without expiry a table's metadata grows with the square of its
// flushes.
type IcebergExpireConfig struct {
	// Interval between passes. 0: DefaultIcebergExpireInterval; negative:
	// off. Of the sinks of a group only the one holding partition 0 of the
	// first topic (in sorted order) runs them, as for retention.
	Interval time.Duration
	// Retention: snapshots committed longer ago are expired, except each
	// table's RetainLast newest. 0: DefaultSnapshotRetention.
	Retention time.Duration
	// RetainLast is how many of a table's newest snapshots stay whatever
	// their age; 0: 1 (the current one).
	RetainLast int
}

func (c *IcebergExpireConfig) validate() error {
	if c.Interval == 0 {
		c.Interval = DefaultIcebergExpireInterval
	}
	if err := orDefault(&c.Retention, DefaultSnapshotRetention, "iceberg-snapshot-retention"); err != nil {
		return err
	}
	return orDefault(&c.RetainLast, 1, "iceberg-retain-last")
}

type icebergExpireMetrics struct {
	snapshots, files, bytes, errors prometheus.Counter
	lastRun                         prometheus.Gauge
	duration                        prometheus.Histogram
}

func newIcebergExpireMetrics(reg prometheus.Registerer) *icebergExpireMetrics {
	p := passMetrics{"iceberg_expire", reg}
	return &icebergExpireMetrics{
		snapshots: p.counter("snapshots_total", "Snapshots of the Iceberg tables expired."),
		files:     p.counter("files_deleted_total", "Files deleted by Iceberg expiry: manifest lists, manifests, metadata files, orphans, data files only expired snapshots used."),
		bytes:     p.counter("bytes_deleted_total", "Bytes of the files deleted by Iceberg expiry."),
		errors:    p.counter("errors_total", "Iceberg expiry passes that failed for some table (the next pass tries again)."),
		lastRun:   p.gauge("last_run_timestamp_seconds", "Unix time the last Iceberg expiry pass ended."),
		duration:  p.duration("Time of one Iceberg expiry pass over every table."),
	}
}

// icebergExpirer runs expiry passes while this sink holds the elected
// partition.
type icebergExpirer struct {
	s   *sinker
	cfg IcebergExpireConfig
	m   *icebergExpireMetrics
}

func (x *icebergExpirer) run(ctx context.Context) {
	x.s.log.Info("iceberg expiry on", "interval", x.cfg.Interval, "snapshot_retention", x.cfg.Retention, "retain_last", x.cfg.RetainLast)
	tick.Every(ctx, x.cfg.Interval, func() {
		if x.s.elected() {
			x.pass(ctx)
		}
	})
}

// pass is one expiry over every table. Data files simtel's catalog names
// are never deleted: retention and compaction delete those after their
// grace.
func (x *icebergExpirer) pass(ctx context.Context) {
	start := time.Now()
	defer func() {
		x.m.duration.Observe(time.Since(start).Seconds())
		x.m.lastRun.SetToCurrentTime()
	}()
	var snap *catalog.Snapshot
	snap, err := x.s.cat.Load(ctx)
	if err != nil {
		x.m.errors.Inc()
		x.s.log.Warn("iceberg expiry: cannot load the catalog; the next pass tries again", "err", err)
		return
	}
	res, err := x.s.ice.Expire(ctx, iceberg.ExpireOptions{
		OlderThan:  x.cfg.Retention,
		RetainLast: x.cfg.RetainLast,
		Protected:  iceberg.CatalogKeys(snap),
	})
	x.m.snapshots.Add(float64(res.Snapshots))
	x.m.files.Add(float64(res.Files))
	x.m.bytes.Add(float64(res.Bytes))
	if err != nil && !errors.Is(err, context.Canceled) {
		x.m.errors.Inc()
		x.s.log.Warn("iceberg expiry failed for some tables; the next pass tries again", "err", err)
	}
	if res.Snapshots > 0 || res.Files > 0 {
		x.s.log.Info("iceberg snapshots expired", "tables", len(res.Tables), "snapshots", res.Snapshots, "files", res.Files,
			"bytes", res.Bytes, "took", time.Since(start).Round(time.Millisecond))
	}
}
