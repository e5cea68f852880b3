package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ProduceConfig configures Produce. Zero values take the defaults noted.
type ProduceConfig struct {
	// Client reaches the brokers, 127.0.0.1:9092 by default; its Progress
	// gets one line per second.
	Client
	// Topic to produce to. Required.
	Topic string
	// Partitions the topic is created with if it does not exist. An
	// existing topic is used as it is. Default 1.
	Partitions int32
	// RecordSize is the size of each record value in bytes (records have
	// no key). Default 1024.
	RecordSize int
	// Acks is "all", "1" or "0". Default "all".
	Acks string
	// Producers is the number of independent kgo clients, each with its
	// own connections and sending goroutine. Default 1.
	Producers int
	// Duration bounds the run by time. Exactly one of Duration and Records
	// is set.
	Duration time.Duration
	// Records bounds the run by the total number of records (split evenly
	// over the producers).
	Records int64
	// Linger is kgo's ProducerLinger. Default 0: a batch leaves as soon as
	// a request can be sent.
	Linger time.Duration
	// BatchMaxBytes is kgo's ProducerBatchMaxBytes. Default 1 MiB.
	BatchMaxBytes int32
	// MaxInflight is the number of produce requests in flight per broker
	// and client. kgo fixes it at 5 for idempotent producers, so any other
	// value needs NoIdempotence. Default: kgo's (5 idempotent, 1 otherwise).
	MaxInflight int
	// NoIdempotence turns kgo's idempotent producer (the default, as the
	// agent uses it) off. acks other than "all" imply it.
	NoIdempotence bool
	// Compression is none, snappy, lz4, zstd or gzip. Default none: record
	// values are random bytes, which do not compress.
	Compression string
	// Partitioner is "round-robin" (record by record over all partitions)
	// or "sticky" (a partition per batch). Default round-robin.
	Partitioner string
	// MaxBufferedRecords is kgo's MaxBufferedRecords per client: how many
	// records Produce accepts before it blocks. Latency is measured from
	// the Produce call, so at saturation this bounds the queueing part of
	// it. Default 10,000.
	MaxBufferedRecords int
	// Rate limits the total records per second over all producers. Default
	// 0: unlimited (closed loop, bounded by MaxBufferedRecords).
	Rate float64
	// Warmup is a first stretch of the run whose records are produced but
	// not measured: connecting, producer ids and the first batches are not
	// the steady state. It is part of Duration. Default 0.
	Warmup time.Duration
	// StallTimeout aborts the run when no record has been acknowledged for
	// this long, and is kgo's RecordDeliveryTimeout. Default 30 s.
	StallTimeout time.Duration
}

func (c ProduceConfig) withDefaults() ProduceConfig {
	c.Client = c.Client.withDefaults()
	c.Brokers = orDefaultBroker(c.Brokers)
	c.Partitions = cmp.Or(c.Partitions, 1)
	c.RecordSize = cmp.Or(c.RecordSize, 1024)
	c.Acks = cmp.Or(c.Acks, "all")
	c.Producers = cmp.Or(c.Producers, 1)
	c.BatchMaxBytes = cmp.Or(c.BatchMaxBytes, 1<<20)
	c.Compression = cmp.Or(c.Compression, "none")
	c.Partitioner = cmp.Or(c.Partitioner, "round-robin")
	c.MaxBufferedRecords = cmp.Or(c.MaxBufferedRecords, 10000)
	c.StallTimeout = cmp.Or(c.StallTimeout, 30*time.Second)
	if c.Acks != "all" {
		c.NoIdempotence = true
	}
	return c
}

// Validate reports the first setting that cannot work, after defaults.
func (c ProduceConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Topic == "":
		return errors.New("a topic is required")
	case c.Partitions < 1:
		return fmt.Errorf("partitions %d is not positive", c.Partitions)
	case c.RecordSize < 0:
		return fmt.Errorf("record size %d is negative", c.RecordSize)
	case c.Producers < 1:
		return fmt.Errorf("producers %d is not positive", c.Producers)
	case (c.Duration > 0) == (c.Records > 0):
		return errors.New("set exactly one of duration and records")
	case c.Duration < 0 || c.Records < 0:
		return errors.New("duration and records must not be negative")
	case c.Records > 0 && c.Records < int64(c.Producers):
		return fmt.Errorf("records %d is fewer than producers %d", c.Records, c.Producers)
	case c.BatchMaxBytes < 512 || c.BatchMaxBytes > 1<<30:
		return fmt.Errorf("batch max bytes %d is outside [512, 1 GiB]", c.BatchMaxBytes)
	case c.MaxInflight < 0:
		return fmt.Errorf("max in-flight %d is negative", c.MaxInflight)
	case !c.NoIdempotence && c.MaxInflight != 0 && c.MaxInflight != 5:
		return fmt.Errorf("max in-flight %d needs idempotence off: kgo sends 5 requests in flight per broker for an idempotent producer", c.MaxInflight)
	case c.MaxBufferedRecords < 1:
		return fmt.Errorf("max buffered records %d is not positive", c.MaxBufferedRecords)
	case c.Rate < 0:
		return fmt.Errorf("rate %g is negative", c.Rate)
	case c.StallTimeout < 0:
		return fmt.Errorf("stall timeout %s is negative", c.StallTimeout)
	case c.Warmup < 0 || (c.Duration > 0 && c.Warmup >= c.Duration):
		return fmt.Errorf("warmup %s is not within the duration %s", c.Warmup, c.Duration)
	}
	if err := checkProducerCodecs(c.Acks, c.Compression); err != nil {
		return err
	}
	if _, err := parsePartitioner(c.Partitioner); err != nil {
		return err
	}
	return nil
}

