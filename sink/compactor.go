package sink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/simtel/simtel/internal/tick"
	"github.com/simtel/simtel/lake/compact"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/store"
)

// Defaults of CompactConfig (what `simtel sink` and `simtel dev` use).
const (
	DefaultCompactInterval    = time.Minute
	DefaultCompactTargetSize  = 128 << 20
	DefaultCompactMinFiles    = 8
	DefaultCompactSettle      = 2 * time.Minute
	DefaultCompactDeleteDelay = 10 * time.Minute
)

// CompactConfig makes the sink merge the small telemetry objects of the
// partitions it owns, in the background (see lake/compact for the
// protocol). The zero value leaves compaction off.
type CompactConfig struct {
	// Interval between compaction passes; 0 turns compaction off.
	Interval time.Duration
	// TargetSize is the largest merged object, in input bytes; objects at
	// least this big are left alone. Default DefaultCompactTargetSize
	// (128 MiB).
	TargetSize int64
	// MinFiles: a run of consecutive small objects of one measurement,
	// run, day and partition is merged once it has this many objects
	// (a merged object counts as one). Default DefaultCompactMinFiles (8).
	MinFiles int
	// Settle leaves objects alone until their flush is this old, so the
	// objects of the current window are not rewritten again and again.
	// Default DefaultCompactSettle (2 min).
	Settle time.Duration
	// DeleteDelay keeps replaced objects this long after their
	// compaction, for queries that loaded the catalog before it. Default
	// DefaultCompactDeleteDelay (10 min).
	DeleteDelay time.Duration
	// CacheDir holds local copies of an S3 lake's objects while they are
	// merged. Default: <os temp dir>/simtel-sink-cache. Unused for a
	// local lake.
	CacheDir string
}

func (c *CompactConfig) validate() error {
	if c.Interval < 0 {
		return fmt.Errorf("sink: --compact-interval %v is negative", c.Interval)
	}
	if c.Interval == 0 {
		return nil
	}
	if c.TargetSize == 0 {
		c.TargetSize = DefaultCompactTargetSize
	}
	if c.MinFiles == 0 {
		c.MinFiles = DefaultCompactMinFiles
	}
	if c.Settle == 0 {
		c.Settle = DefaultCompactSettle
	}
	if c.DeleteDelay == 0 {
		c.DeleteDelay = DefaultCompactDeleteDelay
	}
	switch {
	case c.TargetSize < 0:
		return fmt.Errorf("sink: --compact-target-size %d is negative", c.TargetSize)
	case c.MinFiles < 2:
		return fmt.Errorf("sink: --compact-min-files %d: merging fewer than 2 objects gains nothing", c.MinFiles)
	case c.Settle < 0 || c.DeleteDelay < 0:
		return fmt.Errorf("sink: compaction settle %v and delete delay %v may not be negative", c.Settle, c.DeleteDelay)
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(os.TempDir(), "simtel-sink-cache")
	}
	return nil
}

type compactMetrics struct {
	merged, replaced, rows, bytesIn, bytesOut prometheus.Counter
	cleaned, lost, splits, errors             prometheus.Counter
	duration                                  prometheus.Histogram
}

func newCompactMetrics(reg prometheus.Registerer) *compactMetrics {
	p := passMetrics{"compaction", reg}
	return &compactMetrics{
		merged:   p.counter("objects_written_total", "Merged objects committed by the sink's compactor."),
		replaced: p.counter("objects_replaced_total", "Small objects replaced by merged ones."),
		rows:     p.counter("rows_total", "Rows rewritten by compaction."),
		bytesIn:  p.counter("bytes_read_total", "Bytes of the objects replaced."),
		bytesOut: p.counter("bytes_written_total", "Bytes of the merged objects."),
		cleaned:  p.counter("objects_deleted_total", "Replaced objects deleted (after the delete delay)."),
		lost:     p.counter("races_lost_total", "Merges dropped because another compactor replaced the same objects first, or the partition moved."),
		splits:   p.counter("type_splits_total", "Groups split because their objects disagree on a column's type."),
		errors:   p.counter("errors_total", "Compaction passes that failed (the next pass tries again)."),
		duration: p.duration("Time of one compaction pass over the owned partitions."),
	}
}

