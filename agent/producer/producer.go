// Package producer moves records from the agent's spool to the broker as
// Kafka record batches it builds itself, and sends them with franz-go's
// client (which keeps the connections, negotiates versions and routes
// metadata and producer-id requests):
//
//  1. the reader takes up to one batch's worth of records from the spool,
//     lays them out as a record batch per partition and compresses it
//     (recordbatch.go), while
//  2. the sender sends the previous batch to its partition's leader as an
//     idempotent producer, waits for the acknowledgement, and acks the
//     spool up to the batch's end.
//
// The spool is the producer's buffer: a sample is on disk until the broker
// has it, so nothing needs holding in memory a second time, record by
// record, with a promise each, as a general-purpose producer does.
//
// One batch per partition is in flight at a time, so batches reach the
// broker in spool order without any reordering to undo after an error.
// Retriable errors (no leader, broker down, timeouts) are retried forever
// with the same sequence number: the broker answers a batch it already
// wrote with its original offset instead of writing it twice. A broker
// that lost the producer id (OUT_OF_ORDER_SEQUENCE_NUMBER,
// UNKNOWN_PRODUCER_ID) gets the batch again under a new id: the only
// case in which one agent life can duplicate samples. A batch the broker
// refuses as too large or malformed is halved until the refused samples
// are alone; those are dropped and counted.
//
// Acks happen in spool order, so after a crash the spool resends from the
// last acked position: at-least-once.
//
// Goroutines: Run is the reader and starts the sender, and returns once
// both have stopped; Config.OnDelivery is called on the sender.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/agent/rate"
	"github.com/simtel/simtel/agent/spool"
)

// Reads take at most shipBatchRecords samples and a byte budget of
// records before compression (batchBudget).
const shipBatchRecords = 32768

// gatherRecords: when the reader has read everything spooled and samples
// arrive at a rate at which fewer than this many gather in one Linger, it
// lets them gather in the spool for Linger (readLoop).
const gatherRecords = 16384

// produceTimeout is how long the broker may wait for its replicas before
// it answers a produce request; metadataMaxAge how long the partitions'
// leaders are used before they are asked for again (a new partition count
// is seen then).
const (
	produceTimeout = 10 * time.Second
	metadataMaxAge = time.Minute
)

// Spool is where the producer takes records from and acknowledges them:
// the agent's *spool.Spool.
type Spool interface {
	// Read waits for records and returns up to maxRecords of them, about
	// maxBytes at most, and the position after them.
	Read(ctx context.Context, maxRecords, maxBytes int) ([]spool.Record, spool.Pos, error)
	// AppendedAfter reports how many records were appended after pos.
	AppendedAfter(pos spool.Pos) uint64
	// Ack marks everything before pos delivered.
	Ack(pos spool.Pos) error
}

// Delivery is one spool read that the broker has: the spool was
// acknowledged up to its end.
type Delivery struct {
	Sent    int           // samples the broker acknowledged
	Dropped int           // samples the broker refused for good
	Latency time.Duration // from reading the spool to the last acknowledgement
}

// Config configures a Producer.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// ClientOpts are added to the Kafka client's options (TLS, SASL).
	ClientOpts []kgo.Opt
	// Topic receives the records; it is created if the broker allows it.
	// Required.
	Topic string
	// Linger is how long samples gather in the spool while fewer than
	// 16,384 arrive per Linger; 0 or negative sends at once.
	Linger time.Duration
	// BatchMaxBytes bounds a record batch after compression, in bytes (a
	// spool read takes up to twice as much before). Required, above 0.
	BatchMaxBytes int32
	// Logger receives the producer's lines (part=shipper) and its Kafka
	// client's (part=kafka-client). Default slog.Default().
	Logger *slog.Logger
	// OnDelivery, if set, is called by the sender after each spool read
	// is delivered and acknowledged, in spool order.
	OnDelivery func(Delivery)
}

// Producer sends spooled records to one topic. Create it with New, run it
// with Run, and Close it once Run's context has ended.
type Producer struct {
	cfg Config
	cl  *kgo.Client
}

// New creates the producer's Kafka client; it connects on first use.
func New(cfg Config) (*Producer, error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, errors.New("producer: no brokers")
	case cfg.Topic == "":
		return nil, errors.New("producer: no topic")
	case cfg.BatchMaxBytes <= 0:
		return nil, fmt.Errorf("producer: batch limit %d bytes is not positive", cfg.BatchMaxBytes)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// The client keeps the connections to the brokers, their versions and
	// metadata; the producer builds and sends the record batches itself.
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.WithLogger(kgoLogger{cfg.Logger.With("part", "kafka-client")}),
	}, cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot create producer for %v: %w", cfg.Brokers, err)
	}
	return &Producer{cfg: cfg, cl: cl}, nil
}