func parseAcks(s string) (kgo.Acks, error) {
	switch s {
	case "all", "-1":
		return kgo.AllISRAcks(), nil
	case "1":
		return kgo.LeaderAck(), nil
	case "0":
		return kgo.NoAck(), nil
	}
	return kgo.Acks{}, fmt.Errorf("acks %q is not all, 1 or 0", s)
}

func parseCompression(s string) (kgo.CompressionCodec, error) {
	switch s {
	case "none":
		return kgo.NoCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("compression %q is not none, snappy, lz4, zstd or gzip", s)
}

func parsePartitioner(s string) (kgo.Partitioner, error) {
	switch s {
	case "round-robin":
		return kgo.RoundRobinPartitioner(), nil
	case "sticky":
		return kgo.StickyPartitioner(), nil
	}
	return nil, fmt.Errorf("partitioner %q is not round-robin or sticky", s)
}

// ProduceResult is the outcome of Produce. Rates are over Elapsed, from the
// end of the warmup (or the first Produce call) to the last
// acknowledgement; MB is 10^6 bytes of record values. Records, Bytes and
// Latency count only records produced after the warmup.
type ProduceResult struct {
	Kind     string          `json:"kind"` // "produce"
	Settings ProduceSettings `json:"settings"`
	Records  int64           `json:"records"` // acknowledged
	Bytes    int64           `json:"bytes"`   // acknowledged value bytes
	Errors   int64           `json:"errors"`  // records that failed
	Warmup   int64           `json:"warmup_records,omitempty"`
	Elapsed  float64         `json:"elapsed_s"`
	RecPerS  float64         `json:"records_per_s"`
	MBPerS   float64         `json:"mb_per_s"`
	Latency  LatencySummary  `json:"latency"` // Produce call to promise, acknowledged records only
	// Timeline holds the acknowledged records per second of every whole
	// second of the run, warmup included.
	Timeline []float64        `json:"timeline_records_per_s"`
	Aborted  string           `json:"aborted,omitempty"`
	FirstErr string           `json:"first_error,omitempty"`
	Started  time.Time        `json:"started"`
	Producer []ProducerResult `json:"producers"`
}

// ProducerResult is one client's share of a run.
type ProducerResult struct {
	Records int64   `json:"records"`
	Errors  int64   `json:"errors"`
	P99US   int64   `json:"p99_us"`
	RecPerS float64 `json:"records_per_s"`
}

// ProduceSettings echoes the configuration a result was measured with.
type ProduceSettings struct {
	Brokers            []string `json:"brokers"`
	Topic              string   `json:"topic"`
	Partitions         int32    `json:"partitions"`
	RecordSize         int      `json:"record_size"`
	Acks               string   `json:"acks"`
	Producers          int      `json:"producers"`
	Duration           string   `json:"duration,omitempty"`
	Records            int64    `json:"records,omitempty"`
	Linger             string   `json:"linger"`
	BatchMaxBytes      int32    `json:"batch_max_bytes"`
	MaxInflight        int      `json:"max_inflight"`
	Idempotent         bool     `json:"idempotent"`
	Compression        string   `json:"compression"`
	Partitioner        string   `json:"partitioner"`
	MaxBufferedRecords int      `json:"max_buffered_records"`
	Rate               float64  `json:"rate,omitempty"`
	Warmup             string   `json:"warmup,omitempty"`
}

// Produce runs the load generator until the duration or record count is
// reached, the context is cancelled, a record fails, or acknowledgements
// stall. It returns the result so far together with any error, so a failed
// run still reports what it measured.
func Produce(ctx context.Context, cfg ProduceConfig) (*ProduceResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid produce configuration: %w", err)
	}
	cfg = cfg.withDefaults()
	res := &ProduceResult{Kind: "produce", Settings: cfg.settings()}

	// Set the topic up with an admin client of its own, so producers start
	// with a known partition count.
	admin, parts, err := setUpTopic(ctx, cfg.Brokers, cfg.ClientOpts, cfg.Logger, cfg.Topic, cfg.Partitions)
	if err != nil {
		return nil, err
	}
	admin.Close()
	res.Settings.Partitions = parts

	r, err := newProduceRun(cfg)
	if err != nil {
		return nil, err
	}
	defer r.close()
	r.run(ctx, res)
	if res.Aborted != "" {
		return res, errors.New(res.Aborted)
	}
	return res, nil
}

