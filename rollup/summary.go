package rollup

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/scheduler"
)

// A run summary is built in two stages, both inside the worker's
// transactions (doc.go, "Run summaries"):
//
//  1. per input partition, a runAgg per run holds the aggregates of every
//     metric (measurement.field) of the run's samples in that partition.
//     Once the runs topic says the run ended, the next commit produces it
//     as a partial to PartialTopic (key run \0 partition \0 offset of its
//     first sample; partitioned by the run) and forgets it. Samples that
//     arrive later start a new runAgg, with another key.
//  2. the worker that owns the PartialTopic partition of the run merges
//     every partial of the run (runSummary) and produces the summary to
//     SummaryTopic: one line per metric, key run \0 metric.

// SummaryMeasurement is the measurement of the summary lines and so the
// lake table summary.runs.
const SummaryMeasurement = "summary.runs"

// maxRunHosts bounds the hosts a run aggregate lists.
const maxRunHosts = 4096

// PolicyVersionField is the field whose values name the policy versions a
// run used: simtel records no other trace of which version a process
// read, so a simulation reports it with its samples (slurm/examples/sim.py
// does). A summary lists the distinct positive values, at most
// maxRunPolicies.
const PolicyVersionField = "policy_version"

const maxRunPolicies = 1024

// runAgg is the aggregate of one run's samples in one input partition
// since it was last produced as a partial.
type runAgg struct {
	run   string
	first int64 // input offset of its first sample: names its partial
	// metrics: measurement → field → aggregate.
	metrics map[string]map[string]*field
	n       int   // metrics held
	dropped int64 // samples of metrics over the cap (field values)
	hosts   map[string]struct{}
	// policies are the distinct integer values of PolicyVersionField.
	policies map[int64]struct{}
	// dirty: the header changed since the last checkpoint; dirtyMeas:
	// the measurements changed since then (stage 1).
	dirty     bool
	dirtyMeas map[string]bool
	// What a series' cache of the aggregate (series.agg) checks: epoch
	// counts the clearings of dirtyMeas, gen the replacements of a
	// measurement's fields, and gone says the aggregate was dropped.
	epoch, gen uint64
	gone       bool
	// queued: the summary is to be produced at the next commit (stage 2).
	queued bool
	// touched is when a partial was last merged in (stage 2, unix ns):
	// the least recently touched runs are forgotten first (evictMerged).
	touched int64
	// info is the run as the runs topic told stage 1 when it produced the
	// partial (stage 2 only).
	info scheduler.Run
}

func newRunAgg(run string, first int64) *runAgg {
	return &runAgg{run: run, first: first, metrics: map[string]map[string]*field{}, hosts: map[string]struct{}{}, policies: map[int64]struct{}{}, dirtyMeas: map[string]bool{}}
}

// field returns the aggregate of measurement m's field name, adding it
// unless the run holds max metrics (nil then).
func (a *runAgg) field(m, name []byte, limit int) *field {
	fs := a.metrics[string(m)]
	if f := fs[string(name)]; f != nil {
		return f
	}
	if a.n >= limit {
		return nil
	}
	if fs == nil {
		fs = map[string]*field{}
		a.metrics[string(m)] = fs
	}
	f := &field{name: string(name)}
	fs[f.name] = f
	a.n++
	return f
}

func (a *runAgg) addHost(h string) {
	if _, ok := a.hosts[h]; !ok && len(a.hosts) < maxRunHosts {
		a.hosts[h] = struct{}{}
		a.dirty = true
	}
}

// addPolicy notes a policy version; versions start at 1, and a value
// below (sim.py's -1, the agent's 0) says the process held none yet.
func (a *runAgg) addPolicy(v int64) {
	if _, ok := a.policies[v]; !ok && v > 0 && len(a.policies) < maxRunPolicies {
		a.policies[v] = struct{}{}
		a.dirty = true
	}
}

// merge adds o into a (a stage-2 summary takes each partial).
func (a *runAgg) merge(o *runAgg, sk *sketches, limit int) {
	for m, fs := range o.metrics {
		for name, f := range fs {
			if t := a.field([]byte(m), []byte(name), limit); t != nil {
				t.merge(f, sk)
			} else {
				a.dropped += f.count + f.nonfinite
			}
		}
	}
	a.dropped += o.dropped
	for h := range o.hosts {
		a.addHost(h)
	}
	for v := range o.policies {
		a.addPolicy(v)
	}
	a.info = scheduler.Merge(a.info, o.info)
}

// cleanDirty forgets which measurements changed.
func (a *runAgg) cleanDirty() {
	clear(a.dirtyMeas)
	a.epoch++
}

