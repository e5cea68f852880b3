package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// E2EConfig configures E2E, the produce → consume latency benchmark.
// Zero values take the defaults noted.
type E2EConfig struct {
	// Client reaches the brokers, 127.0.0.1:9092 by default; its Progress
	// gets one line per second.
	Client
	// Topic to produce to and read from; created with Partitions if it
	// does not exist. Records of earlier runs in it are skipped. Required.
	Topic string
	// Partitions the topic is created with. Default 1.
	Partitions int32
	// RecordSize is the bytes of each record's value, at least
	// E2EHeaderSize (the header carries the send time). Default 1024.
	RecordSize int
	// Acks is "all" (default, idempotent producer), "1" or "0".
	Acks string
	// Producers is the number of independent producing clients, each
	// sending Rate/Producers records per second. Default 1.
	Producers int
	// Consumers is the number of independent consuming clients; the
	// partitions are split over them. Default 1.
	Consumers int
	// Rate is the total records per second the producers send, on a
	// fixed schedule whatever the broker does. Required, > 0.
	Rate float64
	// Duration is how long records are sent, warmup included. Required.
	Duration time.Duration
	// Warmup is the first part of Duration whose records are sent and
	// checked for delivery but not measured. Default 0.
	Warmup time.Duration
	// Linger is how long a partition's batch waits for more records in
	// the producer. Default 0: send at once, as a latency test wants.
	Linger time.Duration
	// Compression is none (default), snappy, lz4, zstd or gzip.
	Compression string
	// MaxBufferedRecords per producer client before Produce blocks (the
	// wait then counts as latency). Default 10,000.
	MaxBufferedRecords int
	// DrainTimeout is how long after the last send the consumers may take
	// to receive every acknowledged record. Default 10 s.
	DrainTimeout time.Duration
	// StallTimeout aborts the run when no record was delivered for this
	// long while sending, and fails records not acknowledged within it.
	// Default 30 s.
	StallTimeout time.Duration
}

// E2EHeaderSize is the smallest record E2E sends: every value starts with
// the run's id (8 bytes), the send time in nanoseconds since the run began
// (8), the producer's index (4) and the record's sequence number within
// its producer (8), big-endian. The rest of the value is random bytes.
const E2EHeaderSize = 28

// e2eMaxRecords bounds rate × duration: the delivery check keeps two bits
// per record that can be sent (1.25 GB of bitsets at this bound).
const e2eMaxRecords = 5e9

func (c E2EConfig) withDefaults() E2EConfig {
	c.Client = c.Client.withDefaults()
	c.Brokers = orDefaultBroker(c.Brokers)
	c.Partitions = cmp.Or(c.Partitions, 1)
	c.RecordSize = cmp.Or(c.RecordSize, 1024)
	c.Acks = cmp.Or(c.Acks, "all")
	c.Producers = cmp.Or(c.Producers, 1)
	c.Consumers = cmp.Or(c.Consumers, 1)
	c.Compression = cmp.Or(c.Compression, "none")
	c.MaxBufferedRecords = cmp.Or(c.MaxBufferedRecords, 10000)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 10*time.Second)
	c.StallTimeout = cmp.Or(c.StallTimeout, 30*time.Second)
	return c
}

