package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumeConfig configures Consume. Zero values take the defaults noted.
type ConsumeConfig struct {
	// Client reaches the brokers, 127.0.0.1:9092 by default; its Progress
	// gets one line per second.
	Client
	// Topic to read, from its start. Required; it must exist.
	Topic string
	// Group, if set, makes the poll-mode consumers join this consumer
	// group (offsets are auto-committed as kgo does by default). Without a
	// group the partitions are split over the consumers directly. Raw mode
	// takes no group.
	Group string
	// Consumers is the number of independent kgo clients. Default 1.
	Consumers int
	// Records stops the run once this many records were read (the last
	// fetch is counted whole). Default 0: read every partition up to the
	// end offset it had when the run began.
	Records int64
	// Idle stops the run when no record has arrived for this long.
	// Default 3 s.
	Idle time.Duration
	// Raw issues FetchRequests directly and counts record batch bytes
	// from the batch headers without decoding records: it measures the
	// broker and the wire, not the client's decoding. Otherwise records
	// are read with kgo's PollFetches.
	Raw bool
	// FetchMaxBytes is the per-request response limit. Default 50 MiB.
	FetchMaxBytes int32
	// PartitionMaxBytes is the per-partition limit within a request.
	// Default 10 MiB.
	PartitionMaxBytes int32
}

func (c ConsumeConfig) withDefaults() ConsumeConfig {
	c.Client = c.Client.withDefaults()
	c.Brokers = orDefaultBroker(c.Brokers)
	c.Consumers = cmp.Or(c.Consumers, 1)
	c.Idle = cmp.Or(c.Idle, 3*time.Second)
	c.FetchMaxBytes = cmp.Or(c.FetchMaxBytes, 50<<20)
	c.PartitionMaxBytes = cmp.Or(c.PartitionMaxBytes, 10<<20)
	return c
}

// Validate reports the first setting that cannot work, after defaults.
func (c ConsumeConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Topic == "":
		return errors.New("a topic is required")
	case c.Consumers < 1:
		return fmt.Errorf("consumers %d is not positive", c.Consumers)
	case c.Records < 0:
		return fmt.Errorf("records %d is negative", c.Records)
	case c.Idle < 0:
		return fmt.Errorf("idle %s is negative", c.Idle)
	case c.Raw && c.Group != "":
		return errors.New("raw mode reads without a consumer group")
	case c.FetchMaxBytes < 1 || c.PartitionMaxBytes < 1:
		return errors.New("fetch limits must be positive")
	case c.PartitionMaxBytes > c.FetchMaxBytes:
		return fmt.Errorf("partition max bytes %d is larger than fetch max bytes %d", c.PartitionMaxBytes, c.FetchMaxBytes)
	}
	return nil
}

// ConsumeResult is the outcome of Consume. The clock starts when the first
// data arrives and stops at the last arrival; the records of that first
// arrival are not counted in the rates (they were requested before the
// clock started), unless it was the only one.
type ConsumeResult struct {
	Kind     string          `json:"kind"` // "consume"
	Settings ConsumeSettings `json:"settings"`
	Records  int64           `json:"records"` // all records read
	Bytes    int64           `json:"bytes"`   // all bytes read, see BytesOf
	// BytesOf says what Bytes counts: "values" (keys and values of decoded
	// records, poll mode) or "batches" (record batches as they crossed the
	// wire, headers included, raw mode).
	BytesOf  string    `json:"bytes_of"`
	Fetches  int64     `json:"fetches"` // responses (raw) or polls (poll) that carried records
	Startup  float64   `json:"startup_s"`
	Elapsed  float64   `json:"elapsed_s"`
	RecPerS  float64   `json:"records_per_s"`
	MBPerS   float64   `json:"mb_per_s"`
	Aborted  string    `json:"aborted,omitempty"`
	Started  time.Time `json:"started"`
	Complete bool      `json:"complete"` // every partition was read to its end offset, or Records were read
}

// ConsumeSettings echoes the configuration a result was measured with.
type ConsumeSettings struct {
	Brokers           []string `json:"brokers"`
	Topic             string   `json:"topic"`
	Partitions        int      `json:"partitions"`
	Mode              string   `json:"mode"` // "raw" or "poll"
	Group             string   `json:"group,omitempty"`
	Consumers         int      `json:"consumers"`
	Records           int64    `json:"records,omitempty"`
	Idle              string   `json:"idle"`
	FetchMaxBytes     int32    `json:"fetch_max_bytes"`
	PartitionMaxBytes int32    `json:"partition_max_bytes"`
}

