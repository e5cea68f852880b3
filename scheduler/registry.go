package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The run registry keeps one Run per run on the compacted RunsTopic. The
// events on JobsTopic are the source of truth; RunsTopic is a cache of
// their fold that any publisher of an event refreshes (Registry.Record).
//
// Why concurrent writers cannot leave a stale Run as the newest record:
// a writer (1) reads the run's events up to the jobs end offsets E, (2)
// writes the fold and waits for the acknowledgement, (3) reads the jobs end
// offsets again and, if events of the run arrived after E, goes back to
// (1). Take the writer W of the newest cache record R. Any event acked
// before W's check (3) was seen by W. An event acked after the check is
// published by someone who then writes the cache themselves, after R was
// acked: their record would be newer than R, which contradicts R being the
// newest. So the newest record folds every event, unless a writer gave up
// (broker unreachable): `simtel runs --source jobs` folds the jobs topic
// itself, and readers merge every record they see for a run (Merge is a
// join, so an older record can only add what a newer one lacks).

// Config configures a Registry.
type Config struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// Logger receives what the registry skips (undecodable records).
	// Default slog.Default().
	Logger *slog.Logger
	// ClientOpts are extra franz-go options for every client (TLS, SASL).
	ClientOpts []kgo.Opt
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("no brokers: pass --brokers host:port[,host:port] or set SIMTEL_BROKERS")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Registry publishes job events and reads and refreshes the run registry.
// It is safe for concurrent use. Close it when done.
type Registry struct {
	cfg Config
	cl  *kgo.Client
}

// Open connects lazily: nothing is sent until a method needs the broker.
func Open(cfg Config) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot create Kafka client for %v: %w", cfg.Brokers, err)
	}
	return &Registry{cfg: cfg, cl: cl}, nil
}

// Close releases the client.
func (g *Registry) Close() { g.cl.Close() }

// Client is the producing client (for Publish).
func (g *Registry) Client() *kgo.Client { return g.cl }

// Publish publishes one event (see the package function).
func (g *Registry) Publish(ctx context.Context, e Event) error {
	return Publish(ctx, g.cl, e)
}

// Record publishes e and refreshes the run's cache entry; since bounds how
// far back the run's events are read (the job's submit time, a little
// earlier for clock skew; zero reads the whole topic). The returned Run
// is the fold written to the cache.
func (g *Registry) Record(ctx context.Context, e Event, since time.Time) (Run, error) {
	if err := g.Publish(ctx, e); err != nil {
		return Run{}, err
	}
	return g.Refresh(ctx, e.Run, since)
}

// maxRefreshRounds bounds the re-reads of Refresh when events keep coming.
const maxRefreshRounds = 8

// Refresh folds the run's events from JobsTopic (from since) and writes
// the result to RunsTopic, repeating while new events of the run arrive
// (see the comment at the top of this file).
func (g *Registry) Refresh(ctx context.Context, run string, since time.Time) (Run, error) {
	if run == "" {
		return Run{}, errors.New("cannot refresh a run without a run id")
	}
	if err := EnsureTopics(ctx, g.cl); err != nil {
		return Run{}, err
	}
	starts, err := g.startOffsets(ctx, JobsTopic, since)
	if err != nil {
		return Run{}, err
	}
	r := Run{Run: run}
	for round := 0; round < maxRefreshRounds; round++ {
		ends, err := g.endOffsets(ctx, JobsTopic)
		if err != nil {
			return Run{}, err
		}
		n := 0
		err = g.scanEvents(ctx, run, starts, ends, func(e Event) {
			r = Apply(r, e)
			n++
		})
		if err != nil {
			return Run{}, err
		}
		if round == 0 && n == 0 {
			return Run{}, fmt.Errorf("no events of run %s on topic %s since %s: nothing to register", run, JobsTopic, since.Format(time.RFC3339))
		}
		if round > 0 && n == 0 {
			return r, nil // the check found nothing new: r is complete
		}
		if err := writeRun(ctx, g.cl, r); err != nil {
			return Run{}, err
		}
		starts = ends // next round: only what arrived since
	}
	return r, nil
}

// Events returns the events of run (all runs when run is "") published
// since the given time (zero: the whole topic), in topic order per
// partition. Undecodable records are logged and skipped.
func (g *Registry) Events(ctx context.Context, run string, since time.Time) ([]Event, error) {
	starts, err := g.startOffsets(ctx, JobsTopic, since)
	if err != nil {
		return nil, err
	}
	ends, err := g.endOffsets(ctx, JobsTopic)
	if err != nil {
		return nil, err
	}
	var out []Event
	err = g.scanEvents(ctx, run, starts, ends, func(e Event) { out = append(out, e) })
	return out, err
}

