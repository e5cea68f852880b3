package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/simtel/simtel/agent/spool"
	"github.com/simtel/simtel/internal/lineproto"
)

// ingestBatch holds one goroutine's reusable buffers for turning a body of
// lines into spool records: a Normalizer, the canonical lines, the keys and
// the records that point into them.
type ingestBatch struct {
	norm  *lineproto.Normalizer
	lines []byte
	keys  []byte
	spans []recSpan
	recs  []spool.Record
	conv  []byte // StatsD lines converted to line protocol
	// Lines refused since reset: malformed, and with a field type
	// conflict; the first of each.
	bad, conflicts int
	firstBad       *lineproto.LineError
	firstConflict  *typeConflict
	// types is the agent's memory of field types (nil: not checked), cache
	// the shapes of lines this batch found in it.
	types *fieldTypes
	cache typeCache
	// lastKey is where the key of the last sample starts in keys, or -1
	// before the first: consecutive samples of one run and host (nearly
	// all of them) share it.
	lastKey int
	// runFrom (nil: off) gives lines that carry its tag and no run tag
	// their run from it; rewritten and rawTags are its scratch space, and
	// fromTag counts the accepted lines it rewrote since reset.
	runFrom   *runFromTag
	rewritten []byte
	rawTags   []lineproto.RawTag
	fromTag   int
}

type recSpan struct {
	line, lineEnd, key, keyEnd int
	time                       int64
}

// errSpool marks a failure to store accepted samples (disk full, spool
// closed, backpressure timeout), as opposed to bad input.
var errSpool = errors.New("cannot spool samples")

// refusals are the lines of a body that were not accepted: malformed ones
// and ones with a field type conflict, with the first of each (the others
// are only counted).
type refusals struct {
	bad, conflicts int
	firstBad       *lineproto.LineError
	firstConflict  *typeConflict
}

func (r refusals) count() int { return r.bad + r.conflicts }

// ingest normalizes the lines of body and appends the valid ones to the
// spool in one call. It returns how many lines were accepted, the lines
// refused, and a spool error wrapping errSpool. Refused lines never stop
// the good ones, as in InfluxDB.
func (a *Agent) ingest(ctx context.Context, listener string, body []byte, prec lineproto.Precision) (int, refusals, error) {
	b := a.normalizers.Get().(*ingestBatch)
	defer a.normalizers.Put(b)
	b.reset()
	b.add(body, prec, time.Now())
	ref := refusals{bad: b.bad, conflicts: b.conflicts, firstBad: b.firstBad, firstConflict: b.firstConflict}
	n, err := a.spoolBatch(ctx, listener, b)
	return n, ref, err
}

func (b *ingestBatch) reset() {
	b.lines, b.keys, b.spans, b.lastKey, b.fromTag = b.lines[:0], b.keys[:0], b.spans[:0], -1, 0
	b.bad, b.conflicts, b.firstBad, b.firstConflict = 0, 0, nil, nil
}

// add normalizes the lines of body into b and returns the first malformed
// one of this call. A line whose field types conflict with those accepted
// before is refused too (b.conflicts). Samples of one run and host share
// their key bytes.
func (b *ingestBatch) add(body []byte, prec lineproto.Precision, now time.Time) *lineproto.LineError {
	// Room for the body plus the tags the agent adds, grown once rather
	// than by doubling (the pool often comes back empty after a GC).
	b.lines = slices.Grow(b.lines, len(body)+len(body)/4)
	var firstErr *lineproto.LineError
	sec := now.Unix()
	_ = lineproto.Lines(body, func(n int, line []byte) error {
		out, s, err := b.norm.Normalize(b.lines, line, prec, now)
		mapped := false
		if err == nil && b.runFrom != nil && b.runFrom.candidate(line, s.Own) {
			// The rare line that takes its run from a tag is normalized
			// again, rewritten, over the first result.
			var rw []byte
			if rw, b.rawTags = b.runFrom.rewrite(b.rewritten, line, b.rawTags); rw != nil {
				b.rewritten, mapped = rw, true
				out, s, err = b.norm.Normalize(b.lines, rw, prec, now)
			}
		}
		if err != nil {
			b.bad++
			if firstErr == nil {
				firstErr = lineproto.NewLineError(n, line, err)
				if b.firstBad == nil {
					b.firstBad = firstErr
				}
			}
			return nil
		}
		if b.types != nil && !b.checkTypes(n, s.Run, s.Measurement, s.Fields, sec) {
			return nil // the canonical line in out is dropped
		}
		b.lines = out
		if mapped {
			b.fromTag++
		}
		k, ke := b.lastKey, len(b.keys)
		if k < 0 || !keyIs(b.keys[k:ke], s.Run, s.Host) {
			k = len(b.keys)
			b.keys = append(b.keys, s.Run...)
			b.keys = append(b.keys, '/')
			b.keys = append(b.keys, s.Host...)
			ke = len(b.keys)
			b.lastKey = k
		}
		b.spans = append(b.spans, recSpan{line: len(out) - len(s.Line), lineEnd: len(out), key: k, keyEnd: ke, time: s.Time})
		return nil
	})
	return firstErr
}

