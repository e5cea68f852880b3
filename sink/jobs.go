package sink

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/scheduler"
)

// runDone is a run that ended, with the end offsets of the telemetry
// partitions when the sink learned of it: once a partition has consumed
// up to its end offset, every row of the run it will ever see (from
// agents that stopped before the run ended) is buffered or flushed.
type runDone struct {
	state catalog.RunState
	ends  map[tp]int64
	at    time.Time
}

// nodesGrace is how long the sink waits, after a run's final event, for
// the epilogs of all its nodes before it closes the run anyway (a node
// that died runs no epilog).
const nodesGrace = time.Minute

// watchJobs reads the jobs topic with a client outside the group (every
// sink sees every event), folds the events into runs, and hands a run to
// the poll loop once it is over on every node: its final event is in and
// every node of the job has run its epilog (scheduler.Run.AllNodesDown),
// so every agent of the run has shipped what it held. A run whose nodes
// are unknown (its start was not seen) or whose epilogs do not all come
// within nodesGrace is handed over on its final event or at the grace's
// end. The topic is read from its start so that a run that ended while no
// sink was running is still closed; runs the catalog already marks are
// skipped. A missing jobs topic is not an error: the client keeps looking.
func (s *sinker) watchJobs(ctx context.Context) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ConsumeTopics(s.cfg.JobsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, s.cfg.ClientOpts...)...)
	if err != nil {
		s.log.Error("cannot start the jobs topic reader; runs will be flushed by age only", "topic", s.cfg.JobsTopic, "err", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	handled := map[string]bool{}
	if marked, err := s.cat.Runs(ctx); err == nil {
		for r := range marked {
			handled[r] = true
		}
	} else {
		s.log.Warn("cannot read the runs the lake marks complete; they may be marked again", "err", err)
	}
	runs := map[string]scheduler.Run{}
	finalSeen := map[string]time.Time{} // runs with a final event, waiting for their nodes
	hand := func(r scheduler.Run, why string) {
		handled[r.Run] = true
		delete(finalSeen, r.Run)
		rd := runDone{at: time.Now(), ends: map[tp]int64{}, state: catalog.RunState{Run: r.Run, State: r.State, Ended: r.Ended.UTC()}}
		if r.ExitCode != nil {
			rd.state.ExitCode = *r.ExitCode
		}
		for attempt := 0; ctx.Err() == nil; attempt++ {
			ends, err := adm.ListEndOffsets(ctx, s.telemetry...)
			if err == nil {
				err = ends.Error()
			}
			if err == nil {
				ends.Each(func(o kadm.ListedOffset) { rd.ends[tp{o.Topic, o.Partition}] = o.Offset })
				break
			}
			if attempt == 3 {
				s.log.Warn("cannot list end offsets for a completed run; flushing what is buffered", "run", r.Run, "err", err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		s.log.Info("run ended; flushing its rows", "run", r.Run, "state", r.State, "why", why)
		select {
		case s.runs <- rd:
		case <-ctx.Done():
		}
	}
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Debug("jobs topic fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			var ev scheduler.Event
			if err := json.Unmarshal(r.Value, &ev); err != nil {
				s.log.Warn("jobs topic record is not a job event; ignored", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			if ev.Run == "" || handled[ev.Run] {
				return
			}
			run, ok := runs[ev.Run]
			if !ok {
				run = scheduler.Run{Run: ev.Run}
			}
			run = scheduler.Apply(run, ev)
			runs[ev.Run] = run
			switch {
			case run.AllNodesDown():
				delete(runs, ev.Run)
				hand(run, "every node ran its epilog")
			case run.Final() && len(run.Nodes) == 0:
				delete(runs, ev.Run)
				hand(run, "final event; the run's nodes are unknown")
			case run.Final():
				if _, ok := finalSeen[ev.Run]; !ok {
					finalSeen[ev.Run] = time.Now()
				}
			}
		})
		for name, at := range finalSeen {
			if time.Since(at) > nodesGrace {
				run := runs[name]
				delete(runs, name)
				hand(run, "not every node ran its epilog within "+nodesGrace.String())
			}
		}
	}
}

// checkRuns flushes the partitions holding rows of completed runs once
// they have consumed up to the run's end offsets, then marks each run in
// the catalog. A partition that does not get there within FlushAge (say
// its tail is transaction markers) is flushed anyway. Callers hold mu.
func (s *sinker) checkRuns(ctx context.Context) error {
	keep := s.mu.pending[:0]
	for _, rd := range s.mu.pending {
		timedOut := time.Since(rd.at) > s.cfg.FlushAge
		done := true
		if len(s.mu.parts) == 0 && !timedOut {
			// Not in the group yet: the partitions this sink will own
			// may hold rows of the run.
			keep = append(keep, rd)
			continue
		}
		for _, ps := range s.sortedParts() {
			if !ps.buf.telemetry {
				continue
			}
			end, known := rd.ends[tp{ps.topic, ps.partition}]
			if known && end > 0 && ps.next < end && !timedOut {
				done = false
				continue
			}
			if ps.buf.runs[rd.state.Run] && ps.redo == nil {
				if err := s.flush(ctx, ps, "run"); err != nil {
					return err
				}
			}
		}
		if !done {
			keep = append(keep, rd)
			continue
		}
		// A run marked complete has its rows in the Iceberg tables too.
		if err := s.commitBatch(ctx); err != nil {
			return err
		}
		bo := backoff{log: s.log, m: s.m}
		if err := bo.retry(ctx, "mark run", catalog.RunKey(rd.state.Run), func() error { return s.cat.MarkRun(ctx, rd.state) }); err != nil {
			return err
		}
		s.log.Info("run marked in the lake", "run", rd.state.Run, "state", rd.state.State, "after", time.Since(rd.at).Round(time.Millisecond))
	}
	s.mu.pending = keep
	return nil
}
