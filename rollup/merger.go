package rollup

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/scheduler"
)

// Stage 2 of a run summary (summary.go): the worker owning a run's
// partition of PartialTopic merges the run's partials into one runAgg per
// run (worker.merged) and produces the summary.
//
// worker.merged is bounded: once it holds more than MaxSummaryRuns runs,
// emitSummaries forgets the least recently merged ones, whose summaries are
// produced in the same transaction. A partial of a run not held (a run
// never seen, one forgotten, or any run after a restart or a rebalance)
// first reads the run's earlier partials back from its partition
// (rebuild). That read starts at the first partial stamped partialSlack
// before the new partial's stamp: every partial is stamped with its run's
// end in the registry (partialTime), so the read skips the partials of
// runs that ended long before.

// partialSlack is how much earlier than a partial's stamp the run's other
// partials may be stamped: the registry may move a run's end (the epilog's
// time, then jobcomp's) between the partials of different partitions.
const partialSlack = time.Hour

// partialTime is the timestamp of a run's partial records: the run's end
// in the registry, or now while the registry has none.
func partialTime(info scheduler.Run) time.Time {
	if !info.Ended.IsZero() {
		return info.Ended
	}
	return time.Now()
}

// addPartials merges the partials of one PartialTopic partition into
// their runs' summaries, reading back first the earlier partials of the
// runs it does not hold.
func (w *worker) addPartials(ctx context.Context, ftp kgo.FetchTopicPartition) error {
	if w.merged[ftp.Partition] == nil {
		w.merged[ftp.Partition] = map[string]*runAgg{}
	}
	if err := w.rebuild(ctx, ftp); err != nil {
		return err
	}
	for _, r := range ftp.Records {
		w.addPartial(ftp.Partition, r)
	}
	w.m.summaryRuns.Set(float64(w.mergedRuns()))
	return nil
}

