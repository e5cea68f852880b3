package retention

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/store"
)

// IcebergPrefix is where lake/iceberg keeps table metadata in the lake.
const IcebergPrefix = "_iceberg/"

// ErrIceberg is returned by Apply on a lake with Iceberg tables when
// Config.Iceberg is not set: the tables reference the lake's objects as
// data files, and only their catalog can remove them.
var ErrIceberg = errors.New("the lake has Iceberg tables (_iceberg/ in the lake): give their catalog (--iceberg-catalog) so retention removes the expired partitions from them too")

// Tables are the lake's Iceberg tables (lake/iceberg.Lake), from which
// retention removes the data files of expired partitions.
type Tables interface {
	// RemoveObjects removes the data files of the given objects from
	// every table holding them, one snapshot per table; objects a table
	// no longer holds are skipped.
	RemoveObjects(ctx context.Context, keys []string, reason string) (int, error)
}

// DefaultGrace is how long expired objects stay in the store after the
// catalog stopped showing them (Config.Grace).
const DefaultGrace = time.Hour

// Config tunes Apply.
type Config struct {
	// Now is the current time (default time.Now); a partition is expired
	// when its day ended at least its tier's Keep before Now.
	Now func() time.Time
	// Grace keeps expired objects in the store this long after their
	// expiration was recorded, for readers that loaded the catalog before
	// it; a later Apply deletes them. Default DefaultGrace; negative: delete
	// at once.
	Grace time.Duration
	// DryRun plans and reports, changes nothing.
	DryRun bool
	// Logger receives a line per expiration and deletion; nil discards.
	Logger *slog.Logger
	// Iceberg, on a lake with Iceberg tables, removes expired partitions
	// from the tables right after the catalog's expiration record, and
	// again (a no-op unless a pass died in between) before their objects
	// are deleted, so no current snapshot names a deleted file.
	Iceberg Tables
}

func (c *Config) fill() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Grace < 0 {
		c.Grace = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Partition is the objects of one measurement, run and day (telemetry,
// rollups, summaries) or of one topic and day (raw and dead-letter
// objects).
type Partition struct {
	Tier        Tier          `json:"tier"`
	Kind        string        `json:"kind"`
	Measurement string        `json:"measurement,omitempty"`
	Topic       string        `json:"topic,omitempty"` // raw and dead-letter objects
	Run         string        `json:"run,omitempty"`
	Date        string        `json:"date"`
	Keep        time.Duration `json:"keep_ns"`
	Objects     []string      `json:"objects"`
	Rows        int64         `json:"rows"`
	Bytes       int64         `json:"bytes"`
}

// Result tells what Apply did (or would do, in a dry run).
type Result struct {
	// Expired lists the partitions expired by this call, sorted.
	Expired []Partition
	// Objects, Rows and Bytes sum over Expired.
	Objects, Rows, Bytes int64
	// Deleted counts objects of earlier expirations deleted from the store.
	Deleted int64
	// Pending counts objects of expirations still within their grace.
	Pending int64
	// Undated counts visible objects whose date could not be read; they
	// are never expired.
	Undated int
	// IcebergFiles counts data files removed from Iceberg tables.
	IcebergFiles int64
}

// Plan lists the partitions of snap that ps expires at now.
func Plan(snap *catalog.Snapshot, ps *Policies, now time.Time) ([]Partition, int) {
	// Topics per object key: a policy may be set per topic.
	topicsOf := map[string][]string{}
	for _, e := range snap.Entries {
		for _, o := range e.Objects {
			if !slices.Contains(topicsOf[o.Key], e.Topic) {
				topicsOf[o.Key] = append(topicsOf[o.Key], e.Topic)
			}
		}
	}
	for _, cp := range snap.Compactions {
		var topics []string
		for _, k := range cp.Replaced {
			for _, t := range topicsOf[k] {
				if !slices.Contains(topics, t) {
					topics = append(topics, t)
				}
			}
		}
		for _, o := range cp.Objects {
			topicsOf[o.Key] = topics
		}
	}
	type pkey struct{ kind, m, topic, run, date string }
	parts := map[pkey]*Partition{}
	undated := 0
	for _, o := range snap.Objects(catalog.Filter{}) {
		tier, base := TierRaw, ""
		k := pkey{kind: o.Kind, run: o.Run, date: o.Date}
		switch o.Kind {
		case lake.KindTelemetry:
			tier, base = Classify(o.Measurement)
			k.m = o.Measurement
		default:
			k.topic = strings.Join(topicsOf[o.Key], ",")
		}
		d, err := time.Parse(time.DateOnly, o.Date)
		if err != nil {
			undated++
			continue
		}
		keep := ps.Keep(tier, base, topicsOf[o.Key])
		if keep == Forever || d.Add(day).After(now.Add(-keep)) {
			continue
		}
		p := parts[k]
		if p == nil {
			p = &Partition{Tier: tier, Kind: o.Kind, Measurement: o.Measurement, Topic: k.topic, Run: o.Run, Date: o.Date, Keep: keep}
			parts[k] = p
		}
		// Objects of one partition from different topics may have
		// different policies: the partition goes when its longest goes.
		p.Keep = max(p.Keep, keep)
		p.Objects = append(p.Objects, o.Key)
		p.Rows += o.Rows
		p.Bytes += o.Bytes
	}
	out := make([]Partition, 0, len(parts))
	for _, p := range parts {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Partition) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Measurement, b.Measurement), cmp.Compare(a.Topic, b.Topic),
			cmp.Compare(a.Run, b.Run), cmp.Compare(a.Date, b.Date))
	})
	return out, undated
}