// compactor runs compaction passes over the telemetry partitions the
// sinker owns. It shares nothing with the poll loop but the ownership
// check, which takes sinker.mu for a map lookup.
type compactor struct {
	s     *sinker
	cfg   CompactConfig
	cache *store.Cache
	m     *compactMetrics
	// hooks for crash tests: see compact.Config.
	beforeCommit, afterCommit func(key string) error
}

func newCompactor(s *sinker, cfg CompactConfig, reg prometheus.Registerer) *compactor {
	return &compactor{
		s: s, cfg: cfg, m: newCompactMetrics(reg),
		cache: store.NewCache(s.store, cfg.CacheDir, max(2*cfg.TargetSize, 256<<20)),
	}
}

// owns reports whether this sink holds the partition now. Checked when
// planning and again right before each commit: a partition that moved to
// another sink is that sink's to compact.
func (c *compactor) owns(topic string, partition int32) bool {
	if !c.s.isTelemetry(topic) {
		return false
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	_, ok := c.s.mu.parts[tp{topic, partition}]
	return ok
}

// run compacts every Interval until ctx ends.
func (c *compactor) run(ctx context.Context) {
	c.s.log.Info("compaction on", "interval", c.cfg.Interval, "target_size", c.cfg.TargetSize,
		"min_files", c.cfg.MinFiles, "settle", c.cfg.Settle, "delete_delay", c.cfg.DeleteDelay)
	tick.Every(ctx, c.cfg.Interval, func() { c.pass(ctx) })
}

// pass is one compaction pass.
func (c *compactor) pass(ctx context.Context) {
	start := time.Now()
	log := c.s.log
	cfg := compact.Config{
		MinFiles: c.cfg.MinFiles, TargetSize: c.cfg.TargetSize, Settle: c.cfg.Settle,
		DeleteDelay: c.cfg.DeleteDelay, Partitions: c.owns, Logger: log,
		Engine: query.Options{Logger: log}, BeforeCommit: c.beforeCommit, AfterCommit: c.afterCommit,
		Iceberg: c.s.ice,
	}
	res, err := compact.Run(ctx, c.s.store, c.s.cat, c.cache, cfg)
	c.m.duration.Observe(time.Since(start).Seconds())
	c.m.merged.Add(float64(res.Groups))
	c.m.replaced.Add(float64(res.Replaced))
	c.m.rows.Add(float64(res.Rows))
	c.m.bytesIn.Add(float64(res.BytesBefore))
	c.m.bytesOut.Add(float64(res.BytesAfter))
	c.m.cleaned.Add(float64(res.Cleaned))
	c.m.lost.Add(float64(res.Lost))
	c.m.splits.Add(float64(res.TypeSplits))
	if err != nil && !errors.Is(err, context.Canceled) {
		c.m.errors.Inc()
		log.Warn("compaction pass failed; the next pass tries again", "err", err)
		return
	}
	if res.Groups > 0 || res.Cleaned > 0 || res.Lost > 0 || res.Reconciled > 0 {
		log.Info("compacted", "merged", res.Groups, "replaced", res.Replaced, "rows", res.Rows,
			"bytes_before", res.BytesBefore, "bytes_after", res.BytesAfter, "deleted", res.Cleaned,
			"lost", res.Lost, "iceberg_reconciled", res.Reconciled, "took", time.Since(start).Round(time.Millisecond))
	}
}

// pauseAroundCommit makes each merge log and wait d before and after its
// catalog commit, so a crash test can kill the process at those points.
func (c *compactor) pauseAroundCommit(d time.Duration) {
	if d <= 0 {
		return
	}
	pause := func(where string) func(string) error {
		return func(key string) error {
			c.s.log.Info("compaction paused "+where+" commit", "key", key, "pause", d)
			time.Sleep(d)
			return nil
		}
	}
	c.beforeCommit, c.afterCommit = pause("before"), pause("after")
}