// release returns a's sketches to sk; a is no longer used.
func (a *runAgg) release(sk *sketches) {
	a.gone = true
	for _, fs := range a.metrics {
		for _, f := range fs {
			f.release(sk)
		}
	}
}

// A runAgg is written, to the state topic and as a partial, as one header
// record (its hosts, policy versions, dropped count and, in a partial, the
// run's registry entry) and one record per measurement (its fields), so no
// record grows with the metrics of a run beyond one measurement's.

// Kinds of runAgg records.
const (
	runHeader      = 'h'
	runMeasurement = 'm'
)

// runKeyPrefix starts the state-topic keys of runAggs; series keys never
// start with NUL, so they meet no window's key.
var runKeyPrefix = []byte("\x00run\x00")

// runStateKey is the state-topic key of a runAgg's header (meas "") or of
// one of its measurements.
func runStateKey(run, meas string) []byte {
	k := append(slices.Clip(runKeyPrefix), run...)
	if meas != "" {
		k = append(append(k, 0), meas...)
	}
	return k
}

// partialKey is the key of a partial record on PartialTopic: the run, the
// input partition and the offset of the aggregate's first sample, and the
// measurement of a measurement record.
func partialKey(a *runAgg, partition int32, meas string) []byte {
	k := append([]byte(a.run), 0)
	k = strconv.AppendInt(k, int64(partition), 10)
	k = append(k, 0)
	k = strconv.AppendInt(k, a.first, 10)
	if meas != "" {
		k = append(append(k, 0), meas...)
	}
	return k
}

// runOfKey is the run a summary or partial key names: the bytes before
// the first NUL. Records of one run share a partition by it.
func runOfKey(k []byte) []byte {
	if i := bytes.IndexByte(k, 0); i >= 0 {
		return k[:i]
	}
	return k
}

// runPartition is the partition of n holding the summary records of run.
func runPartition(run []byte, n int) int {
	h := fnv.New32a()
	_, _ = h.Write(run)
	return int(h.Sum32() % uint32(n)) //nolint:gosec // n is a partition count
}

// appendRunHeader encodes a runAgg's header record.
func appendRunHeader(dst []byte, a *runAgg) []byte {
	dst = append(dst, stateVersion, runHeader)
	dst = appendString(dst, a.run)
	dst = binary.AppendVarint(dst, a.first)
	dst = binary.AppendVarint(dst, a.dropped)
	info, _ := json.Marshal(a.info) // plain data: cannot fail
	dst = appendString(dst, string(info))
	dst = binary.AppendUvarint(dst, uint64(len(a.hosts)))
	for _, h := range slices.Sorted(maps.Keys(a.hosts)) {
		dst = appendString(dst, h)
	}
	dst = binary.AppendUvarint(dst, uint64(len(a.policies)))
	for _, v := range slices.Sorted(maps.Keys(a.policies)) {
		dst = binary.AppendVarint(dst, v)
	}
	return dst
}

// appendRunMeasurement encodes the fields of a runAgg's measurement m.
func appendRunMeasurement(dst []byte, a *runAgg, m string) []byte {
	dst = append(dst, stateVersion, runMeasurement)
	dst = appendString(dst, a.run)
	dst = binary.AppendVarint(dst, a.first)
	dst = appendString(dst, m)
	fs := a.metrics[m]
	dst = binary.AppendUvarint(dst, uint64(len(fs)))
	for _, name := range slices.Sorted(maps.Keys(fs)) {
		dst = appendField(dst, fs[name])
	}
	return dst
}

// decodeRunRecord decodes a header or measurement record into a runAgg
// holding only what it carries; meas is the measurement ("" for a
// header).
func decodeRunRecord(b []byte, sk *sketches) (a *runAgg, meas string, err error) {
	r := stateReader{b: b}
	switch r.byte() {
	case stateVersion:
	case 1:
		r.log = true
	default:
		return nil, "", fmt.Errorf("%w: unknown version", errState)
	}
	kind := r.byte()
	a = newRunAgg(string(r.bytes()), r.varint())
	switch kind {
	case runHeader:
		a.dropped = r.varint()
		if info := r.bytes(); r.err == nil {
			if err := json.Unmarshal(info, &a.info); err != nil {
				return nil, "", fmt.Errorf("%w: run entry: %v", errState, err)
			}
		}
		for n := r.uvarint(); n > 0 && r.err == nil; n-- {
			a.hosts[string(r.bytes())] = struct{}{}
		}
		for n := r.uvarint(); n > 0 && r.err == nil; n-- {
			a.policies[r.varint()] = struct{}{}
		}
	case runMeasurement:
		meas = string(r.bytes())
		fs := map[string]*field{}
		for k := r.uvarint(); k > 0 && r.err == nil; k-- {
			f, err := r.field(sk)
			if err != nil {
				return nil, "", err
			}
			fs[f.name] = f
			a.n++
		}
		a.metrics[meas] = fs
		if meas == "" {
			r.fail()
		}
	default:
		r.fail()
	}
	if r.err != nil {
		a.release(sk)
		return nil, "", r.err
	}
	return a, meas, nil
}