// Apply expires what the lake's policies say has expired, and deletes the
// objects of earlier expirations whose grace has passed. See the package
// documentation for the protocol.
func Apply(ctx context.Context, cat *catalog.Catalog, cfg Config) (Result, error) {
	cfg.fill()
	var res Result
	st := cat.Store()
	ice, err := st.List(ctx, IcebergPrefix)
	if err != nil {
		return res, fmt.Errorf("cannot check %s for Iceberg tables: %w", st, err)
	}
	if len(ice) > 0 && cfg.Iceberg == nil {
		return res, ErrIceberg
	}
	ps, err := LoadPolicies(ctx, st)
	if err != nil {
		return res, err
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		return res, err
	}
	now := cfg.Now()
	res.Expired, res.Undated = Plan(snap, ps, now)
	var keys []string
	var tiers []string
	for _, p := range res.Expired {
		keys = append(keys, p.Objects...)
		res.Objects += int64(len(p.Objects))
		res.Rows += p.Rows
		res.Bytes += p.Bytes
		if !slices.Contains(tiers, string(p.Tier)) {
			tiers = append(tiers, string(p.Tier))
		}
	}
	if cfg.DryRun {
		for _, ex := range snap.Expirations {
			if ex.Deleted.IsZero() {
				res.Pending += int64(len(ex.Hidden))
			}
		}
		return res, nil
	}
	if len(keys) > 0 {
		reason := fmt.Sprintf("retention of tier %s: %d partitions", strings.Join(tiers, ", "), len(res.Expired))
		ex, err := cat.CommitExpiration(ctx, catalog.Expiration{Keys: keys, Reason: reason, Written: now.UTC()})
		if err != nil {
			return res, err
		}
		cfg.Logger.Info("expired partitions", "expiration", ex.ID, "partitions", len(res.Expired),
			"objects", res.Objects, "rows", res.Rows, "bytes", res.Bytes)
		if cfg.Iceberg != nil {
			// The catalog record is the commit point; a failure here is
			// retried by deleteExpired before any object goes.
			n, err := cfg.Iceberg.RemoveObjects(ctx, keys, reason+" (expiration "+ex.ID+")")
			res.IcebergFiles += int64(n)
			if err != nil {
				return res, fmt.Errorf("expiration %s is recorded, but removing its files from the Iceberg tables failed (the next pass retries): %w", ex.ID, err)
			}
		}
		if snap, err = cat.Load(ctx); err != nil {
			return res, err
		}
	}
	err = deleteExpired(ctx, cat, snap, now, cfg, &res)
	return res, err
}

// deleteExpired deletes the objects of expirations past their grace, and
// marks each done. An object still visible (it cannot be, unless the
// catalog was edited by hand) is never deleted.
func deleteExpired(ctx context.Context, cat *catalog.Catalog, snap *catalog.Snapshot, now time.Time, cfg Config, res *Result) error {
	st := cat.Store()
	visible := map[string]bool{}
	for _, o := range snap.Objects(catalog.Filter{}) {
		visible[o.Key] = true
	}
	if cfg.Iceberg != nil {
		// Whatever a pass that died left in the tables goes before its
		// objects do.
		var due []string
		for _, ex := range snap.Expirations {
			if ex.Deleted.IsZero() && now.Sub(ex.Written) >= cfg.Grace {
				due = append(due, ex.Hidden...)
			}
		}
		n, err := cfg.Iceberg.RemoveObjects(ctx, due, "retention: expired earlier")
		res.IcebergFiles += int64(n)
		if err != nil {
			return fmt.Errorf("expired objects stay until the Iceberg tables no longer hold them: %w", err)
		}
	}
	var errs []error
	for _, ex := range snap.Expirations {
		if !ex.Deleted.IsZero() {
			continue
		}
		if now.Sub(ex.Written) < cfg.Grace {
			res.Pending += int64(len(ex.Hidden))
			continue
		}
		failed := false
		for _, k := range ex.Hidden {
			if visible[k] {
				continue
			}
			if err := st.Delete(ctx, k); err != nil && !errors.Is(err, store.ErrNotFound) {
				errs = append(errs, fmt.Errorf("cannot delete expired object %s: %w", k, err))
				failed = true
				continue
			}
			res.Deleted++
		}
		if failed {
			continue // the next pass tries again
		}
		if err := cat.MarkExpirationDeleted(ctx, ex, now); err != nil {
			errs = append(errs, err)
			continue
		}
		cfg.Logger.Info("deleted expired objects", "expiration", ex.ID, "objects", len(ex.Hidden))
	}
	return errors.Join(errs...)
}

func jsonEncode(p Policy) ([]byte, error) {
	b, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		return nil, fmt.Errorf("cannot encode retention policy: %w", err)
	}
	return append(b, '\n'), nil
}

func jsonDecode(r io.Reader, v any) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
