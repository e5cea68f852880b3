package bench

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// TestProduceConsumeCounts produces a known number of records and reads
// every one back in each consume mode: nothing acknowledged may be missing
// and nothing may be counted twice.
func TestProduceConsumeCounts(t *testing.T) {
	addr := brokertest.Start(t, brokertest.SkipShort(), brokertest.GroupDelay(0)).Addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n, size = 30000, 100
	pr, err := Produce(ctx, ProduceConfig{Client: Client{Brokers: []string{addr}, Logger: testLogger(t)}, Topic: "counts", Partitions: 3,
		Producers: 2, Records: n, RecordSize: size})
	if err != nil {
		t.Fatalf("produce: %v (result %+v)", err, pr)
	}
	if pr.Records != n || pr.Errors != 0 || pr.Bytes != n*size || pr.Latency.Count != n {
		t.Fatalf("produce: got %d records, %d errors, %d bytes, %d latencies; want %d, 0, %d, %d",
			pr.Records, pr.Errors, pr.Bytes, pr.Latency.Count, n, n*size, n)
	}
	if pr.Settings.Partitions != 3 || pr.RecPerS <= 0 || pr.Latency.P50US <= 0 || pr.Latency.P50US > pr.Latency.P999US {
		t.Errorf("produce: implausible result %+v", pr)
	}
	if pr.Producer[0].Records+pr.Producer[1].Records != n {
		t.Errorf("per-producer records %+v do not add up to %d", pr.Producer, n)
	}

	for _, c := range []struct {
		name  string
		cfg   ConsumeConfig
		bytes func(int64) bool
	}{
		{"raw", ConsumeConfig{Raw: true}, func(b int64) bool { return b > n*size }},
		{"raw, 2 consumers, small fetches", ConsumeConfig{Raw: true, Consumers: 2, FetchMaxBytes: 64 << 10, PartitionMaxBytes: 32 << 10},
			func(b int64) bool { return b > n*size }},
		{"poll", ConsumeConfig{}, func(b int64) bool { return b == n*size }},
		{"poll, group of 2", ConsumeConfig{Group: "g", Consumers: 2}, func(b int64) bool { return b == n*size }},
	} {
		c.cfg.Brokers, c.cfg.Topic, c.cfg.Logger = []string{addr}, "counts", testLogger(t)
		start := time.Now()
		cr, err := Consume(ctx, c.cfg)
		if err != nil || cr == nil {
			t.Errorf("%s: %v (result %+v)", c.name, err, cr)
			continue
		}
		t.Logf("%s: %d records in %s", c.name, cr.Records, time.Since(start))
		if cr.Records != n || !cr.Complete || !c.bytes(cr.Bytes) {
			t.Errorf("%s: got %d records, %d bytes, complete %v; want %d records", c.name, cr.Records, cr.Bytes, cr.Complete, n)
		}
		if cr.Fetches > 1 && (cr.MBPerS <= 0 || cr.Elapsed <= 0) {
			t.Errorf("%s: no rate over %d fetches: %+v", c.name, cr.Fetches, cr)
		}
	}

	// A count bound stops early; an empty topic ends at once.
	cr, err := Consume(ctx, ConsumeConfig{Client: Client{Brokers: []string{addr}}, Topic: "counts", Raw: true, Records: 100, PartitionMaxBytes: 4 << 10})
	if err != nil || cr == nil {
		t.Fatalf("raw with --records 100: %v", err)
	}
	if cr.Records < 100 || cr.Records >= n || !cr.Complete {
		t.Errorf("raw with --records 100: got %d records, complete %v, err %v", cr.Records, cr.Complete, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := ensureTopic(ctx, cl, testLogger(t), "empty", 2); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if cr, err := Consume(ctx, ConsumeConfig{Client: Client{Brokers: []string{addr}}, Topic: "empty"}); err != nil || !cr.Complete || cr.Records != 0 || time.Since(start) > 2*time.Second {
		t.Errorf("empty topic: got %+v, %v after %s; want an immediate complete run", cr, err, time.Since(start))
	}
	if _, err := Consume(ctx, ConsumeConfig{Client: Client{Brokers: []string{addr}}, Topic: "missing"}); err == nil {
		t.Error("consume of a missing topic: got no error")
	}
}

func TestProduceAcks(t *testing.T) {
	addr := brokertest.Start(t, brokertest.SkipShort(), brokertest.GroupDelay(0)).Addr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, acks := range []string{"1", "0"} {
		pr, err := Produce(ctx, ProduceConfig{Client: Client{Brokers: []string{addr}, Logger: testLogger(t)}, Topic: "acks" + acks, Acks: acks,
			Records: 5000, MaxInflight: 3})
		if err != nil || pr.Records != 5000 || pr.Settings.Idempotent || pr.Settings.MaxInflight != 3 {
			t.Errorf("acks=%s: err %v, result %+v", acks, err, pr)
		}
	}
	// Warmup records are produced but not measured.
	pr, err := Produce(ctx, ProduceConfig{Client: Client{Brokers: []string{addr}}, Topic: "warm", Duration: 1500 * time.Millisecond,
		Warmup: 500 * time.Millisecond, Rate: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Warmup < 500 || pr.Records < 1500 || pr.Latency.Count != pr.Records || pr.Elapsed > 1.4 || len(pr.Timeline) != 1 {
		t.Errorf("warmup 0.5 s of 1.5 s at 2000/s: %d warmup records, %d measured, %d latencies over %.2f s, timeline %v",
			pr.Warmup, pr.Records, pr.Latency.Count, pr.Elapsed, pr.Timeline)
	}
	// A rate limit holds the run to about records/rate seconds.
	start := time.Now()
	pr, err = Produce(ctx, ProduceConfig{Client: Client{Brokers: []string{addr}}, Topic: "rate", Records: 400, Rate: 1000, Producers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || pr.RecPerS > 1500 {
		t.Errorf("400 records at 1000/s: took %s, %.0f records/s", d, pr.RecPerS)
	}
}

// TestProduceStalledBroker pauses the broker mid-run: the run must end on
// its own with an error instead of hanging.
func TestProduceStalledBroker(t *testing.T) {
	b := brokertest.Start(t, brokertest.SkipShort(), brokertest.GroupDelay(0))
	addr, p := b.Addr, b.Proc
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	var res *ProduceResult
	go func() {
		var err error
		res, err = Produce(ctx, ProduceConfig{Client: Client{Brokers: []string{addr}, Logger: testLogger(t)}, Topic: "stall",
			Duration: 30 * time.Second, StallTimeout: 2 * time.Second})
		done <- err
	}()
	time.Sleep(time.Second)
	testutil.Pause(t, p.Cmd.Process)
	defer p.Cmd.Process.Signal(syscall.SIGCONT)
	select {
	case err := <-done:
		if err == nil || res == nil || res.Aborted == "" {
			t.Errorf("stalled broker: got error %v, result %+v; want an aborted run", err, res)
		}
		if res != nil && res.Records == 0 {
			t.Errorf("stalled broker: the records acknowledged before the stall were not reported")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("produce did not end within 20s of the broker stalling")
	}
}

func TestMeasureDisk(t *testing.T) {
	dir := t.TempDir()
	res, err := MeasureDisk(context.Background(), DiskConfig{Dir: dir, SeqBytes: 8 << 20, Appends: 50,
		SustainTime: 2*time.Second + 100*time.Millisecond, BlockSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.SeqMBPerS <= 0 || res.SeqBytes != 8<<20 || res.Appends != 50 || res.AppendsPS <= 0 || res.AppendLat.P50US <= 0 {
		t.Errorf("implausible result %+v", res)
	}
	if len(res.SustainSeries) != 2 || res.SustainMBPerS <= 0 || res.SustainBytes < 64<<10 {
		t.Errorf("sustained test over 2.1 s: got %d whole seconds %v, %.1f MB/s, %d bytes",
			len(res.SustainSeries), res.SustainSeries, res.SustainMBPerS, res.SustainBytes)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Errorf("test files left behind: %v", left)
	}
}
