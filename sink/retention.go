package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/simtel/simtel/internal/tick"
	"github.com/simtel/simtel/lake/retention"
)

// RetentionConfig makes the sink apply the lake's retention policies
// (lake/retention; set with `simtel lake retention set`) in the
// background. The zero value leaves retention off.
type RetentionConfig struct {
	// Interval between retention passes; 0 turns them off. Of the sinks
	// of a group only the one that holds partition 0 of the first topic
	// (in sorted order) runs them, so one pass expires each partition
	// once.
	Interval time.Duration
	// Grace keeps expired objects in the store this long after they left
	// the catalog, for queries that loaded it before. Default
	// retention.DefaultGrace (1 h).
	Grace time.Duration
}

func (c *RetentionConfig) validate() error {
	if c.Interval < 0 {
		return fmt.Errorf("sink: --retention-interval %v is negative", c.Interval)
	}
	return orDefault(&c.Grace, retention.DefaultGrace, "retention-grace")
}

type retentionMetrics struct {
	partitions, objects, rows, bytes, deleted, errors prometheus.Counter
	duration                                          prometheus.Histogram
}

func newRetentionMetrics(reg prometheus.Registerer) *retentionMetrics {
	p := passMetrics{"retention", reg}
	return &retentionMetrics{
		partitions: p.counter("partitions_expired_total", "Partitions (measurement, run, day) removed from the catalog by retention."),
		objects:    p.counter("objects_expired_total", "Objects removed from the catalog by retention."),
		rows:       p.counter("rows_expired_total", "Rows of the objects removed by retention."),
		bytes:      p.counter("bytes_expired_total", "Bytes of the objects removed by retention."),
		deleted:    p.counter("objects_deleted_total", "Expired objects deleted from the store (after the grace)."),
		errors:     p.counter("errors_total", "Retention passes that failed (the next pass tries again)."),
		duration:   p.duration("Time of one retention pass."),
	}
}

// retainer runs retention passes while this sink holds the elected
// partition.
type retainer struct {
	s   *sinker
	cfg RetentionConfig
	m   *retentionMetrics
	now func() time.Time
}

func newRetainer(s *sinker, cfg RetentionConfig, reg prometheus.Registerer) *retainer {
	return &retainer{s: s, cfg: cfg, m: newRetentionMetrics(reg), now: time.Now}
}

// elected reports whether this sink holds partition 0 of the first of its
// topics in sorted order: the one sink of a group that runs the lake-wide
// passes (retention, Iceberg expiry), so each runs once.
func (s *sinker) elected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.mu.parts[tp{slices.Min(s.cfg.Topics), 0}]
	return ok
}

// run applies retention every Interval until ctx ends.
func (r *retainer) run(ctx context.Context) {
	r.s.log.Info("retention on", "interval", r.cfg.Interval, "grace", r.cfg.Grace, "elected_by", slices.Min(r.s.cfg.Topics)+"/0")
	tick.Every(ctx, r.cfg.Interval, func() {
		if r.s.elected() {
			r.pass(ctx)
		}
	})
}

// pass is one retention pass.
func (r *retainer) pass(ctx context.Context) {
	start := time.Now()
	log := r.s.log
	cfg := retention.Config{Now: r.now, Grace: r.cfg.Grace, Logger: log}
	if r.s.ice != nil {
		cfg.Iceberg = r.s.ice // expired partitions leave the Iceberg tables too
	}
	res, err := retention.Apply(ctx, r.s.cat, cfg)
	r.m.duration.Observe(time.Since(start).Seconds())
	r.m.partitions.Add(float64(len(res.Expired)))
	r.m.objects.Add(float64(res.Objects))
	r.m.rows.Add(float64(res.Rows))
	r.m.bytes.Add(float64(res.Bytes))
	r.m.deleted.Add(float64(res.Deleted))
	if err != nil && !errors.Is(err, context.Canceled) {
		r.m.errors.Inc()
		log.Warn("retention pass failed; the next pass tries again", "err", err)
		return
	}
	if len(res.Expired) > 0 || res.Deleted > 0 {
		log.Info("retention applied", "partitions", len(res.Expired), "objects", res.Objects, "rows", res.Rows,
			"bytes", res.Bytes, "deleted", res.Deleted, "pending", res.Pending, "took", time.Since(start).Round(time.Millisecond))
	}
}