// Close closes the Kafka client. Call it once Run's context has ended:
// a request Run still has in flight then fails at once.
func (p *Producer) Close() { p.cl.Close() }

// outBatch is one encoded record batch on its way to the broker.
type outBatch struct {
	part  int32
	recs  []spool.Record // its samples, to halve it if the broker refuses it
	buf   []byte
	plain int // bytes of records before compression

	// last marks the final batch of a spool read: once it is delivered
	// the spool is acked up to pos, and read counts the read's samples.
	last    bool
	pos     spool.Pos
	read    int
	started time.Time
}

// shipper is one Run: the reader's and the sender's state.
type shipper struct {
	cfg   Config
	sp    Spool
	cl    *kgo.Client
	log   *slog.Logger
	meta  *topicMeta
	parts *keyPartitioner // reader's
	enc   batchEncoder    // reader's
	split batchEncoder    // sender's, for halving refused batches
	free  chan *outBatch

	// The idempotent producer: its id and epoch (-1 when the broker does
	// not grant one) and the next sequence number per partition.
	pid     int64
	epoch   int16
	haveID  bool
	seqs    map[int32]int32
	dropped int // samples of the current spool read refused for good
}

func (p *Producer) newShipper(sp Spool) *shipper {
	z := &zstdCompressor{}
	log := p.cfg.Logger.With("part", "shipper")
	return &shipper{
		cfg:   p.cfg,
		sp:    sp,
		cl:    p.cl,
		log:   log,
		meta:  &topicMeta{cl: p.cl, topic: p.cfg.Topic, log: log, last: -1},
		parts: newKeyPartitioner(p.cfg.Topic),
		enc:   batchEncoder{zstd: z},
		split: batchEncoder{zstd: z},
		free:  make(chan *outBatch, 4),
		seqs:  map[int32]int32{},
	}
}

// Run reads sp and sends what it reads until ctx ends. What was not
// acknowledged by then stays in the spool. Run a Producer once.
func (p *Producer) Run(ctx context.Context, sp Spool) {
	s := p.newShipper(sp)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan *outBatch, 1) // one batch encoded ahead of the one in flight
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.sendLoop(ctx, queue)
		cancel()
	}()
	s.readLoop(ctx, queue)
	<-done
}

// batchBudget is how many bytes of records, before compression, a read
// may take: the batch limit (which Kafka applies to the compressed batch),
// or twice that once the last batch compressed more than 3×, so that
// high rates need half the round trips to the broker. A batch that still
// comes out too large is halved before it is sent (encodeFitting).
func (s *shipper) batchBudget(ratio float64) int {
	limit := int(s.cfg.BatchMaxBytes)
	if ratio > 3 {
		return 2 * limit
	}
	return limit
}

// readLoop encodes spool reads into batches for the sender until ctx ends.
func (s *shipper) readLoop(ctx context.Context, queue chan<- *outBatch) {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	win := rate.NewWindow(time.Now(), s.cfg.Linger)
	ratio := 1.0
	for {
		recs, pos, err := s.sp.Read(ctx, shipBatchRecords, s.batchBudget(ratio))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, spool.ErrClosed) {
				return
			}
			s.log.Error("cannot read spool", "err", err)
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		started := time.Now()
		n, err := s.meta.partitionCount(ctx)
		if err != nil {
			return // ctx ended
		}
		var batches []*outBatch
		plain, packed := 0, 0
		for _, g := range s.groupByPartition(recs, n) {
			for _, b := range s.encodeFitting(&s.enc, g.part, g.recs) {
				plain += b.plain
				packed += len(b.buf)
				batches = append(batches, b)
			}
		}
		if packed > 0 {
			ratio = float64(plain) / float64(packed)
		}
		last := batches[len(batches)-1]
		last.last, last.pos, last.read, last.started = true, pos, len(recs), started
		for _, b := range batches {
			select {
			case queue <- b:
			case <-ctx.Done():
				return
			}
		}
		now := time.Now()
		win.Add(now, len(recs))
		if s.sp.AppendedAfter(pos) != 0 {
			continue // more is spooled: read it while this batch is sent
		}
		// At low rates every HTTP write or gathered bunch of datagrams
		// would otherwise become its own spool read, batch, produce
		// request and ack, each a burst of work that wakes several
		// goroutines and threads, at a cost that does not shrink with
		// the burst's size (docs/agent-cost.md "CPU"). Gathering for Linger
		// instead makes one of each per Linger. At higher rates bursts
		// follow each other anyway, and waiting would only delay.
		if win.PerSecond(now)*s.cfg.Linger.Seconds() < gatherRecords {
			t.Reset(s.cfg.Linger)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}
}

