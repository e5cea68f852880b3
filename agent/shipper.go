package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/agent/spool"
)

// The shipper moves records from the spool to the broker:
//
//  1. the reader takes a batch from the spool and hands every record to the
//     idempotent producer (which batches, compresses and retries forever);
//  2. the batch goes on the inflight queue (bounded, so at most a few
//     batches are read ahead of the acknowledgements);
//  3. the acker takes batches in order, waits until all their records are
//     acknowledged, and acks the batch's spool position.
//
// Acks happen in spool order, so after a crash the spool resends from the
// last acked position: at-least-once. Within one agent life the producer's
// idempotence keeps retries from duplicating records.

type inflight struct {
	// The batch is the Context of its kgo.Records, so one promise function
	// finds its batch without a closure per record. Background never ends,
	// so the producer never cancels a record through it.
	context.Context

	recs    []spool.Record
	krecs   []kgo.Record
	pos     spool.Pos
	pending atomic.Int64
	done    chan struct{}
	started time.Time

	mu       sync.Mutex
	rejected int   // records the broker refused for good (e.g. too large)
	failed   error // any other failure: the batch must be sent again
}

// At most inflightBatches spool batches of up to readBatchRecords /
// readBatchBytes are read ahead of the broker's acknowledgements: this
// bounds the shipper's memory at 2 MiB of samples plus their kgo.Records
// (about 170 bytes each, more than a sample). 16k samples in flight keep
// the producer busy at a million samples a second as long as a batch
// takes under 16 ms from hand-over to acknowledgement (a few ms on an idle
// machine; on a loaded one the spool absorbs what the broker cannot take
// at once). Batches of 4096 samples held 5 MiB more of heap at that rate
// for no gain in CPU.
//
// When the reader has read everything spooled and samples arrived at a
// rate at which Linger gathers fewer than gatherRecords (one pipeline
// full), it lets them gather in the spool for Linger (readLoop).
const (
	inflightBatches  = 8
	readBatchRecords = 2048
	readBatchBytes   = 256 << 10
	gatherRecords    = inflightBatches * readBatchRecords
)

// batchPool recycles inflight batches and their kgo.Records once acked:
// a batch's records are 4096 structs of pointers, and allocating them per
// batch made the GC scan and clear megabytes per second at high rates.
// The producer does not touch a record after its promise returned, and a
// batch is only recycled after its last promise (done is closed).
type batchPool struct {
	free chan *inflight
}

func newBatchPool() *batchPool {
	return &batchPool{free: make(chan *inflight, inflightBatches+2)}
}

func (p *batchPool) get() *inflight {
	select {
	case b := <-p.free:
		return b
	default:
		return &inflight{Context: context.Background()}
	}
}

func (p *batchPool) put(b *inflight) {
	b.recs = nil
	clear(b.krecs) // drop references to spool buffers and contexts
	b.rejected, b.failed = 0, nil
	select {
	case p.free <- b:
	default:
	}
}

