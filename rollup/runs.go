package rollup

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/scheduler"
)

// runsFollower follows the run registry (the runs topic) from its start:
// which runs have ended, with their registry entries. Its goroutine
// (follow) is started and waited for by Run; the worker's loop reads it
// through get.
type runsFollower struct {
	cl  *kgo.Client
	log *slog.Logger
	mu  struct {
		sync.Mutex
		runs map[string]scheduler.Run
	}
}

func newRunsFollower(cfg Config) (*runsFollower, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumeTopics(cfg.RunsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}, cfg.ClientOpts...)...)
	if err != nil {
		return nil, err
	}
	f := &runsFollower{cl: cl, log: cfg.Logger}
	f.mu.runs = map[string]scheduler.Run{}
	return f, nil
}

// follow reads the runs topic until ctx ends, merging every record of a
// run (Merge is a join, so an older record can only add to a newer one).
func (f *runsFollower) follow(ctx context.Context) {
	defer f.cl.Close()
	for {
		fs := f.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				f.log.Debug("cannot read the run registry", "topic", t, "partition", p, "err", err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Value == nil {
				return
			}
			var run scheduler.Run
			if err := json.Unmarshal(r.Value, &run); err != nil || run.Run == "" {
				f.log.Warn("skipping an undecodable run registry record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			f.mu.Lock()
			f.mu.runs[run.Run] = scheduler.Merge(f.mu.runs[run.Run], run)
			f.mu.Unlock()
		})
	}
}

// get returns what the registry says of run so far.
func (f *runsFollower) get(run string) (scheduler.Run, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.mu.runs[run]
	return r, ok
}
