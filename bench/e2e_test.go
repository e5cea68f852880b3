package bench

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestE2EConfigValidate(t *testing.T) {
	ok := E2EConfig{Topic: "t", Rate: 100, Duration: time.Second}
	checkRefusals(t, ok, []refusal[E2EConfig]{
		{"no topic", func(c *E2EConfig) { c.Topic = "" }, "topic"},
		{"no rate", func(c *E2EConfig) { c.Rate = 0 }, "fixed schedule"},
		{"negative rate", func(c *E2EConfig) { c.Rate = -5 }, "fixed schedule"},
		{"no duration", func(c *E2EConfig) { c.Duration = 0 }, "duration"},
		{"warmup too long", func(c *E2EConfig) { c.Warmup = time.Second }, "warmup"},
		{"record smaller than header", func(c *E2EConfig) { c.RecordSize = 10 }, "header"},
		{"bad acks", func(c *E2EConfig) { c.Acks = "2" }, "acks"},
		{"bad compression", func(c *E2EConfig) { c.Compression = "brotli" }, "compression"},
		{"negative consumers", func(c *E2EConfig) { c.Consumers = -1 }, "consumers"},
		{"too many records", func(c *E2EConfig) { c.Rate, c.Duration = 1e9, time.Hour }, "cannot track"},
	})
	if s := ok.withDefaults().settings(); !s.Idempotent || s.RecordSize != 1024 || s.Acks != "all" {
		t.Errorf("default settings: %+v", s)
	}
}