func (c ProduceConfig) settings() ProduceSettings {
	s := ProduceSettings{
		Brokers: c.Brokers, Topic: c.Topic, Partitions: c.Partitions, RecordSize: c.RecordSize,
		Acks: c.Acks, Producers: c.Producers, Records: c.Records, Linger: c.Linger.String(),
		BatchMaxBytes: c.BatchMaxBytes, MaxInflight: c.MaxInflight, Idempotent: !c.NoIdempotence,
		Compression: c.Compression, Partitioner: c.Partitioner,
		MaxBufferedRecords: c.MaxBufferedRecords, Rate: c.Rate,
	}
	if c.Duration > 0 {
		s.Duration = c.Duration.String()
	}
	if c.Warmup > 0 {
		s.Warmup = c.Warmup.String()
	}
	if s.MaxInflight == 0 {
		s.MaxInflight = 1
		if s.Idempotent {
			s.MaxInflight = 5
		}
	}
	return s
}

// produceRun is one run's shared state. Each producer has its own client,
// histogram and sending goroutine; the meter and the error fields are
// shared by all promises.
type produceRun struct {
	cfg       ProduceConfig
	producers []*producer
	payload   []byte // random bytes; record values are windows into it
	meter     meter  // every acknowledged record, for progress and stalls
	measured  meter  // acknowledged records produced after the warmup
	// measureFrom is the end of the warmup; set before senders start.
	measureFrom time.Time
	inflight    sync.Pool // *inflight, returned by promises

	errs     atomic.Int64
	firstErr atomic.Pointer[error]
	aborter
}

type producer struct {
	run    *produceRun
	cl     *kgo.Client
	lat    *Latency
	acked  atomic.Int64
	failed atomic.Int64
}

func newProduceRun(cfg ProduceConfig) (*produceRun, error) {
	r := &produceRun{cfg: cfg}
	r.inflight.New = func() any {
		f := &inflight{Context: context.Background()}
		f.rec.Context = f
		return f
	}
	r.payload = make([]byte, 1<<20+cfg.RecordSize)
	if _, err := rand.Read(r.payload); err != nil {
		return nil, fmt.Errorf("cannot make random payload: %w", err)
	}
	partitioner, _ := parsePartitioner(cfg.Partitioner)
	for i := range cfg.Producers {
		opts := append(producerOpts(clientOpts(cfg.Brokers, cfg.ClientOpts, cfg.Logger, fmt.Sprintf("simtel-bench-producer-%d", i)),
			cfg.Topic, cfg.Acks, cfg.Compression, cfg.Linger, cfg.MaxBufferedRecords, cfg.StallTimeout),
			kgo.RecordPartitioner(partitioner),
			kgo.ProducerBatchMaxBytes(cfg.BatchMaxBytes),
		)
		if cfg.NoIdempotence {
			opts = append(opts, kgo.DisableIdempotentWrite())
			if cfg.MaxInflight > 0 {
				opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(cfg.MaxInflight))
			}
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			r.close()
			return nil, fmt.Errorf("cannot create producer %d: %w", i, err)
		}
		r.producers = append(r.producers, &producer{run: r, cl: cl, lat: NewLatency()})
	}
	return r, nil
}

func (r *produceRun) close() {
	for _, p := range r.producers {
		p.cl.Close()
	}
}