// scanEvents calls f with each event of run (of every run when run is "")
// on JobsTopic from starts up to ends, in topic order per partition.
// Undecodable records are logged and skipped.
func (g *Registry) scanEvents(ctx context.Context, run string, starts, ends map[int32]int64, f func(Event)) error {
	return g.scan(ctx, JobsTopic, starts, ends, func(rec *kgo.Record) {
		if run != "" && string(rec.Key) != run {
			return
		}
		e, err := DecodeEvent(rec.Value)
		if err != nil {
			g.cfg.Logger.Warn("skipping undecodable job event", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
			return
		}
		f(e)
	})
}

// FoldJobs folds the whole JobsTopic: the registry from the source of
// truth, without the cache.
func (g *Registry) FoldJobs(ctx context.Context) ([]Run, error) {
	evs, err := g.Events(ctx, "", time.Time{})
	if err != nil {
		return nil, err
	}
	return Fold(evs), nil
}

// Runs reads the cached registry from RunsTopic, merging every record of a
// run (see the comment at the top of this file), sorted by run.
func (g *Registry) Runs(ctx context.Context) ([]Run, error) {
	starts, err := g.startOffsets(ctx, RunsTopic, time.Time{})
	if err != nil {
		return nil, err
	}
	ends, err := g.endOffsets(ctx, RunsTopic)
	if err != nil {
		return nil, err
	}
	byRun := map[string]Run{}
	err = g.scan(ctx, RunsTopic, starts, ends, func(rec *kgo.Record) {
		if rec.Value == nil {
			delete(byRun, string(rec.Key)) // tombstone: the run was removed
			return
		}
		r, err := DecodeRun(rec.Value)
		if err != nil {
			g.cfg.Logger.Warn("skipping undecodable run record", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
			return
		}
		prev, _ := runIn(byRun, r.Run)
		byRun[r.Run] = Merge(prev, r)
	})
	if err != nil {
		return nil, err
	}
	return sortedRuns(byRun), nil
}

// ErrNoTopic is returned (wrapped) when a scheduler topic does not exist:
// no event was ever published to this cluster.
var ErrNoTopic = errors.New("topic does not exist")

// startOffsets are the first offsets to read per partition: those of the
// first records at or after since, or the log start when since is zero.
func (g *Registry) startOffsets(ctx context.Context, topic string, since time.Time) (map[int32]int64, error) {
	adm := kadm.NewClient(g.cl)
	var lo kadm.ListedOffsets
	var err error
	if since.IsZero() {
		lo, err = adm.ListStartOffsets(ctx, topic)
	} else {
		lo, err = adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	}
	return offsetsOf(lo, err, topic)
}

func (g *Registry) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	lo, err := kadm.NewClient(g.cl).ListEndOffsets(ctx, topic)
	return offsetsOf(lo, err, topic)
}

func offsetsOf(lo kadm.ListedOffsets, err error, topic string) (map[int32]int64, error) {
	if err != nil {
		return nil, fmt.Errorf("cannot list offsets of topic %s: %w", topic, err)
	}
	ps, ok := lo[topic]
	if !ok || len(ps) == 0 {
		return nil, fmt.Errorf("cannot read topic %s: %w", topic, ErrNoTopic)
	}
	out := make(map[int32]int64, len(ps))
	for p, o := range ps {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return nil, fmt.Errorf("cannot read topic %s: %w", topic, ErrNoTopic)
		}
		if o.Err != nil {
			return nil, fmt.Errorf("cannot list offsets of %s/%d: %w", topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out, nil
}

// scan reads topic from starts to ends (exclusive) per partition with its
// own consuming client and calls fn for each record, in offset order per
// partition. Partitions absent from starts are not read.
func (g *Registry) scan(ctx context.Context, topic string, starts, ends map[int32]int64, fn func(*kgo.Record)) error {
	want := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition -> end offset still to reach
	for p, end := range ends {
		start, ok := starts[p]
		if !ok || start >= end {
			continue
		}
		want[p] = kgo.NewOffset().At(start)
		left[p] = end
	}
	if len(want) == 0 {
		return nil
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(g.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
	}, g.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("cannot create Kafka client to read %s: %w", topic, err)
	}
	defer cl.Close()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cannot read topic %s to its end: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("cannot read %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			end, ok := left[rec.Partition]
			if !ok || rec.Offset >= end {
				return // beyond the snapshot: the caller reads it next time
			}
			fn(rec)
			if rec.Offset+1 >= end {
				delete(left, rec.Partition)
			}
		})
	}
	return nil
}