// Consume reads the topic until the configured stop and measures the rate.
// It returns the result so far together with any error.
func Consume(ctx context.Context, cfg ConsumeConfig) (*ConsumeResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid consume configuration: %w", err)
	}
	cfg = cfg.withDefaults()
	res := &ConsumeResult{Kind: "consume", Settings: ConsumeSettings{
		Brokers: cfg.Brokers, Topic: cfg.Topic, Mode: "poll", Group: cfg.Group,
		Consumers: cfg.Consumers, Records: cfg.Records, Idle: cfg.Idle.String(),
		FetchMaxBytes: cfg.FetchMaxBytes, PartitionMaxBytes: cfg.PartitionMaxBytes,
	}}
	res.BytesOf = "values"
	if cfg.Raw {
		res.Settings.Mode = "raw"
		res.BytesOf = "batches"
	}

	admin, err := newAdminClient(cfg.Brokers, cfg.ClientOpts, cfg.Logger)
	if err != nil {
		return nil, err
	}
	id, parts, err := describeTopic(ctx, kadm.NewClient(admin), cfg.Topic)
	admin.Close()
	if err != nil {
		return nil, err
	}
	res.Settings.Partitions = len(parts)

	c := &consumeRun{cfg: cfg, topicID: id, ends: map[int32]int64{}}
	c.ctx, c.cancel = context.WithCancel(ctx)
	defer c.cancel()
	for _, p := range parts {
		if p.end > p.start {
			c.ends[p.partition] = p.end
		}
	}
	c.mu.done = map[int32]bool{}
	if cfg.Records == 0 && len(c.ends) == 0 {
		res.Complete = true
		return res, nil // nothing to read
	}

	res.Started = time.Now()
	c.started = res.Started
	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(c.ctx)
	w := &watch{label: "consume", out: cfg.Progress, interval: time.Second, m: &c.meter,
		stalled: func(time.Duration) error {
			since := time.Since(c.started)
			last := time.Duration(c.lastArrival.Load())
			switch {
			case last == 0 && since > firstDataTimeout:
				return fmt.Errorf("no record arrived within %s", firstDataTimeout)
			case last > 0 && since-last > cfg.Idle:
				c.cancel() // idle: a normal end
			}
			return nil
		},
		abort: func(err error) { c.abort(err.Error()) },
	}
	wg.Go(func() { w.run(watchCtx) })

	if cfg.Raw {
		c.runRaw(parts)
	} else {
		c.runPoll(parts)
	}
	stopWatch()
	wg.Wait()
	c.fill(res)
	res.Aborted = c.aborted(ctx)
	if res.Aborted != "" {
		return res, errors.New(res.Aborted)
	}
	return res, nil
}

// consumeRun is one run's shared state. Arrival times are nanoseconds
// since started, so that they fit in atomics.
type consumeRun struct {
	cfg     ConsumeConfig
	topicID [16]byte
	ctx     context.Context
	started time.Time
	meter   meter

	// ends holds the end offset at the start of the run of every
	// partition that had records then. Read-only once the run starts.
	ends map[int32]int64

	mu struct {
		sync.Mutex
		done          map[int32]bool // partitions read to their end
		firstArrival  time.Duration  // 0: none yet
		firstRecords  int64          // what the first arrival carried
		firstBytes    int64
		fetches       int64
		lastArrivalAt time.Duration
	}
	lastArrival atomic.Int64 // nanoseconds since started, of the latest data

	aborter // its cancel ends the run, at a failure or a normal end
}

// arrived accounts for one fetch response or poll that carried data, and
// ends the run once Records were read.
func (c *consumeRun) arrived(records, bytes int64) {
	now := time.Since(c.started)
	c.mu.Lock()
	if c.mu.fetches == 0 {
		c.mu.firstArrival = now
		c.mu.firstRecords, c.mu.firstBytes = records, bytes
	}
	c.mu.fetches++
	c.mu.lastArrivalAt = max(c.mu.lastArrivalAt, now)
	c.mu.Unlock()
	c.lastArrival.Store(int64(now))
	total := c.meter.records.Add(records)
	c.meter.bytes.Add(bytes)
	if c.cfg.Records > 0 && total >= c.cfg.Records {
		c.cancel()
	}
}