// addPartial merges one partial record and queues its run's summary.
func (w *worker) addPartial(id int32, r *kgo.Record) {
	a, err := w.mergePartial(id, r)
	if err != nil {
		w.log.Warn("skipping an undecodable run partial", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		return
	}
	if a != nil && !a.queued {
		a.queued = true
		w.summarize = append(w.summarize, a)
	}
}

// mergePartial merges one partial record into its run's summary of
// partition id and returns the summary (nil for a tombstone).
func (w *worker) mergePartial(id int32, r *kgo.Record) (*runAgg, error) {
	if r.Value == nil {
		return nil, nil
	}
	o, _, err := decodeRunRecord(r.Value, w.sk)
	if err != nil {
		return nil, err
	}
	runs := w.merged[id]
	a := runs[o.run]
	if a == nil {
		a = newRunAgg(o.run, r.Offset)
		runs[o.run] = a
	}
	a.merge(o, w.sk, w.cfg.MaxRunMetrics)
	o.release(w.sk)
	a.touched = time.Now().UnixNano()
	return a, nil
}

// rebuild reads back, for the runs with a partial in ftp that w does not
// hold, their partials before ftp's first record: one read of the
// partition for all of them, from the first record stamped partialSlack
// before the earliest of their partials in ftp. Called inside the
// transaction: the partials it reads were committed by stage 1 before
// the group's offsets of this partition, which the summaries produced so
// far hold.
func (w *worker) rebuild(ctx context.Context, ftp kgo.FetchTopicPartition) error {
	held := w.merged[ftp.Partition]
	missing := map[string]bool{}
	var from time.Time
	for _, r := range ftp.Records {
		run := string(runOfKey(r.Key))
		if r.Value == nil || held[run] != nil || missing[run] {
			continue
		}
		missing[run] = true
		if t := r.Timestamp.Add(-partialSlack); from.IsZero() || t.Before(from) {
			from = t
		}
	}
	if len(missing) == 0 || ftp.Records[0].Offset == 0 {
		return nil
	}
	topic := w.cfg.PartialTopic
	rd, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(w.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {ftp.Partition: kgo.NewOffset().AfterMilli(from.UnixMilli())}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, w.cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("rollup: cannot read the partials topic %s: %w", topic, err)
	}
	defer rd.Close()
	n := 0
	// The read ends at ftp's first record, which is committed: it exists.
	err = readToEnd(ctx, rd, "the partials topic "+topic, map[int32]int64{ftp.Partition: ftp.Records[0].Offset}, func(r *kgo.Record) error {
		if missing[string(runOfKey(r.Key))] {
			w.addPartial(ftp.Partition, r)
			n++
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.m.summaryRebuilds.Inc()
	w.log.Debug("run partials read back", "partition", ftp.Partition, "runs", len(missing), "partials", n)
	return nil
}

// emitSummaries produces the summary of every run whose partials changed
// since the last commit, with what the registry says of the run now, then
// forgets the runs over MaxSummaryRuns.
func (w *worker) emitSummaries(ctx context.Context) {
	now := time.Now().UnixNano()
	for _, a := range w.summarize {
		a.queued = false
		if info, ok := w.runs.get(a.run); ok {
			a.info = scheduler.Merge(a.info, info)
		}
		err := appendSummaryLines(a, now, func(key, line []byte) {
			w.send(ctx, &kgo.Record{Topic: w.cfg.SummaryTopic, Key: key, Value: line, Timestamp: time.Unix(0, now)})
		})
		if err != nil {
			w.log.Warn("run summary cannot be written as line protocol", "run", a.run, "err", err)
			continue
		}
		w.m.summaries.Inc()
	}
	w.summarize = nil
	w.evictMerged()
}

// evictMerged forgets the least recently merged runs while more than
// MaxSummaryRuns are held. None is queued: emitSummaries just produced
// them. Should the transaction abort, reset forgets every run anyway.
func (w *worker) evictMerged() {
	over := w.mergedRuns() - w.cfg.MaxSummaryRuns
	if over > 0 {
		type held struct {
			id int32
			a  *runAgg
		}
		var all []held
		for id, runs := range w.merged {
			for _, a := range runs {
				all = append(all, held{id, a})
			}
		}
		slices.SortFunc(all, func(x, y held) int { return cmp.Compare(x.a.touched, y.a.touched) })
		for _, h := range all[:over] {
			w.forgetMerged(h.id, h.a)
		}
		w.m.summaryEvictions.Add(float64(over))
	}
	w.m.summaryRuns.Set(float64(w.mergedRuns()))
}

// forgetMerged drops run summary a of partition id.
func (w *worker) forgetMerged(id int32, a *runAgg) {
	delete(w.merged[id], a.run)
	a.release(w.sk)
}

// mergedRuns is how many run summaries w holds.
func (w *worker) mergedRuns() int {
	n := 0
	for _, runs := range w.merged {
		n += len(runs)
	}
	return n
}

// loadPartials starts holding run summaries for PartialTopic partitions
// ids. It reads nothing: a run's summary is read back from its partials
// when a new partial of it arrives (rebuild).
func (w *worker) loadPartials(_ context.Context, ids []int32) error {
	for _, id := range ids {
		w.merged[id] = map[string]*runAgg{}
	}
	return nil
}

// addEndedRuns produces, for each record of the run registry that says a
// run ended, a partial without metrics carrying the run's registry entry:
// its summary is then produced even when no sample of the run exists
// (stage 1 makes partials only of runs with samples). The group consumes
// the registry, so each record is taken once, in the transaction that
// commits its offset.
func (w *worker) addEndedRuns(ctx context.Context, ftp kgo.FetchTopicPartition) {
	for _, r := range ftp.Records {
		if r.Value == nil {
			continue
		}
		var info scheduler.Run
		if err := json.Unmarshal(r.Value, &info); err != nil || info.Run == "" || !info.Final() {
			continue
		}
		a := newRunAgg(info.Run, r.Offset)
		a.info = info
		// Named by the registry's partition, not an input partition's.
		key := append([]byte(info.Run), 0, 'r')
		key = strconv.AppendInt(key, int64(r.Partition), 10)
		key = strconv.AppendInt(append(key, 0), r.Offset, 10)
		w.send(ctx, &kgo.Record{Topic: w.cfg.PartialTopic, Key: key, Value: appendRunHeader(nil, a), Timestamp: partialTime(info)})
	}
}