// Validate reports the first setting that cannot work, after defaults.
func (c E2EConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Topic == "":
		return errors.New("a topic is required")
	case c.Partitions < 1:
		return fmt.Errorf("partitions %d is not positive", c.Partitions)
	case c.RecordSize < E2EHeaderSize:
		return fmt.Errorf("record size %d is below %d, the header that carries the send time", c.RecordSize, E2EHeaderSize)
	case c.Producers < 1:
		return fmt.Errorf("producers %d is not positive", c.Producers)
	case c.Consumers < 1:
		return fmt.Errorf("consumers %d is not positive", c.Consumers)
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate %g is not a positive number of records per second: the end-to-end test sends on a fixed schedule", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("duration %s is not positive", c.Duration)
	case c.Warmup < 0 || c.Warmup >= c.Duration:
		return fmt.Errorf("warmup %s is not within the duration %s", c.Warmup, c.Duration)
	case c.Linger < 0:
		return fmt.Errorf("linger %s is negative", c.Linger)
	case c.MaxBufferedRecords < 1:
		return fmt.Errorf("max buffered records %d is not positive", c.MaxBufferedRecords)
	case c.DrainTimeout < 0 || c.StallTimeout < 0:
		return errors.New("drain and stall timeouts must not be negative")
	case c.Rate*(c.Duration.Seconds()+1) > e2eMaxRecords:
		return fmt.Errorf("rate %g for %s is more than %g records, which the delivery check cannot track", c.Rate, c.Duration, float64(e2eMaxRecords))
	}
	return checkProducerCodecs(c.Acks, c.Compression)
}

// E2EResult is the outcome of E2E. Counts are records; "measured" records
// are those sent after the warmup. Latency is from the send time (see
// E2E) to the poll that delivered the record to a consumer.
type E2EResult struct {
	Kind     string      `json:"kind"` // "e2e"
	Settings E2ESettings `json:"settings"`
	// Sent is every record handed to a producer, warmup included;
	// Acked and Failed split them by the producer's outcome.
	Sent   int64 `json:"sent"`
	Acked  int64 `json:"acked"`
	Failed int64 `json:"failed"`
	// Delivered counts distinct records of this run that reached a
	// consumer; Duplicates the further copies; Lost the acknowledged
	// records not delivered by the end of the drain; Foreign the records
	// of other runs (or other writers) in the topic, skipped.
	Delivered  int64 `json:"delivered"`
	Duplicates int64 `json:"duplicates"`
	Lost       int64 `json:"lost"`
	Foreign    int64 `json:"foreign"`
	// Complete: every acknowledged record was delivered.
	Complete bool `json:"complete"`
	// Elapsed is the measured sending time: from the end of the warmup to
	// the end of the schedule.
	Elapsed float64 `json:"elapsed_s"`
	// SentPerS is measured records sent over Elapsed (the schedule asks
	// for Settings.Rate); DeliveredPerS and DeliveredMBPerS (10^6 bytes
	// of values) are measured records delivered over the time from the
	// end of the warmup to the last delivery.
	SentPerS        float64 `json:"sent_per_s"`
	DeliveredPerS   float64 `json:"delivered_per_s"`
	DeliveredMBPerS float64 `json:"delivered_mb_per_s"`
	// Behind counts records sent more than a millisecond after their
	// scheduled time (the producer was blocked or starved of CPU);
	// MaxSendLagMS is the largest such delay. Their latency is measured
	// from the scheduled time, so the delay is part of it.
	Behind       int64   `json:"behind"`
	MaxSendLagMS float64 `json:"max_send_lag_ms"`
	// DrainS is the time from the end of the schedule until the last
	// acknowledged record was delivered (or the drain timed out).
	DrainS float64 `json:"drain_s"`
	// Latency: send → delivered to a consumer, measured records.
	Latency LatencySummary `json:"latency"`
	// AckLatency: send → acknowledged to the producer, measured records.
	AckLatency LatencySummary `json:"ack_latency"`
	// Timeline holds delivered records per second of every whole second.
	Timeline []float64 `json:"timeline_delivered_per_s"`
	Aborted  string    `json:"aborted,omitempty"`
	FirstErr string    `json:"first_error,omitempty"`
	Started  time.Time `json:"started"`
}