type partGroup struct {
	part int32
	recs []spool.Record
}

// groupByPartition splits recs by partition, keeping their order within
// each. Nearly always every record has the same key: one group, no copy.
func (s *shipper) groupByPartition(recs []spool.Record, n int) []partGroup {
	first := s.parts.partition(recs[0].Key, n)
	same := true
	for i := 1; i < len(recs) && same; i++ {
		same = s.parts.partition(recs[i].Key, n) == first
	}
	if same {
		return []partGroup{{first, recs}}
	}
	var groups []partGroup
	index := map[int32]int{}
	for _, r := range recs {
		p := s.parts.partition(r.Key, n)
		i, ok := index[p]
		if !ok {
			i = len(groups)
			index[p] = i
			groups = append(groups, partGroup{part: p})
		}
		groups[i].recs = append(groups[i].recs, r)
	}
	return groups
}

// encodeFitting encodes recs as one batch, or as several if the batch
// comes out larger than BatchMaxBytes after compression.
func (s *shipper) encodeFitting(enc *batchEncoder, part int32, recs []spool.Record) []*outBatch {
	b := s.getBatch()
	b.part, b.recs = part, recs
	b.buf = enc.encode(b.buf, recs)
	b.plain = len(enc.plain)
	if len(b.buf) <= int(s.cfg.BatchMaxBytes) || len(recs) == 1 {
		return []*outBatch{b}
	}
	s.putBatch(b)
	h := len(recs) / 2
	return append(s.encodeFitting(enc, part, recs[:h]), s.encodeFitting(enc, part, recs[h:])...)
}

func (s *shipper) getBatch() *outBatch {
	select {
	case b := <-s.free:
		return b
	default:
		return &outBatch{}
	}
}

func (s *shipper) putBatch(b *outBatch) {
	buf := b.buf[:0]
	*b = outBatch{buf: buf}
	select {
	case s.free <- b:
	default:
	}
}

// sendLoop delivers batches in order and acks the spool after the last
// batch of each read. It returns when ctx ends.
func (s *shipper) sendLoop(ctx context.Context, queue <-chan *outBatch) {
	for {
		var b *outBatch
		select {
		case b = <-queue:
		case <-ctx.Done():
			return
		}
		if err := s.deliver(ctx, b); err != nil {
			return // ctx ended: the batch stays spooled
		}
		if b.last {
			if err := s.sp.Ack(b.pos); err != nil {
				s.log.Error("cannot acknowledge spool position", "err", err)
			}
			d := Delivery{Sent: b.read - s.dropped, Dropped: s.dropped, Latency: time.Since(b.started)}
			s.dropped = 0
			if s.cfg.OnDelivery != nil {
				s.cfg.OnDelivery(d)
			}
		}
		s.putBatch(b)
	}
}