// ship runs the pipeline until ctx ends. If a batch fails in a way that
// is not the broker refusing a record for good (the producer retries
// everything retriable forever, so this means the client is closing or
// something unexpected), the pipeline stops, waits for what is in flight,
// rewinds the spool to the last acked position and starts again: nothing
// unacknowledged is skipped.
func (a *Agent) ship(ctx context.Context) {
	for {
		err := a.shipOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("restarting shipping from the last acknowledged sample", "err", err)
		a.spool.Rewind()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (a *Agent) shipOnce(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	queue := make(chan *inflight, inflightBatches)
	pool := newBatchPool()
	ackErr := make(chan error, 1)
	go func() { ackErr <- a.ackLoop(queue, pool, cancel) }()
	readErr := a.readLoop(ctx, queue, pool)
	close(queue)
	err := <-ackErr
	if err == nil {
		err = readErr
	}
	return err
}

// readLoop hands spool batches to the producer until ctx ends.
func (a *Agent) readLoop(ctx context.Context, queue chan<- *inflight, pool *batchPool) error {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	rate := newRateWindow(time.Now(), a.cfg.Linger)
	for {
		recs, pos, err := a.spool.Read(ctx, readBatchRecords, readBatchBytes)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, spool.ErrClosed) {
				return err
			}
			a.log.Error("cannot read spool", "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		b := pool.get()
		b.recs, b.pos, b.done, b.started = recs, pos, make(chan struct{}), time.Now()
		b.pending.Store(int64(len(recs)))
		if cap(b.krecs) < len(recs) {
			b.krecs = make([]kgo.Record, len(recs))
		}
		b.krecs = b.krecs[:len(recs)]
		for i := range recs {
			r := &b.krecs[i]
			r.Key, r.Value, r.Timestamp, r.Context = recs[i].Key, recs[i].Value, time.Unix(0, recs[i].Time), b
			// Produce with the long-lived context: a record once handed
			// over is finished by the producer even when this loop stops.
			a.client.Produce(context.Background(), r, a.promise)
		}
		queue <- b // never blocks past ackLoop, which drains until close
		now := time.Now()
		rate.add(now, len(recs))
		if a.spool.AppendedAfter(pos) != 0 {
			continue // more is spooled: the next reads join these in the producer
		}
		// The spool is drained: nothing will join these records within
		// the producer's linger, so send them now rather than wake again
		// when the linger ends.
		a.sendNow()
		// At low rates every HTTP write or gathered bunch of datagrams
		// would otherwise become its own spool read, produce request and
		// ack, each a burst of work that wakes several goroutines and
		// threads (a burst costs the agent about a millisecond of CPU
		// whatever its size, docs/agent.md "CPU"). Gathering for Linger
		// instead makes one of each per Linger. At higher rates bursts
		// follow each other anyway, and waiting would only delay.
		if rate.perSecond(now)*a.cfg.Linger.Seconds() < gatherRecords {
			t.Reset(a.cfg.Linger)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

// rateWindow estimates the rate at which the shipper reads samples over
// the last one to two spans: the count and length of the last complete
// span plus the current one.
type rateWindow struct {
	span    time.Duration
	start   time.Time
	n       int
	prevN   int
	prevDur time.Duration
}

func newRateWindow(now time.Time, span time.Duration) *rateWindow {
	return &rateWindow{span: max(span, time.Millisecond), start: now}
}

// add counts n samples read at now.
func (w *rateWindow) add(now time.Time, n int) {
	w.n += n
	if d := now.Sub(w.start); d >= w.span {
		w.prevN, w.prevDur = w.n, d
		w.n, w.start = 0, now
	}
}

// recentPerSecond is the rate of the current span alone once it has
// lasted minSpan (0 before): it sees a step up sooner than perSecond.
func (w *rateWindow) recentPerSecond(now time.Time, minSpan time.Duration) float64 {
	d := now.Sub(w.start)
	if d < minSpan || d <= 0 {
		return 0
	}
	return float64(w.n) / d.Seconds()
}

// perSecond is the rate over the window up to now.
func (w *rateWindow) perSecond(now time.Time) float64 {
	d := w.prevDur + now.Sub(w.start)
	if d <= 0 {
		return 0
	}
	return float64(w.prevN+w.n) / d.Seconds()
}

// sendNow makes the producer send what it holds without waiting for its
// linger to end. Flush with a context that has already ended does just
// that: it ends every linger, starts the sends and returns at once
// instead of waiting for the acknowledgements (the ack loop does).
func (a *Agent) sendNow() {
	_ = a.client.Flush(a.ended)
}

// producerLinger is the producer's linger for the agent's Linger: short,
// because the shipper has gathered already (readLoop), but long enough
// that the records of one hand-over, and at high rates of several, go out
// in one batch.
func producerLinger(linger time.Duration) time.Duration {
	return min(linger, 5*time.Millisecond)
}

// promise is called by the producer once per record.
func (a *Agent) onRecord(r *kgo.Record, err error) {
	b := r.Context.(*inflight)
	if err != nil {
		b.mu.Lock()
		if permanentlyRefused(err) {
			b.rejected++
			if b.rejected == 1 {
				a.log.Error("broker refused a sample for good; it is dropped", "err", err, "bytes", len(r.Value))
			}
		} else if b.failed == nil {
			b.failed = err
		}
		b.mu.Unlock()
	}
	if b.pending.Add(-1) == 0 {
		close(b.done)
	}
}

// permanentlyRefused reports errors that sending again cannot fix.
func permanentlyRefused(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.CorruptMessage, kerr.InvalidRecord, kerr.InvalidTopicException} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ackLoop acknowledges batches in spool order. After a failure it keeps
// draining (waiting for the producer to finish every record in flight) but
// acks nothing more, and returns the failure.
//
// The batches of one hand-over are usually acknowledged by one produce
// response; the ones already finished when the first is are acknowledged
// in the spool together, with one Ack. One Ack writes the cursor at once;
// the later Acks of the same round came within the spool's checkpoint
// interval and made its flusher wake once more to write it.
func (a *Agent) ackLoop(queue <-chan *inflight, pool *batchPool, stopReading context.CancelFunc) error {
	var failure error
	var next *inflight // received from queue, not finished yet
	var group []*inflight
	for {
		b := next
		next = nil
		if b == nil {
			var ok bool
			if b, ok = <-queue; !ok {
				return failure
			}
		}
		<-b.done
		if failure != nil {
			pool.put(b)
			continue
		}
		if err := b.err(); err != nil {
			failure = err
			stopReading()
			pool.put(b)
			continue
		}
		group = append(group[:0], b)
	more:
		for {
			select {
			case n, ok := <-queue:
				if !ok {
					break more
				}
				select {
				case <-n.done:
					if n.err() == nil {
						group = append(group, n)
						continue
					}
				default:
				}
				next = n // unfinished or failed: the outer loop handles it
				break more
			default:
				break more
			}
		}
		if err := a.spool.Ack(group[len(group)-1].pos); err != nil {
			a.log.Error("cannot acknowledge spool position", "err", err)
		}
		for _, g := range group {
			g.mu.Lock()
			rejected := g.rejected
			g.mu.Unlock()
			a.metrics.sent.Add(float64(len(g.recs) - rejected))
			if rejected > 0 {
				a.metrics.dropped.WithLabelValues("rejected_by_broker").Add(float64(rejected))
			}
			a.metrics.batchLatency.Observe(time.Since(g.started).Seconds())
			pool.put(g)
		}
		clear(group)
	}
}

// err is the failure of a finished batch that must be sent again, if any.
func (b *inflight) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failed
}

// kgoLogger sends franz-go's warnings and errors to slog.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		k.l.Error(msg, keyvals...)
	case kgo.LogLevelWarn:
		k.l.Warn(msg, keyvals...)
	default:
		k.l.Debug(msg, keyvals...)
	}
}