// E2ESettings echoes the configuration a result was measured with.
type E2ESettings struct {
	Brokers            []string `json:"brokers"`
	Topic              string   `json:"topic"`
	Partitions         int32    `json:"partitions"`
	RecordSize         int      `json:"record_size"`
	Acks               string   `json:"acks"`
	Idempotent         bool     `json:"idempotent"`
	Producers          int      `json:"producers"`
	Consumers          int      `json:"consumers"`
	Rate               float64  `json:"rate"`
	Duration           string   `json:"duration"`
	Warmup             string   `json:"warmup,omitempty"`
	Linger             string   `json:"linger"`
	Compression        string   `json:"compression"`
	MaxBufferedRecords int      `json:"max_buffered_records"`
	DrainTimeout       string   `json:"drain_timeout"`
}

func (c E2EConfig) settings() E2ESettings {
	s := E2ESettings{
		Brokers: c.Brokers, Topic: c.Topic, Partitions: c.Partitions, RecordSize: c.RecordSize,
		Acks: c.Acks, Idempotent: c.Acks == "all" || c.Acks == "-1", Producers: c.Producers,
		Consumers: c.Consumers, Rate: c.Rate, Duration: c.Duration.String(), Linger: c.Linger.String(),
		Compression: c.Compression, MaxBufferedRecords: c.MaxBufferedRecords, DrainTimeout: c.DrainTimeout.String(),
	}
	if c.Warmup > 0 {
		s.Warmup = c.Warmup.String()
	}
	return s
}

// E2E sends records at a fixed rate and measures, for each, the time from
// its send to its delivery to a consumer reading the same topic, and
// checks that every acknowledged record arrives exactly once.
//
// The send time is the record's scheduled time, or the time of the
// Produce call if that is earlier: a producer that falls behind (blocked
// by a full buffer, or starved of CPU) does not hide the delay from the
// latency, as it would if the clock started only when it got round to
// sending. Times are taken from one monotonic clock, so producers and
// consumers must run in this process.
//
// Consumers are assigned the partitions directly, starting at the end
// offsets the partitions have before the first send. The run ends after
// Duration plus the drain; it returns the result so far together with
// any error (abort, lost records), so a failed run still reports what it
// measured.
func E2E(ctx context.Context, cfg E2EConfig) (*E2EResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid e2e configuration: %w", err)
	}
	cfg = cfg.withDefaults()
	res := &E2EResult{Kind: "e2e", Settings: cfg.settings()}

	admin, parts, err := setUpTopic(ctx, cfg.Brokers, cfg.ClientOpts, cfg.Logger, cfg.Topic, cfg.Partitions)
	if err != nil {
		return nil, err
	}
	var infos []partitionInfo
	// A topic just created may take a moment to appear in metadata (and
	// in a cluster, on every broker): retry for a few seconds.
	for wait := time.Now().Add(10 * time.Second); err == nil; {
		_, infos, err = describeTopic(ctx, kadm.NewClient(admin), cfg.Topic)
		if err == nil || time.Now().After(wait) || ctx.Err() != nil {
			break
		}
		err = nil
		time.Sleep(100 * time.Millisecond)
	}
	admin.Close()
	if err != nil {
		return nil, err
	}
	res.Settings.Partitions = parts
	if len(infos) < cfg.Consumers {
		cfg.Logger.Warn("more consumers than partitions; some consumers stay idle", "consumers", cfg.Consumers, "partitions", len(infos))
	}

	r, err := newE2ERun(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.startConsumers(infos); err != nil {
		return nil, err
	}
	r.run(res)
	switch {
	case res.Aborted != "":
		return res, errors.New(res.Aborted)
	case res.Lost > 0 && cfg.Acks != "0":
		return res, fmt.Errorf("%d acknowledged records were not delivered within the drain timeout of %s", res.Lost, cfg.DrainTimeout)
	}
	return res, nil
}

