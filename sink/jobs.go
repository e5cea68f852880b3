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

// watchJobs reads the jobs topic from its end with a client outside the
// group (every sink sees every event) and passes final events to the poll
// loop. A missing jobs topic is not an error: the client keeps looking.
func (s *sinker) watchJobs(ctx context.Context) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ConsumeTopics(s.cfg.JobsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
	)
	if err != nil {
		s.log.Error("cannot start the jobs topic reader; runs will be flushed by age only", "topic", s.cfg.JobsTopic, "err", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				s.log.Debug("jobs topic fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			var ev scheduler.Event
			if err := json.Unmarshal(r.Value, &ev); err != nil {
				s.log.Warn("jobs topic record is not a job event; ignored", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			if !ev.Final() || ev.Run == "" {
				return
			}
			rd := runDone{at: time.Now(), ends: map[tp]int64{}, state: catalog.RunState{Run: ev.Run, State: ev.Type, Ended: ev.Time.UTC()}}
			if ev.ExitCode != nil {
				rd.state.ExitCode = *ev.ExitCode
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
					s.log.Warn("cannot list end offsets for a completed run; flushing what is buffered", "run", ev.Run, "err", err)
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			s.log.Info("run ended; flushing its rows", "run", ev.Run, "state", ev.Type)
			select {
			case s.runs <- rd:
			case <-ctx.Done():
			}
		})
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
		bo := backoff{log: s.log, m: s.m}
		if err := bo.retry(ctx, "mark run", catalog.RunKey(rd.state.Run), func() error { return s.cat.MarkRun(ctx, rd.state) }); err != nil {
			return err
		}
		s.log.Info("run marked in the lake", "run", rd.state.Run, "state", rd.state.State, "after", time.Since(rd.at).Round(time.Millisecond))
	}
	s.mu.pending = keep
	return nil
}
