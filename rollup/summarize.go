package rollup

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/lineproto"
)

// A sample of an open 10 s window reaches its run's aggregate when the
// window closes: closing merges the window's field aggregates into the
// run's (foldIntoRun), which costs one merge per window instead of a
// sketch insert and a lookup per sample. The samples that no window will
// fold go to the run's aggregate one by one (addToRun): those of series
// over the --max-series cap, late ones, and those of a window marked
// inRun (see window).

// addToRun adds the decoded sample's fields (record offset off, sample
// time t) to its run's aggregate in p; s is its series, or nil for a
// series not held (the decoder then holds its measurement and tags). A
// sample without a run tag belongs to no summary. Every sample counts,
// also one too late for its window: a summary is over the whole run.
func (w *worker) addToRun(p *partition, s *series, off, t int64) {
	if s != nil {
		w.addToSeriesRun(p, s, off, t)
		return
	}
	var run, host string
	for _, tg := range w.dec.Tags {
		switch string(tg.Key) {
		case "run":
			run = string(tg.Value)
		case "host":
			host = string(tg.Value)
		}
	}
	if run == "" {
		return
	}
	a := w.runAgg(p, run, host, off)
	meas := string(w.dec.Measurement)
	a.dirtyMeas[meas] = true
	for i := range w.dec.Fields {
		w.addToRunField(a, a.field(w.dec.Measurement, w.dec.Fields[i].Key, w.cfg.MaxRunMetrics), &w.dec.Fields[i], t)
	}
}

// seriesAgg returns the aggregate of s's run in p, adding it (its first
// sample at input offset off), through the series' cache; nil for a
// series without a run tag.
func (w *worker) seriesAgg(p *partition, s *series, off int64) *runAgg {
	a := s.agg
	if a == nil || a.gone || s.aggGen != a.gen {
		run := s.tags["run"]
		if run == "" {
			return nil
		}
		a = w.runAgg(p, run, s.tags["host"], off)
		s.agg, s.aggGen, s.aggFields = a, a.gen, s.aggFields[:0]
		s.aggMarked = a.epoch - 1
	}
	return a
}

// addToSeriesRun is addToRun for a sample of a held series, through the
// series' cache of its run aggregate.
func (w *worker) addToSeriesRun(p *partition, s *series, off, t int64) {
	a := w.seriesAgg(p, s, off)
	if a == nil {
		return
	}
	if s.aggMarked != a.epoch {
		a.dirtyMeas[s.measurement] = true
		s.aggMarked = a.epoch
	}
	for i := range w.dec.Fields {
		fv := &w.dec.Fields[i]
		var f *field
		if i < len(s.aggFields) && s.aggFields[i] != nil && s.aggFields[i].name == string(fv.Key) {
			f = s.aggFields[i]
		} else {
			f = a.field([]byte(s.measurement), fv.Key, w.cfg.MaxRunMetrics)
			if f != nil {
				for len(s.aggFields) <= i {
					s.aggFields = append(s.aggFields, nil)
				}
				s.aggFields[i] = f
			}
		}
		w.addToRunField(a, f, fv, t)
	}
}

// foldIntoRun merges a closing or flushed 10 s window of s, whose samples
// are not in its run's aggregate yet, into that aggregate, and marks the
// window inRun.
func (w *worker) foldIntoRun(p *partition, s *series, win *window) {
	win.inRun = true
	run := s.tags["run"]
	if run == "" {
		return
	}
	a := s.agg
	if a == nil || a.gone {
		if a = p.runs[run]; a == nil {
			// The aggregate is made with the window's first sample and
			// only goes once its open windows are folded (flushRuns), so
			// this is a defensive fallback: a negative name, never an
			// offset, keeps its partial apart from the run's others.
			a = w.runAgg(p, run, s.tags["host"], -1-win.start)
		}
	}
	a.dirtyMeas[s.measurement] = true
	for i := range win.fields {
		f := &win.fields[i]
		if t := a.field([]byte(s.measurement), []byte(f.name), w.cfg.MaxRunMetrics); t != nil {
			t.merge(f, w.sk)
		} else {
			a.dropped += f.count + f.nonfinite
			a.dirty = true
		}
	}
}

// runAgg returns p's aggregate of run, adding it (its first sample at
// input offset off), with host noted.
func (w *worker) runAgg(p *partition, run, host string, off int64) *runAgg {
	a := p.runs[run]
	if a == nil {
		a = newRunAgg(run, off)
		a.dirty = true
		p.runs[run] = a
	}
	if host != "" {
		a.addHost(host)
	}
	return a
}