// e2eRun is one run's shared state. Producers and consumers each own a
// client and a histogram; the counters below are shared.
type e2eRun struct {
	cfg    E2EConfig
	caller context.Context
	runID  uint64
	// epoch is the zero of the send times in record headers, taken before
	// any goroutine starts; it carries Go's monotonic clock, so wall-clock
	// steps do not move latencies.
	epoch time.Time
	// start is when the schedule begins (after the consumers connected),
	// in nanoseconds since epoch; records stamped before warmupNS are not
	// measured. Both are set before the senders start.
	start      int64
	warmupNS   atomic.Int64 // read by the consumers, which start earlier
	payload    []byte
	payloadOff atomic.Int64
	perCap     int64 // sequence numbers a producer may use

	producers []*e2eProducer
	consumers []*e2eConsumer
	pool      sync.Pool // *e2eRecord

	sent, acked, failed       atomic.Int64
	measuredSent              atomic.Int64
	delivered                 meter // records only: the progress watch reads it
	dups, foreign             atomic.Int64
	measuredDelivered, mBytes atomic.Int64
	lastDelivery              atomic.Int64 // ns since epoch
	behind, maxLagNS          atomic.Int64
	firstErr                  atomic.Pointer[error]

	// hard is cancelled (by aborter.cancel) to abort: by the caller, a
	// failure, a stall or the drain timeout. Produce and Flush block on it.
	hard context.Context
	aborter
	// consumeCtx (a child of hard) stops the consumers.
	consumeCtx    context.Context
	stopConsumers context.CancelFunc
	consumerWG    sync.WaitGroup
}

type e2eProducer struct {
	idx     uint32
	cl      *kgo.Client
	lat     *Latency // ack latency
	promise func(*kgo.Record, error)
	// acked and seen are bitsets over the producer's sequence numbers:
	// acknowledged by the broker, delivered to a consumer.
	acked, seen []atomic.Uint64
}

type e2eConsumer struct {
	cl  *kgo.Client
	lat *Latency
}

// e2eRecord is a record on its way with its value buffer, reused. The
// record's Context points back to it, so the promise finds the buffer
// without a map or a closure per record; Background is never done, so the
// context cancels nothing.
type e2eRecord struct {
	context.Context
	rec kgo.Record
	buf []byte
}

// newE2ERun creates the producers; the run is aborted when ctx is done.
func newE2ERun(ctx context.Context, cfg E2EConfig) (*e2eRun, error) {
	r := &e2eRun{cfg: cfg, caller: ctx, epoch: time.Now()}
	r.hard, r.cancel = context.WithCancel(ctx)
	r.consumeCtx, r.stopConsumers = context.WithCancel(r.hard)
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("cannot make a run id: %w", err)
	}
	r.runID = binary.BigEndian.Uint64(id[:])
	r.payload = make([]byte, 64<<10+cfg.RecordSize)
	if _, err := rand.Read(r.payload); err != nil {
		return nil, fmt.Errorf("cannot make random payload: %w", err)
	}
	// A producer sends at most rate/producers × duration records on its
	// schedule; the margin covers rounding.
	r.perCap = int64(math.Ceil(cfg.Rate/float64(cfg.Producers)*cfg.Duration.Seconds())) + 2
	r.pool.New = func() any {
		e := &e2eRecord{Context: context.Background(), buf: make([]byte, cfg.RecordSize)}
		// Each buffer gets its own window of random bytes once, so values
		// differ when a codec is chosen (a prime stride).
		off := r.payloadOff.Add(4093) % int64(len(r.payload)-cfg.RecordSize+1)
		copy(e.buf, r.payload[off:])
		return e
	}
	words := (r.perCap + 63) / 64
	for i := range cfg.Producers {
		opts := append(producerOpts(clientOpts(cfg.Brokers, cfg.ClientOpts, cfg.Logger, fmt.Sprintf("simtel-bench-e2e-producer-%d", i)),
			cfg.Topic, cfg.Acks, cfg.Compression, cfg.Linger, cfg.MaxBufferedRecords, cfg.StallTimeout),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		)
		if !r.cfg.settings().Idempotent {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			r.close()
			return nil, fmt.Errorf("cannot create producer %d: %w", i, err)
		}
		p := &e2eProducer{idx: uint32(i), cl: cl, lat: NewLatency(),
			acked: make([]atomic.Uint64, words), seen: make([]atomic.Uint64, words)}
		p.promise = func(rec *kgo.Record, err error) { r.promise(p, rec.Context.(*e2eRecord), err) }
		r.producers = append(r.producers, p)
	}
	return r, nil
}