// firstDataTimeout bounds the wait for the first records, which covers
// connecting and, with a group, the group's initial rebalance delay.
const firstDataTimeout = 30 * time.Second

// reached notes that partition p was read up to offset next (exclusive),
// and ends the run once every partition reached its end offset.
func (c *consumeRun) reached(p int32, next int64) {
	end, ok := c.ends[p]
	if !ok || next < end {
		return
	}
	c.mu.Lock()
	c.mu.done[p] = true
	all := len(c.mu.done) == len(c.ends)
	c.mu.Unlock()
	if all && c.cfg.Records == 0 {
		c.cancel()
	}
}

func (c *consumeRun) fill(res *ConsumeResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res.Records = c.meter.records.Load()
	res.Bytes = c.meter.bytes.Load()
	res.Fetches = c.mu.fetches
	res.Complete = (c.cfg.Records > 0 && res.Records >= c.cfg.Records) || (c.cfg.Records == 0 && len(c.mu.done) == len(c.ends))
	if c.mu.fetches == 0 {
		return
	}
	res.Startup = c.mu.firstArrival.Seconds()
	recs, bytes := res.Records, res.Bytes
	span := c.mu.lastArrivalAt - c.mu.firstArrival
	if c.mu.fetches > 1 && span > 0 {
		recs -= c.mu.firstRecords
		bytes -= c.mu.firstBytes
	} else {
		span = c.mu.lastArrivalAt
	}
	if span <= 0 {
		return
	}
	res.Elapsed = span.Seconds()
	res.RecPerS = float64(recs) / res.Elapsed
	res.MBPerS = float64(bytes) / res.Elapsed / 1e6
}

// runPoll reads with kgo consumers, one goroutine each, and returns after
// all have exited.
func (c *consumeRun) runPoll(parts []partitionInfo) {
	var wg sync.WaitGroup
	for i := range c.cfg.Consumers {
		opts := append(clientOpts(c.cfg.Brokers, c.cfg.ClientOpts, c.cfg.Logger, fmt.Sprintf("simtel-bench-consumer-%d", i)),
			kgo.FetchMaxBytes(c.cfg.FetchMaxBytes),
			kgo.FetchMaxPartitionBytes(c.cfg.PartitionMaxBytes),
			kgo.BrokerMaxReadBytes(brokerMaxReadBytes(c.cfg.FetchMaxBytes)),
		)
		if c.cfg.Group != "" {
			opts = append(opts, kgo.ConsumerGroup(c.cfg.Group), kgo.ConsumeTopics(c.cfg.Topic))
		} else {
			offsets := map[int32]kgo.Offset{}
			for j := i; j < len(parts); j += c.cfg.Consumers {
				offsets[parts[j].partition] = kgo.NewOffset().AtStart()
			}
			if len(offsets) == 0 {
				continue
			}
			opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.cfg.Topic: offsets}))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			c.abort(fmt.Sprintf("cannot create consumer %d: %v", i, err))
			break
		}
		wg.Go(func() {
			defer cl.Close()
			c.poll(cl)
		})
	}
	wg.Wait()
}

func (c *consumeRun) poll(cl *kgo.Client) {
	for c.ctx.Err() == nil {
		fs := cl.PollFetches(c.ctx)
		if fs.IsClientClosed() {
			return
		}
		var err error
		fs.EachError(func(t string, p int32, e error) {
			if err == nil && !errors.Is(e, context.Canceled) && !errors.Is(e, context.DeadlineExceeded) {
				err = fmt.Errorf("fetch %s/%d: %w", t, p, e)
			}
		})
		if err != nil {
			c.abort(err.Error())
			return
		}
		var recs, bytes int64
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			for _, r := range p.Records {
				bytes += int64(len(r.Key) + len(r.Value))
			}
			recs += int64(len(p.Records))
			c.reached(p.Partition, p.Records[len(p.Records)-1].Offset+1)
		})
		if recs > 0 {
			c.arrived(recs, bytes)
		}
	}
}

// brokerMaxReadBytes leaves room above a fetch limit for response framing,
// since kgo refuses responses larger than its read limit; it is never
// below kgo's default of 100 MiB.
func brokerMaxReadBytes(fetchMax int32) int32 {
	return int32(min(max(int64(fetchMax)+(4<<20), 100<<20), 1<<30))
}
