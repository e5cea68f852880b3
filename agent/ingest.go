package agent

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/simtel/simtel/agent/lineproto"
	"github.com/simtel/simtel/agent/spool"
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
	bad   int    // lines refused since reset
	// lastKey is where the key of the last sample starts in keys, or -1
	// before the first: consecutive samples of one run and host (nearly
	// all of them) share it.
	lastKey int
}

type recSpan struct {
	line, lineEnd, key, keyEnd int
	time                       int64
}

// errSpool marks a failure to store accepted samples (disk full, spool
// closed, backpressure timeout), as opposed to bad input.
var errSpool = errors.New("cannot spool samples")

// ingest normalizes the lines of body and appends the valid ones to the
// spool in one call. It returns how many lines were accepted, the first bad
// line (the others are only counted) and a spool error wrapping errSpool.
// Bad lines never stop the good ones, as in InfluxDB.
func (a *Agent) ingest(ctx context.Context, listener string, body []byte, prec lineproto.Precision) (int, *lineproto.LineError, error) {
	b := a.normalizers.Get().(*ingestBatch)
	defer a.normalizers.Put(b)
	b.reset()
	firstErr := b.add(body, prec, time.Now())
	n, err := a.spoolBatch(ctx, listener, b)
	return n, firstErr, err
}

func (b *ingestBatch) reset() {
	b.lines, b.keys, b.spans, b.bad, b.lastKey = b.lines[:0], b.keys[:0], b.spans[:0], 0, -1
}

// add normalizes the lines of body into b and returns the first bad one.
// Samples of one run and host share their key bytes.
func (b *ingestBatch) add(body []byte, prec lineproto.Precision, now time.Time) *lineproto.LineError {
	// Room for the body plus the tags the agent adds, grown once rather
	// than by doubling (the pool often comes back empty after a GC).
	b.lines = slices.Grow(b.lines, len(body)+len(body)/4)
	var firstErr *lineproto.LineError
	_ = lineproto.Lines(body, func(n int, line []byte) error {
		out, s, err := b.norm.Normalize(b.lines, line, prec, now)
		if err != nil {
			b.bad++
			if firstErr == nil {
				firstErr = lineproto.NewLineError(n, line, err)
			}
			return nil
		}
		b.lines = out
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

// keyIs reports whether key is run + "/" + host.
func keyIs(key, run, host []byte) bool {
	return len(key) == len(run)+1+len(host) && key[len(run)] == '/' &&
		string(key[:len(run)]) == string(run) && string(key[len(run)+1:]) == string(host)
}

// spoolBatch counts b's lines and appends its samples to the spool.
func (a *Agent) spoolBatch(ctx context.Context, listener string, b *ingestBatch) (int, error) {
	a.metrics.received.WithLabelValues(listener).Add(float64(len(b.spans) + b.bad))
	a.procs.add(time.Now(), len(b.spans)+b.bad)
	if b.bad > 0 {
		a.metrics.parseErrors.WithLabelValues(listener).Add(float64(b.bad))
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