// deliver sends b until the broker has it (or refused its samples for
// good), or ctx ends.
func (s *shipper) deliver(ctx context.Context, b *outBatch) error {
	failures, resets := 0, 0
	var firstFailure time.Time
	for {
		if err := s.ensureProducer(ctx); err != nil {
			return err
		}
		seq := int32(-1)
		if s.pid >= 0 {
			seq = s.seqs[b.part]
		}
		stamp(b.buf, s.pid, s.epoch, seq)
		err := s.produce(ctx, b.part, b.buf)
		switch {
		case err == nil || errors.Is(err, kerr.DuplicateSequenceNumber):
			if s.pid >= 0 {
				s.seqs[b.part] = nextSequence(seq, len(b.recs))
			}
			if failures > 0 {
				s.log.Info("broker reachable again; sending", "partition", b.part, "failed_attempts", failures, "after", time.Since(firstFailure).Round(time.Millisecond))
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case producerLost(err):
			// Once is expected after a broker lost the id; again under
			// the new id means something else is wrong: back off.
			resets++
			warnRetry(s.log, resets, err, "the broker no longer knows the agent's producer id; sending again under a new one (samples it wrote before it lost the id may arrive twice)", "partition", b.part)
			s.haveID = false
			clear(s.seqs)
			if resets > 1 && !sleepCtx(ctx, retryBackoff(resets-1)) {
				return ctx.Err()
			}
		case batchRefused(err):
			return s.deliverHalves(ctx, b, err)
		case errors.Is(err, kerr.InvalidTopicException):
			s.refused(len(b.recs), err)
			return nil
		default:
			failures++
			if failures == 1 {
				firstFailure = time.Now()
			}
			warnRetry(s.log, failures, err, "cannot send to the broker; samples stay spooled and are sent again", "partition", b.part)
			s.meta.invalidate()
			if !sleepCtx(ctx, retryBackoff(failures)) {
				return ctx.Err()
			}
		}
	}
}

// deliverHalves delivers a refused batch as two, down to single samples,
// which are dropped if the broker refuses them too.
func (s *shipper) deliverHalves(ctx context.Context, b *outBatch, err error) error {
	if len(b.recs) == 1 {
		s.refused(1, err)
		return nil
	}
	h := len(b.recs) / 2
	for _, half := range [][]spool.Record{b.recs[:h], b.recs[h:]} {
		hb := &outBatch{part: b.part, recs: half}
		hb.buf = s.split.encode(nil, half)
		if err := s.deliver(ctx, hb); err != nil {
			return err
		}
	}
	return nil
}

func (s *shipper) refused(n int, err error) {
	if s.dropped == 0 {
		s.log.Error("broker refused samples for good; they are dropped", "samples", n, "err", err)
	}
	s.dropped += n
}

// warnRetry logs the first failure of a retry loop, then every 60th (one
// line every two minutes at the longest back-off): the broker may be away
// for hours while the spool holds. It adds what to do for the errors that
// need the operator.
func warnRetry(l *slog.Logger, failures int, err error, msg string, args ...any) {
	if failures != 1 && failures%60 != 0 {
		return
	}
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		msg += " (create the topic, or let the broker create topics on first use)"
	case errors.Is(err, kerr.UnsupportedCompressionType):
		msg += " (the broker does not take zstd: it needs Kafka 2.1 or later)"
	}
	l.Warn(msg, append(args, "err", err, "attempts", failures)...)
}

// retryBackoff grows from 100 ms to 2 s, and is drawn between half that
// and that: the agents that lost the same broker at the same moment (a
// restart, thousands of them) then retry spread out rather than in
// lockstep, each retry a Metadata and a Produce request at the brokers
// left.
func retryBackoff(failures int) time.Duration {
	d := min(100*time.Millisecond<<min(failures-1, 5), 2*time.Second)
	return d/2 + rand.N(d/2)
}

// producerLost reports errors after which the producer id must be
// replaced: the broker lost its state for the id, or a newer producer
// took it over.
func producerLost(err error) bool {
	for _, e := range []error{kerr.OutOfOrderSequenceNumber, kerr.UnknownProducerID, kerr.InvalidProducerEpoch, kerr.InvalidProducerIDMapping, kerr.ProducerFenced} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// batchRefused reports errors that sending the same batch again cannot
// fix, but sending part of it may.
func batchRefused(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.CorruptMessage, kerr.InvalidRecord} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ensureProducer gets an idempotent producer id once, and after the
// broker lost the last one.
func (s *shipper) ensureProducer(ctx context.Context) error {
	if s.haveID {
		return nil
	}
	for failures := 1; ; failures++ {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionTimeoutMillis = 60_000
		via := s.meta.via()
		resp, err := req.RequestWith(ctx, via)
		if err != nil && via != kmsg.Requestor(s.cl) {
			s.meta.invalidate() // the next try asks any broker
		}
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		switch {
		case err == nil:
			s.pid, s.epoch, s.haveID = resp.ProducerID, resp.ProducerEpoch, true
			clear(s.seqs)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, kerr.ClusterAuthorizationFailed):
			s.log.Warn("the broker does not grant the agent a producer id (idempotent write needs IDEMPOTENT_WRITE on the cluster); sending without one, so a retried batch may arrive twice", "err", err)
			s.pid, s.epoch, s.haveID = -1, -1, true
			return nil
		}
		warnRetry(s.log, failures, err, "cannot get a producer id from the broker; samples stay spooled")
		if !sleepCtx(ctx, retryBackoff(failures)) {
			return ctx.Err()
		}
	}
}