// TestE2EDeliveryAccounting drives deliver and fill by hand: duplicates,
// records of other runs and acknowledged records that never arrive must
// each be counted where they belong.
func TestE2EDeliveryAccounting(t *testing.T) {
	cfg := E2EConfig{Client: Client{Brokers: []string{"127.0.0.1:1"}}, Topic: "t", Rate: 200, Duration: time.Second, Producers: 2, RecordSize: 40}.withDefaults()
	r, err := newE2ERun(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &e2eConsumer{lat: NewLatency()} // no client: fed by hand
	r.consumers = append(r.consumers, c)
	defer func() {
		r.consumers = nil
		r.close()
	}()
	value := func(run uint64, ns int64, idx uint32, seq uint64) []byte {
		v := make([]byte, 40)
		binary.BigEndian.PutUint64(v, run)
		binary.BigEndian.PutUint64(v[8:], uint64(ns))
		binary.BigEndian.PutUint32(v[16:], idx)
		binary.BigEndian.PutUint64(v[20:], seq)
		return v
	}
	ack := func(idx uint32, seq uint64) {
		r.producers[idx].acked[seq/64].Or(1 << (seq % 64))
		r.acked.Add(1)
	}
	// Acknowledged: producer 0 seqs 0..69, producer 1 seqs 0..9.
	for s := range uint64(70) {
		ack(0, s)
	}
	for s := range uint64(10) {
		ack(1, s)
	}
	// Delivered: all of producer 0, 0..7 of producer 1 (8 and 9 lost),
	// seq 3 of producer 1 twice, and some that are not this run's.
	for s := range uint64(70) {
		if !r.deliver(c, value(r.runID, 1000, 0, s), 2000+int64(s)) {
			t.Fatalf("first delivery of 0/%d not counted", s)
		}
	}
	for s := range uint64(8) {
		r.deliver(c, value(r.runID, 1000, 1, s), 5000)
	}
	if r.deliver(c, value(r.runID, 1000, 1, 3), 6000) {
		t.Error("second delivery of 1/3 counted as first")
	}
	for _, v := range [][]byte{
		value(r.runID+1, 0, 0, 0),    // another run
		value(r.runID, 0, 7, 0),      // no such producer
		value(r.runID, 0, 0, 1<<40),  // sequence beyond the schedule
		[]byte("short"),              // not ours at all
		value(r.runID, 0, 1, 1)[:27], // a header cut short
	} {
		if r.deliver(c, v, 0) {
			t.Errorf("foreign value %x counted as delivered", v)
		}
	}
	var res E2EResult
	r.fill(&res, time.Second)
	if res.Delivered != 78 || res.Duplicates != 1 || res.Foreign != 5 || res.Lost != 2 || res.Complete {
		t.Errorf("got delivered %d, duplicates %d, foreign %d, lost %d, complete %v; want 78, 1, 5, 2, false",
			res.Delivered, res.Duplicates, res.Foreign, res.Lost, res.Complete)
	}
	if res.Latency.Count != 78 || res.Latency.MinUS != 1 || res.Latency.MaxUS != 4 {
		t.Errorf("latency: got %+v, want 78 observations between 1 and 4 µs", res.Latency)
	}
}

// TestE2EBroker runs the benchmark against a real broker at a small rate,
// with junk records written into the topic during the run: every record
// must be acknowledged and delivered once, the junk skipped, and the
// latency measured for every record after the warmup.
func TestE2EBroker(t *testing.T) {
	addr := brokertest.Start(t, brokertest.SkipShort(), brokertest.GroupDelay(0)).Addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Records of an earlier run already in the topic are not read.
	first, err := E2E(ctx, E2EConfig{Client: Client{Brokers: []string{addr}, Logger: testLogger(t)}, Topic: "e2e", Partitions: 3, Rate: 200,
		Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("first run: %v (result %+v)", err, first)
	}

	junkCtx, stopJunk := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var junk int
	wg.Go(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("e2e"))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for junkCtx.Err() == nil {
			if err := cl.ProduceSync(junkCtx, &kgo.Record{Value: []byte("not an e2e record, but long enough to have a header")}).FirstErr(); err == nil {
				junk++
			}
			select {
			case <-junkCtx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})

	const rate, dur, warm = 400, 2 * time.Second, 500 * time.Millisecond
	var progress testutil.SyncBuffer
	res, err := E2E(ctx, E2EConfig{Client: Client{Brokers: []string{addr}, Logger: testLogger(t), Progress: &progress},
		Topic: "e2e", Partitions: 3, RecordSize: 100, Producers: 2, Consumers: 2, Rate: rate, Duration: dur, Warmup: warm})
	stopJunk()
	wg.Wait()
	if err != nil {
		t.Fatalf("e2e: %v (result %+v)", err, res)
	}
	t.Logf("e2e at %d/s: sent %d, delivered %d, foreign %d, latency %+v", rate, res.Sent, res.Delivered, res.Foreign, res.Latency)
	want := int64(rate * dur.Seconds())
	if res.Sent < want-2 || res.Sent > want+2 || res.Acked != res.Sent || res.Delivered != res.Sent || res.Lost != 0 || res.Duplicates != 0 || !res.Complete {
		t.Errorf("got sent %d, acked %d, delivered %d, lost %d, duplicates %d; want about %d of each and none lost",
			res.Sent, res.Acked, res.Delivered, res.Lost, res.Duplicates, want)
	}
	if res.Settings.Partitions != 3 {
		t.Errorf("partitions: got %d, want 3", res.Settings.Partitions)
	}
	// The junk written during the run is foreign; the first run's records
	// were before the start offsets.
	if junk == 0 || res.Foreign == 0 || res.Foreign > int64(junk) {
		t.Errorf("foreign: got %d with %d junk records written", res.Foreign, junk)
	}
	measured := int64(rate * (dur - warm).Seconds())
	l := res.Latency
	if l.Count < measured-2 || l.Count > measured+2 || res.AckLatency.Count != l.Count {
		t.Errorf("latency counts: end-to-end %d, ack %d; want about %d (after the warmup)", l.Count, res.AckLatency.Count, measured)
	}
	if l.P50US <= 0 || l.P50US > l.P90US || l.P90US > l.P99US || l.P99US > l.P999US || l.P999US > l.MaxUS {
		t.Errorf("latency percentiles out of order: %+v", l)
	}
	if res.SentPerS < rate*0.9 || res.SentPerS > rate*1.1 || res.DeliveredPerS < rate*0.8 || res.DeliveredPerS > rate*1.2 {
		t.Errorf("rates: sent %.0f/s, delivered %.0f/s; want about %d/s", res.SentPerS, res.DeliveredPerS, rate)
	}
	if len(res.Timeline) < 1 {
		t.Errorf("timeline: got %v, want one value per second", res.Timeline)
	}
	// One progress line a second, with both rates and the latency so far.
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	if len(lines) != len(res.Timeline) || !strings.HasPrefix(lines[0], "e2e ") || !strings.Contains(lines[0], " rec/s delivered ") || !strings.Contains(lines[0], "latency ms p50 ") {
		t.Errorf("progress: got %q, want one line per timeline value (%d)", progress.String(), len(res.Timeline))
	}

	// A broker that goes away makes the run fail with what it measured.
	ctx2, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	if _, err := E2E(ctx2, E2EConfig{Client: Client{Brokers: []string{"127.0.0.1:1"}}, Topic: "e2e", Rate: 10, Duration: time.Second}); err == nil {
		t.Error("run against no broker: got no error")
	}
}