// checkTypes reports whether the fields of line n agree with the types the
// agent remembers for its run and measurement, remembering new ones; a
// conflict is counted and the first one kept. A line of a shape checked
// before is settled by the batch's cache.
func (b *ingestBatch) checkTypes(n int, run, meas []byte, fields []lineproto.Field, sec int64) bool {
	if g := b.types.gen.Load(); g != b.cache.gen {
		b.cache.clear() // a run was forgotten
		b.cache.gen = g
	}
	if rt := b.cache.lookup(run, meas, fields); rt != nil {
		if rt.used.Load() != sec {
			rt.used.Store(sec)
		}
		return true
	}
	rt, all, i, have := b.types.check(run, meas, fields, sec)
	if i >= 0 {
		b.conflicts++
		if b.firstConflict == nil {
			b.firstConflict = &typeConflict{line: n, measurement: string(meas), field: string(fields[i].AppendKey(nil)), got: fields[i].Type, have: have}
		}
		return false
	}
	if all && b.types.gen.Load() == b.cache.gen {
		b.cache.add(rt, run, meas, fields)
	}
	return true
}

// keyIs reports whether key is run + "/" + host.
func keyIs(key, run, host []byte) bool {
	return len(key) == len(run)+1+len(host) && key[len(run)] == '/' &&
		string(key[:len(run)]) == string(run) && string(key[len(run)+1:]) == string(host)
}

// spoolBatch counts b's lines and appends its samples to the spool.
func (a *Agent) spoolBatch(ctx context.Context, listener string, b *ingestBatch) (int, error) {
	a.metrics.received.WithLabelValues(listener).Add(float64(len(b.spans) + b.bad + b.conflicts))
	a.procs.Add(time.Now(), len(b.spans)+b.bad+b.conflicts)
	if b.bad > 0 {
		a.metrics.parseErrors.WithLabelValues(listener).Add(float64(b.bad))
	}
	if b.conflicts > 0 {
		a.metrics.dropped.WithLabelValues(reasonTypeConflict).Add(float64(b.conflicts))
	}
	if b.fromTag > 0 {
		a.metrics.runFromTag.WithLabelValues(listener).Add(float64(b.fromTag))
	}
	if (b.bad > 0 || b.conflicts > 0) && listener != "http" {
		// The sender cannot be told: log, at a bounded rate.
		a.refusalLog.note(a.log, listener, b.bad, b.conflicts, b.firstBad, b.firstConflict)
	}
	if len(b.spans) == 0 {
		return 0, nil
	}
	b.recs = b.recs[:0]
	for _, sp := range b.spans {
		b.recs = append(b.recs, spool.Record{Key: b.keys[sp.key:sp.keyEnd], Value: b.lines[sp.line:sp.lineEnd], Time: sp.time})
	}
	err := a.spool.Append(ctx, b.recs)
	clear(b.recs) // the pool must not keep the buffers reachable twice
	if err != nil {
		a.metrics.spoolErrors.Inc()
		return 0, errors.Join(errSpool, err)
	}
	a.metrics.spooled.Add(float64(len(b.recs)))
	return len(b.recs), nil
}

// ingestStatsD converts StatsD lines to line protocol, then ingests them.
func (a *Agent) ingestStatsD(ctx context.Context, body []byte) error {
	b := a.normalizers.Get().(*ingestBatch)
	defer a.normalizers.Put(b)
	conv := b.conv[:0]
	bad := 0
	_ = lineproto.Lines(body, func(_ int, line []byte) error {
		out, err := lineproto.AppendStatsD(conv, line)
		if err != nil {
			bad++
			return nil
		}
		conv = out // already newline-terminated
		return nil
	})
	b.conv = conv
	if bad > 0 {
		a.metrics.received.WithLabelValues("statsd").Add(float64(bad))
		a.metrics.parseErrors.WithLabelValues("statsd").Add(float64(bad))
	}
	// ingest takes its own batch from the pool; b stays ours until then.
	_, _, err := a.ingest(ctx, "statsd", conv, lineproto.Nanosecond)
	return err
}

// reasonTypeConflict is the reason label of lines refused for a field type
// conflict in simtel_agent_samples_dropped_total.
const reasonTypeConflict = "field_type_conflict"

// refusalLogEvery is how often, at most, the agent logs the lines a
// listener refused without being able to tell the sender (UDP, TCP, unix
// socket, StatsD): a sender that gets a type wrong does so on every line.
const refusalLogEvery = 10 * time.Second

// refusalLog counts refused lines per listener between log lines.
type refusalLog struct {
	mu        sync.Mutex
	listeners map[string]*refusalCount
}

type refusalCount struct {
	logged         time.Time
	bad, conflicts int
}

// note counts lines a listener refused and logs them, with an example of
// each kind and the lines counted since the listener's last log line, unless
// that was less than refusalLogEvery ago.
func (l *refusalLog) note(log *slog.Logger, listener string, bad, conflicts int, firstBad *lineproto.LineError, firstConflict *typeConflict) {
	now := time.Now()
	l.mu.Lock()
	if l.listeners == nil {
		l.listeners = map[string]*refusalCount{}
	}
	c := l.listeners[listener]
	if c == nil {
		c = &refusalCount{}
		l.listeners[listener] = c
	}
	c.bad += bad
	c.conflicts += conflicts
	if !c.logged.IsZero() && now.Sub(c.logged) < refusalLogEvery {
		l.mu.Unlock()
		return
	}
	bad, conflicts = c.bad, c.conflicts
	c.logged, c.bad, c.conflicts = now, 0, 0
	l.mu.Unlock()
	attrs := []any{"listener", listener, "malformed", bad, "field_type_conflicts", conflicts}
	if firstBad != nil {
		attrs = append(attrs, "malformed_example", firstBad.Error())
	}
	if firstConflict != nil {
		attrs = append(attrs, "conflict_example", firstConflict.Error())
	}
	log.Warn("lines refused", attrs...)
}
