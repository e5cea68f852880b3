package replay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ParseSpeed reads a --speed value: "max" (no waiting), or a factor such as
// "10x", "1x", "0.5x" (the x is optional).
func ParseSpeed(s string) (float64, error) {
	if s == "max" || s == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "x"), 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("speed %q is not max or a positive factor such as 1x or 10x", s)
	}
	return f, nil
}

// Pacer spaces samples out like the original: a sample that came d after
// the first one is released d/Speed after the replay started. Speed 0
// never waits.
type Pacer struct {
	Speed float64
	first int64
	start time.Time
}

// Wait blocks until the sample at time t (Unix ns) is due.
func (p *Pacer) Wait(ctx context.Context, t int64) error {
	if p.Speed <= 0 {
		return nil
	}
	if p.start.IsZero() {
		p.first, p.start = t, time.Now()
		return nil
	}
	due := p.start.Add(time.Duration(float64(t-p.first) / p.Speed))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Delay is how long Wait(t) would block now (0 before the first sample).
func (p *Pacer) Delay(t int64) time.Duration {
	if p.Speed <= 0 || p.start.IsZero() {
		return 0
	}
	return max(0, time.Until(p.start.Add(time.Duration(float64(t-p.first)/p.Speed))))
}

// LineWriter writes samples as line protocol, one per line.
type LineWriter struct {
	w   *bufio.Writer
	buf []byte
	// FlushEach flushes after every line (when pacing, so lines appear when
	// they are due rather than when the buffer fills).
	FlushEach bool
}

// NewLineWriter buffers output to w.
func NewLineWriter(w io.Writer) *LineWriter {
	return &LineWriter{w: bufio.NewWriterSize(w, 256<<10)}
}

// Write writes one sample.
func (lw *LineWriter) Write(s *Sample) error {
	var err error
	lw.buf, err = AppendLine(lw.buf[:0], s)
	if err != nil {
		return err
	}
	lw.buf = append(lw.buf, '\n')
	if _, err := lw.w.Write(lw.buf); err != nil {
		return err
	}
	if lw.FlushEach {
		return lw.w.Flush()
	}
	return nil
}

// Flush writes out what is buffered.
func (lw *LineWriter) Flush() error { return lw.w.Flush() }

// Producer produces into one topic with an idempotent producer, in the
// order it is given records (per partition), and counts acknowledgements.
type Producer struct {
	cl    *kgo.Client
	topic string
	acked atomic.Int64
	fail  firstFailure
	buf   []byte
}

// NewProducer connects to brokers, with opts added (TLS, SASL). Records of
// one key keep their order: the default partitioner sends a key to one
// partition and the idempotent producer keeps each partition's order
// across retries.
func NewProducer(brokers []string, topic string, opts ...kgo.Opt) (*Producer, error) {
	if topic == "" {
		return nil, fmt.Errorf("no topic to produce to")
	}
	// No RecordDeliveryTimeout: the client measures it from the record
	// timestamp, which is the original sample time here.
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(5 * time.Millisecond)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot create a producer for %v: %w", brokers, err)
	}
	return &Producer{cl: cl, topic: topic}, nil
}

func (p *Producer) done(_ *kgo.Record, err error) {
	if err != nil {
		p.fail.keep(produceErr(p.topic, err))
		return
	}
	p.acked.Add(1)
}

// firstFailure keeps the first delivery failure of a producer, which every
// later call returns.
type firstFailure struct {
	mu  sync.Mutex
	err error
}

func (f *firstFailure) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// keep records err unless a failure is kept already.
func (f *firstFailure) keep(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

// produceErr is a failed delivery to topic.
func produceErr(topic string, err error) error {
	return fmt.Errorf("cannot produce to topic %s (does it exist? create it with `simtel topic create %s`): %w", topic, topic, err)
}

// Record produces rec (its Topic is set to the producer's topic).
func (p *Producer) Record(ctx context.Context, rec *kgo.Record) error {
	if err := p.fail.get(); err != nil {
		return err
	}
	rec.Topic = p.topic
	p.cl.Produce(ctx, rec, p.done)
	return nil
}

// Sample produces s as its line with key "<run>/<host>" and the sample time
// as the record timestamp, as the agent does.
func (p *Producer) Sample(ctx context.Context, s *Sample) error {
	rec, err := sampleRecord(s)
	if err != nil {
		return err
	}
	return p.Record(ctx, rec)
}

// sampleRecord is the record the agent would produce for s: its line, key
// "<run>/<host>" and the sample time as the record timestamp.
func sampleRecord(s *Sample) (*kgo.Record, error) {
	line, err := AppendLine(nil, s)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{
		Key:       []byte(s.Tags["run"] + "/" + s.Tags["host"]),
		Value:     line,
		Timestamp: time.Unix(0, s.Time),
	}, nil
}

// Acked is how many records the broker has acknowledged so far.
func (p *Producer) Acked() int64 { return p.acked.Load() }

// Close waits for every record to be acknowledged and returns how many
// were, with the first delivery error.
func (p *Producer) Close(ctx context.Context) (int64, error) {
	ferr := p.cl.Flush(ctx)
	p.cl.Close()
	if err := p.fail.get(); err != nil {
		return p.acked.Load(), err
	}
	if ferr != nil {
		return p.acked.Load(), fmt.Errorf("cannot finish producing to %s: %w", p.topic, ferr)
	}
	return p.acked.Load(), nil
}