// close stops and waits for the consumers and closes every client.
func (r *e2eRun) close() {
	r.cancel()
	r.consumerWG.Wait()
	for _, p := range r.producers {
		p.cl.Close()
	}
	for _, c := range r.consumers {
		c.cl.Close()
	}
}

// startConsumers creates one client per consumer, assigned its share of
// the partitions at their current end offsets, connects it, and starts its
// polling goroutine. The goroutines run until stopConsumers; close waits
// for them.
func (r *e2eRun) startConsumers(parts []partitionInfo) error {
	for i := range r.cfg.Consumers {
		offsets := map[int32]kgo.Offset{}
		for j := i; j < len(parts); j += r.cfg.Consumers {
			offsets[parts[j].partition] = kgo.NewOffset().At(parts[j].end)
		}
		if len(offsets) == 0 {
			continue
		}
		cl, err := kgo.NewClient(append(clientOpts(r.cfg.Brokers, r.cfg.ClientOpts, r.cfg.Logger, fmt.Sprintf("simtel-bench-e2e-consumer-%d", i)),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.Topic: offsets}),
			kgo.FetchMaxWait(time.Second),
		)...)
		if err != nil {
			return fmt.Errorf("cannot create consumer %d: %w", i, err)
		}
		c := &e2eConsumer{cl: cl, lat: NewLatency()}
		r.consumers = append(r.consumers, c)
		// Connect before the schedule starts, so that the first records
		// do not wait for a connection.
		if err := cl.Ping(r.hard); err != nil {
			return fmt.Errorf("consumer %d cannot reach the brokers: %w", i, err)
		}
		r.consumerWG.Go(func() { r.poll(c) })
	}
	return nil
}