// run produces and fills res. Goroutines: one sender per producer and one
// watcher; run returns after all of them have exited.
//
// The sending loops end by themselves when the duration or count is
// reached; hard, what Produce and Flush block on, is cancelled only to
// abort (caller cancelled, a record failed, acknowledgements stalled), so
// that records already handed to kgo are still acknowledged after a normal
// end.
func (r *produceRun) run(ctx context.Context, res *ProduceResult) {
	hard, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	defer cancel()

	res.Started = time.Now()
	r.measureFrom = res.Started.Add(r.cfg.Warmup)
	var end time.Time
	if r.cfg.Duration > 0 {
		end = res.Started.Add(r.cfg.Duration)
	}
	watchCtx, stopWatch := context.WithCancel(hard)
	w := &watch{
		label: "produce", out: r.cfg.Progress, interval: time.Second, m: &r.meter,
		stalled: func(idle time.Duration) error {
			if idle >= r.cfg.StallTimeout {
				return fmt.Errorf("no record acknowledged for %s", idle.Round(time.Second))
			}
			return nil
		},
		abort:  func(err error) { r.abort(err.Error()) },
		series: &res.Timeline,
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.run(watchCtx) })

	var senders sync.WaitGroup
	for i, p := range r.producers {
		quota := int64(-1)
		if r.cfg.Records > 0 {
			quota = r.cfg.Records / int64(len(r.producers))
			if int64(i) < r.cfg.Records%int64(len(r.producers)) {
				quota++
			}
		}
		senders.Go(func() { p.send(hard, quota, end) })
	}
	senders.Wait()
	// A count-bounded run may end before its warmup does: then nothing
	// was measured and every rate stays 0.
	elapsed := max(time.Since(r.measureFrom), 0)
	stopWatch()
	wg.Wait()

	all := NewLatency()
	for _, p := range r.producers {
		all.Merge(p.lat)
		pr := ProducerResult{Records: p.acked.Load(), Errors: p.failed.Load(), P99US: p.lat.Summary().P99US}
		if elapsed > 0 {
			pr.RecPerS = float64(pr.Records) / elapsed.Seconds()
		}
		res.Producer = append(res.Producer, pr)
	}
	res.Records = r.measured.records.Load()
	res.Bytes = r.measured.bytes.Load()
	res.Warmup = r.meter.records.Load() - res.Records
	res.Errors = r.errs.Load()
	res.Elapsed = elapsed.Seconds()
	if elapsed > 0 {
		res.RecPerS = float64(res.Records) / res.Elapsed
		res.MBPerS = float64(res.Bytes) / res.Elapsed / 1e6
	}
	res.Latency = all.Summary()
	if e := r.firstErr.Load(); e != nil {
		res.FirstErr = (*e).Error()
	}
	res.Aborted = r.aborted(ctx)
}

// send produces records until quota (if ≥ 0) or end (if set) is reached or
// ctx is done, then flushes. It runs on the producer's own goroutine.
func (p *producer) send(ctx context.Context, quota int64, end time.Time) {
	r := p.run
	size := r.cfg.RecordSize
	window := len(r.payload) - size
	var perProducerRate float64
	if r.cfg.Rate > 0 {
		perProducerRate = r.cfg.Rate / float64(len(r.producers))
	}
	start := time.Now()
	off := 0
	for sent := int64(0); quota < 0 || sent < quota; sent++ {
		now := time.Now()
		if ctx.Err() != nil || (!end.IsZero() && now.After(end)) {
			break
		}
		if perProducerRate > 0 {
			// Sleep when more than a millisecond ahead of schedule.
			due := start.Add(time.Duration(float64(sent) / perProducerRate * float64(time.Second)))
			if ahead := due.Sub(now); ahead > time.Millisecond {
				select {
				case <-time.After(ahead):
				case <-ctx.Done():
				}
				now = time.Now()
			}
		}
		f := r.inflight.Get().(*inflight)
		f.rec = kgo.Record{Value: r.payload[off : off+size], Context: f}
		f.start = now
		// A prime stride makes neighbouring records differ even when a
		// codec is chosen.
		off = (off + 4093) % (window + 1)
		p.cl.Produce(ctx, &f.rec, p.promise)
	}
	if err := p.cl.Flush(ctx); err != nil && ctx.Err() == nil {
		r.abort(fmt.Sprintf("cannot flush producer: %v", err))
	}
}

// inflight is a record on its way, with the time of its Produce call.
// The record's Context points back to it, so the promise finds the start
// time without a map; kgo's own Timestamp is cut to milliseconds and loses
// the monotonic clock, so it cannot serve. Background is never done, so the
// context cancels nothing.
type inflight struct {
	context.Context
	rec   kgo.Record
	start time.Time
}

// promise is called by kgo, serially per client, once per record.
func (p *producer) promise(rec *kgo.Record, err error) {
	r := p.run
	f := rec.Context.(*inflight)
	if err != nil {
		p.failed.Add(1)
		if r.errs.Add(1) == 1 {
			r.firstErr.Store(&err)
		}
		r.abort(fmt.Sprintf("record failed: %v", err))
	} else {
		r.meter.records.Add(1)
		r.meter.bytes.Add(int64(len(rec.Value)))
		if !f.start.Before(r.measureFrom) {
			p.lat.Record(time.Since(f.start))
			p.acked.Add(1)
			r.measured.records.Add(1)
			r.measured.bytes.Add(int64(len(rec.Value)))
		}
	}
	f.rec.Value = nil
	r.inflight.Put(f)
}