// produce sends one batch to its partition's leader and returns the
// partition's error, if any.
func (s *shipper) produce(ctx context.Context, part int32, batch []byte) error {
	leader, err := s.meta.leader(ctx, part)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = int32(produceTimeout / time.Millisecond)
	t := kmsg.NewProduceRequestTopic()
	t.Topic = s.meta.topic
	p := kmsg.NewProduceRequestTopicPartition()
	p.Partition = part
	p.Records = batch
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, s.cl.Broker(int(leader)))
	if err != nil {
		return err
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition == part {
				return kerr.ErrorForCode(rp.ErrorCode)
			}
		}
	}
	return fmt.Errorf("produce response for %s has no partition %d", s.meta.topic, part)
}

// topicMeta caches the shipped topic's partition leaders. The topic is
// created if the broker allows it.
type topicMeta struct {
	cl    *kgo.Client
	topic string
	log   *slog.Logger

	mu      sync.Mutex
	leaders []int32 // by partition; -1 while a partition has none
	fetched time.Time
	stale   bool
	// last is the leader the shipper last sent to, -1 before the first
	// send and after a failed one (see via).
	last int32
}

// partitionCount is the topic's partition count; it waits until the
// topic is known or ctx ends.
func (m *topicMeta) partitionCount(ctx context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for failures := 1; ; failures++ {
		err := m.refreshLocked(ctx)
		if err == nil {
			return len(m.leaders), nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		warnRetry(m.log, failures, err, "cannot learn the topic's partitions from the broker; samples stay spooled", "topic", m.topic)
		m.mu.Unlock()
		ok := sleepCtx(ctx, retryBackoff(failures))
		m.mu.Lock()
		if !ok {
			return 0, ctx.Err()
		}
	}
}

// leader is part's leader, asking the broker if the cache is stale.
func (m *topicMeta) leader(ctx context.Context, part int32) (int32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.refreshLocked(ctx); err != nil {
		return -1, err
	}
	if int(part) >= len(m.leaders) || m.leaders[part] < 0 {
		m.stale = true
		return -1, fmt.Errorf("partition %d of %s: %w", part, m.topic, kerr.LeaderNotAvailable)
	}
	m.last = m.leaders[part]
	return m.leaders[part], nil
}

// invalidate makes the next use ask the broker again, through any broker.
func (m *topicMeta) invalidate() {
	m.mu.Lock()
	m.stale, m.last = true, -1
	m.mu.Unlock()
}

// via is where the shipper's Metadata and InitProducerID requests go:
// the leader it sends to, while sending to it works. kgo would send each
// to a broker of its choosing, so an agent came to hold a connection to
// every broker, each closed after idling and opened again a minute
// later, and a broker a connection per agent it never led: with
// thousands of agents, those connections were most of what the agents
// cost the brokers (simtel bench agents).
func (m *topicMeta) via() kmsg.Requestor {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.viaLocked()
}

func (m *topicMeta) viaLocked() kmsg.Requestor {
	if m.last >= 0 {
		return m.cl.Broker(int(m.last))
	}
	return m.cl
}

func (m *topicMeta) refreshLocked(ctx context.Context) error {
	if !m.stale && len(m.leaders) > 0 && time.Since(m.fetched) < metadataMaxAge {
		return nil
	}
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(m.topic)
	req.Topics = append(req.Topics, t)
	req.AllowAutoTopicCreation = true
	resp, err := req.RequestWith(ctx, m.viaLocked())
	if err != nil {
		m.last = -1 // the next try asks any broker
		return err
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil || *rt.Topic != m.topic {
			continue
		}
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			return fmt.Errorf("topic %s: %w", m.topic, err)
		}
		if len(rt.Partitions) == 0 {
			return fmt.Errorf("topic %s has no partitions yet", m.topic)
		}
		n := int32(0)
		for _, p := range rt.Partitions {
			n = max(n, p.Partition+1)
		}
		leaders := make([]int32, n)
		for i := range leaders {
			leaders[i] = -1
		}
		for _, p := range rt.Partitions {
			if kerr.ErrorForCode(p.ErrorCode) == nil || errors.Is(kerr.ErrorForCode(p.ErrorCode), kerr.ReplicaNotAvailable) {
				leaders[p.Partition] = p.Leader
			}
		}
		m.leaders, m.fetched, m.stale = leaders, time.Now(), false
		return nil
	}
	return fmt.Errorf("metadata response has no topic %s", m.topic)
}

// sleepCtx sleeps for d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// kgoLogger sends franz-go's errors to slog. Its warnings are left out:
// they are mostly one line per failed connection attempt, every back-off
// for as long as a broker is away, and the shipper reports those failures
// itself (warnRetry); with --log-level debug they are kept.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	if k.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelWarn
	}
	return kgo.LogLevelError
}

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