// run sends on the schedule, waits for the deliveries and fills res.
// Goroutines: one sender per producer and the progress watcher, all
// waited for here; the consumers' goroutines are stopped here and waited
// for by close.
func (r *e2eRun) run(res *E2EResult) {
	hard := r.hard
	started := time.Now()
	r.start = int64(started.Sub(r.epoch))
	r.warmupNS.Store(r.start + int64(r.cfg.Warmup))
	res.Started = started
	end := started.Add(r.cfg.Duration)
	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(hard)
	wg.Go(func() { r.watch(watchCtx, started, end, &res.Timeline) })

	var senders sync.WaitGroup
	for _, p := range r.producers {
		senders.Go(func() { r.send(hard, p, end) })
	}
	senders.Wait()
	sendEnd := time.Since(r.epoch)

	// Drain: wait until every acknowledged record was delivered.
	drainStart := time.Now()
	deadline := time.NewTimer(r.cfg.DrainTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	for r.consumeCtx.Err() == nil && r.delivered.records.Load() < r.acked.Load() {
		select {
		case <-r.consumeCtx.Done():
		case <-deadline.C:
			r.stopConsumers()
		case <-tick.C:
		}
	}
	deadline.Stop()
	tick.Stop()
	res.DrainS = time.Since(drainStart).Seconds()
	r.stopConsumers()
	r.consumerWG.Wait()
	stopWatch()
	wg.Wait()

	r.fill(res, sendEnd)
	// A drain timeout is not an abort: the records not delivered are
	// counted as lost.
	res.Aborted = r.aborted(r.caller)
}

// send produces p's share of the schedule until end or ctx is done, then
// flushes. It runs on the producer's own goroutine.
func (r *e2eRun) send(ctx context.Context, p *e2eProducer, end time.Time) {
	perRate := r.cfg.Rate / float64(len(r.producers))
	// Producers start staggered over one interval, so that together they
	// send evenly rather than in step.
	offset := time.Duration(r.start) + time.Duration(float64(p.idx)/float64(len(r.producers))/perRate*float64(time.Second))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var maxLag time.Duration
	for seq := int64(0); seq < r.perCap; seq++ {
		due := r.epoch.Add(offset + time.Duration(float64(seq)/perRate*float64(time.Second)))
		if !due.Before(end) || ctx.Err() != nil {
			break
		}
		now := time.Now()
		if ahead := due.Sub(now); ahead > time.Millisecond {
			timer.Reset(ahead)
			select {
			case <-timer.C:
			case <-ctx.Done():
				continue // the loop condition ends it
			}
			now = time.Now()
		}
		stamp := now
		if lag := now.Sub(due); lag > 0 {
			stamp = due
			if lag > time.Millisecond {
				r.behind.Add(1)
			}
			maxLag = max(maxLag, lag)
		}
		ns := int64(stamp.Sub(r.epoch))
		e := r.pool.Get().(*e2eRecord)
		binary.BigEndian.PutUint64(e.buf[0:], r.runID)
		binary.BigEndian.PutUint64(e.buf[8:], uint64(ns))
		binary.BigEndian.PutUint32(e.buf[16:], p.idx)
		binary.BigEndian.PutUint64(e.buf[20:], uint64(seq))
		e.rec = kgo.Record{Value: e.buf, Context: e}
		r.sent.Add(1)
		if ns >= r.warmupNS.Load() {
			r.measuredSent.Add(1)
		}
		p.cl.Produce(ctx, &e.rec, p.promise)
	}
	for {
		old := r.maxLagNS.Load()
		if int64(maxLag) <= old || r.maxLagNS.CompareAndSwap(old, int64(maxLag)) {
			break
		}
	}
	if err := p.cl.Flush(ctx); err != nil && ctx.Err() == nil {
		r.abort(fmt.Sprintf("cannot flush producer %d: %v", p.idx, err))
	}
}

// promise is called by kgo once per record, serially per client.
func (r *e2eRun) promise(p *e2eProducer, e *e2eRecord, err error) {
	if err != nil {
		r.failed.Add(1)
		if r.firstErr.CompareAndSwap(nil, &err) {
			r.abort(fmt.Sprintf("record failed: %v", err))
		}
	} else {
		ns := int64(binary.BigEndian.Uint64(e.buf[8:]))
		seq := binary.BigEndian.Uint64(e.buf[20:])
		p.acked[seq/64].Or(1 << (seq % 64))
		r.acked.Add(1)
		if ns >= r.warmupNS.Load() {
			p.lat.Record(time.Since(r.epoch) - time.Duration(ns))
		}
	}
	e.rec.Value = nil
	r.pool.Put(e)
}

// poll reads c's partitions until the consumers are stopped.
func (r *e2eRun) poll(c *e2eConsumer) {
	for {
		fs := c.cl.PollFetches(r.consumeCtx)
		if r.consumeCtx.Err() != nil || fs.IsClientClosed() {
			return
		}
		// Every record of one poll was delivered at the same moment.
		now := int64(time.Since(r.epoch))
		var err error
		fs.EachError(func(t string, p int32, e error) {
			if err == nil && !errors.Is(e, context.Canceled) {
				err = fmt.Errorf("fetch %s/%d: %w", t, p, e)
			}
		})
		if err != nil {
			r.abort(err.Error())
			return
		}
		var got int64
		fs.EachRecord(func(rec *kgo.Record) {
			if r.deliver(c, rec.Value, now) {
				got++
			}
		})
		if got > 0 {
			for {
				old := r.lastDelivery.Load()
				if now <= old || r.lastDelivery.CompareAndSwap(old, now) {
					break
				}
			}
		}
	}
}

// deliver accounts for one delivered value and reports whether it was a
// first delivery of a record of this run.
func (r *e2eRun) deliver(c *e2eConsumer, v []byte, now int64) bool {
	if len(v) < E2EHeaderSize || binary.BigEndian.Uint64(v) != r.runID {
		r.foreign.Add(1)
		return false
	}
	ns := int64(binary.BigEndian.Uint64(v[8:]))
	idx := binary.BigEndian.Uint32(v[16:])
	seq := binary.BigEndian.Uint64(v[20:])
	if int(idx) >= len(r.producers) || seq >= uint64(r.perCap) {
		r.foreign.Add(1)
		return false
	}
	bit := uint64(1) << (seq % 64)
	if r.producers[idx].seen[seq/64].Or(bit)&bit != 0 {
		r.dups.Add(1)
		return false
	}
	r.delivered.records.Add(1)
	if ns >= r.warmupNS.Load() {
		c.lat.Record(time.Duration(now - ns))
		r.measuredDelivered.Add(1)
		r.mBytes.Add(int64(len(v)))
	}
	return true
}

// watch prints a progress line every second, records the timeline and
// aborts a run in which nothing was delivered for the stall timeout
// while sending.
func (r *e2eRun) watch(ctx context.Context, begin, end time.Time, series *[]float64) {
	var lastS int64
	w := &watch{
		interval: time.Second, m: &r.delivered, start: begin, series: series,
		stalled: func(idle time.Duration) error {
			if time.Now().Before(end) && idle >= r.cfg.StallTimeout {
				return fmt.Errorf("no record delivered for %s", idle.Round(time.Second))
			}
			return nil
		},
		abort: func(err error) { r.abort(err.Error()) },
	}
	if r.cfg.Progress != nil {
		w.line = func(now time.Time, dt float64, d, lastD int64) {
			s := r.sent.Load()
			all := NewLatency()
			for _, c := range r.consumers {
				all.Merge(c.lat)
			}
			l := all.Summary()
			fmt.Fprintf(r.cfg.Progress, "e2e %6.1fs sent %10s rec/s delivered %10s rec/s %14s records  latency ms p50 %.2f p99 %.2f max %.2f\n",
				now.Sub(begin).Seconds(), groupDigits(int64(float64(s-lastS)/dt)), groupDigits(int64(float64(d-lastD)/dt)),
				groupDigits(d), float64(l.P50US)/1e3, float64(l.P99US)/1e3, float64(l.MaxUS)/1e3)
			lastS = s
		}
	}
	w.run(ctx)
}

func (r *e2eRun) fill(res *E2EResult, sendEnd time.Duration) {
	res.Sent, res.Acked, res.Failed = r.sent.Load(), r.acked.Load(), r.failed.Load()
	res.Delivered, res.Duplicates, res.Foreign = r.delivered.records.Load(), r.dups.Load(), r.foreign.Load()
	res.Behind = r.behind.Load()
	res.MaxSendLagMS = float64(r.maxLagNS.Load()) / 1e6
	for _, p := range r.producers {
		for i := range p.acked {
			res.Lost += int64(bits.OnesCount64(p.acked[i].Load() &^ p.seen[i].Load()))
		}
	}
	res.Complete = res.Lost == 0
	if span := sendEnd - time.Duration(r.warmupNS.Load()); span > 0 {
		res.Elapsed = span.Seconds()
		res.SentPerS = float64(r.measuredSent.Load()) / res.Elapsed
	}
	if span := time.Duration(r.lastDelivery.Load() - r.warmupNS.Load()); span > 0 {
		res.DeliveredPerS = float64(r.measuredDelivered.Load()) / span.Seconds()
		res.DeliveredMBPerS = float64(r.mBytes.Load()) / span.Seconds() / 1e6
	}
	e2e, ack := NewLatency(), NewLatency()
	for _, c := range r.consumers {
		e2e.Merge(c.lat)
	}
	for _, p := range r.producers {
		ack.Merge(p.lat)
	}
	res.Latency, res.AckLatency = e2e.Summary(), ack.Summary()
	if e := r.firstErr.Load(); e != nil {
		res.FirstErr = (*e).Error()
	}
}