// addToRunField adds a decoded value to f, the run's aggregate of its
// field, or counts it dropped when f is nil (over the metrics cap).
func (w *worker) addToRunField(a *runAgg, f *field, fv *lineproto.FieldValue, t int64) {
	if string(fv.Key) == PolicyVersionField {
		addPolicyValue(a, fv)
	}
	if f == nil {
		a.dropped++
		a.dirty = true
		return
	}
	f.add(fv, t, w.sk)
}

// addPolicyValue notes the policy version a PolicyVersionField value
// names.
func addPolicyValue(a *runAgg, fv *lineproto.FieldValue) {
	switch fv.Type {
	case lineproto.Integer:
		a.addPolicy(fv.Int())
	case lineproto.Unsigned:
		a.addPolicy(int64(fv.Uint())) //nolint:gosec // a version number
	}
}

// anyRunEnded reports whether p holds the aggregate of a run that ended.
func (w *worker) anyRunEnded(p *partition) bool {
	for run := range p.runs {
		if r, ok := w.runs.get(run); ok && r.Final() {
			return true
		}
	}
	return false
}

// flushRuns produces the aggregate of each ended run of p as a partial and
// forgets it (a tombstone for its state record): stage 1 of summary.go.
func (w *worker) flushRuns(ctx context.Context, p *partition) {
	for run, a := range p.runs {
		info, ok := w.runs.get(run)
		if !ok || !info.Final() {
			continue
		}
		a.info = info
		// Samples of the run's open windows are part of what ended.
		for _, s := range p.series {
			if s.tags["run"] != run {
				continue
			}
			for _, win := range s.open[0] {
				if !win.inRun {
					w.foldIntoRun(p, s, win)
					p.markDirty(s, 0, win)
				}
			}
		}
		produce := func(meas string, value []byte) {
			w.send(ctx, &kgo.Record{Topic: w.cfg.PartialTopic, Key: partialKey(a, p.id, meas), Value: value, Timestamp: partialTime(info)})
			p.tombstones = append(p.tombstones, runStateKey(run, meas))
		}
		produce("", appendRunHeader(nil, a))
		for m := range a.metrics {
			produce(m, appendRunMeasurement(nil, a, m))
		}
		w.m.partials.Inc()
		a.release(w.sk)
		delete(p.runs, run)
	}
}

// applyRun applies a state record of a run aggregate to p: a header or
// measurement record replaces what p holds of it; a header's tombstone
// (the aggregate was produced as a partial) drops the aggregate, a
// measurement's drops the measurement.
func (w *worker) applyRun(p *partition, r *kgo.Record) error {
	run, meas, _ := strings.Cut(string(r.Key[len(runKeyPrefix):]), "\x00")
	a := p.runs[run]
	if r.Value == nil {
		switch {
		case a == nil:
		case meas == "":
			a.release(w.sk)
			delete(p.runs, run)
		default:
			a.setMeasurement(meas, nil, w.sk)
		}
		return nil
	}
	o, m, err := decodeRunRecord(r.Value, w.sk)
	if err != nil {
		return err
	}
	if a == nil || a.first != o.first {
		if a != nil {
			a.release(w.sk)
		}
		a = newRunAgg(run, o.first)
		p.runs[run] = a
	}
	if m == "" {
		a.dropped, a.hosts, a.policies = o.dropped, o.hosts, o.policies
		return nil
	}
	a.setMeasurement(m, o.metrics[m], w.sk)
	return nil
}

// readToEnd polls cl until every partition in pending (partition -> the
// offset to stop before) is read, handing each data record below its end to
// fn; control records only advance the position.
func readToEnd(ctx context.Context, cl *kgo.Client, what string, pending map[int32]int64, fn func(*kgo.Record) error) error {
	for len(pending) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = fmt.Errorf("rollup: cannot read partition %d of %s: %w", p, what, err)
		})
		if ferr != nil {
			return ferr
		}
		for _, r := range fs.Records() {
			end, ok := pending[r.Partition]
			if !ok {
				continue
			}
			if r.Offset >= end {
				delete(pending, r.Partition)
				continue
			}
			if !r.Attrs.IsControl() {
				if err := fn(r); err != nil {
					return err
				}
			}
			if r.Offset+1 >= end {
				delete(pending, r.Partition)
			}
		}
	}
	return nil
}