// setMeasurement replaces a's fields of measurement m with fs.
func (a *runAgg) setMeasurement(m string, fs map[string]*field, sk *sketches) {
	a.gen++ // a series' cached fields may be the replaced ones
	for _, f := range a.metrics[m] {
		f.release(sk)
	}
	a.n -= len(a.metrics[m])
	if fs == nil {
		delete(a.metrics, m)
		return
	}
	a.metrics[m] = fs
	a.n += len(fs)
}

// summaryKey is the key of a metric's summary line on SummaryTopic.
func summaryKey(run, metric string) []byte {
	return append(append([]byte(run), 0), metric...)
}

// appendSummaryLines writes the summary of a run, one line per metric:
// the metric's figures and the run's, at the run's start (its end, or
// updated, while the start is unknown); a run without metrics gets one
// line of its figures, count 0 and no metric tag. updated (unix ns) orders the
// versions of a run's summary.
func appendSummaryLines(a *runAgg, updated int64, emit func(key, line []byte)) error {
	info := a.info
	at := updated
	for _, t := range []time.Time{info.Started, info.Submitted, info.Ended} {
		if !t.IsZero() {
			at = t.UnixNano()
			break
		}
	}
	hosts := slices.SortedFunc(maps.Keys(a.hosts), scheduler.NaturalCompare)
	nodes := info.Nodes
	if len(nodes) == 0 {
		nodes = hosts
	}
	run := map[string]any{
		"state":           dashIfEmpty(info.State),
		"nodes":           strings.Join(nodes, ","),
		"node_count":      int64(len(nodes)),
		"hosts":           strings.Join(hosts, ","),
		"policy_versions": joinInts(slices.Sorted(maps.Keys(a.policies))),
		"dropped_samples": a.dropped,
		"updated":         updated,
	}
	if d := info.Duration(); d > 0 {
		run["wall_time_s"] = d.Seconds()
	}
	if info.ExitCode != nil {
		run["exit_code"] = int64(*info.ExitCode)
	}
	for k, v := range map[string]string{"job_id": info.JobID, "user": info.User, "name": info.Name, "reason": info.Reason} {
		if v != "" {
			run[k] = v
		}
	}
	for k, t := range map[string]time.Time{"started": info.Started, "ended": info.Ended} {
		if !t.IsZero() {
			run[k] = t.UnixNano()
		}
	}
	var buf []byte
	if len(a.metrics) == 0 {
		// A run without samples: one line of the run's figures, without
		// a metric tag.
		fields := maps.Clone(run)
		fields["count"] = int64(0)
		buf, err := lineproto.AppendLine(buf, SummaryMeasurement, map[string]string{"run": a.run}, fields, at)
		if err != nil {
			return fmt.Errorf("summary of run %q: %w", a.run, err)
		}
		emit(summaryKey(a.run, ""), buf)
		return nil
	}
	for _, m := range slices.Sorted(maps.Keys(a.metrics)) {
		fs := a.metrics[m]
		for _, name := range slices.Sorted(maps.Keys(fs)) {
			f := fs[name]
			fields := maps.Clone(run)
			if f.count > 0 || f.nonfinite > 0 {
				fields["count"] = f.count
			}
			if f.nonfinite > 0 {
				fields["nonfinite"] = f.nonfinite
			}
			if f.count > 0 {
				fields["min"], fields["max"], fields["sum"] = f.min, f.max, f.sum
				fields["mean"] = f.sum / float64(f.count)
				for _, q := range quantiles {
					if v, err := f.sketch().GetValueAtQuantile(q.q); err == nil {
						fields[q.suffix[1:]] = v
					}
				}
			}
			// Each kind of last value has its own column, so the lake
			// table's columns keep one type whatever the metrics are.
			switch f.kind {
			case lastNumber:
				fields["last"] = f.lastNum
			case lastString:
				fields["last_string"] = f.lastStr
			case lastBool:
				fields["last_bool"] = f.lastNum != 0
			}
			metric := m + "." + name
			var err error
			buf, err = lineproto.AppendLine(buf[:0], SummaryMeasurement, map[string]string{"run": a.run, "metric": metric}, fields, at)
			if err != nil {
				return fmt.Errorf("summary of run %q, metric %q: %w", a.run, metric, err)
			}
			emit(summaryKey(a.run, metric), bytes.Clone(buf))
		}
	}
	return nil
}

func joinInts(vs []int64) string {
	var b []byte
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
