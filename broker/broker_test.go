package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

// testBroker is an in-process broker on a random port, with clients that
// close when the test ends.
type testBroker struct {
	*brokertest.Broker
	t *testing.T
}

type testConfig = broker.Config

// startBroker starts an in-process broker with its data in dir, an HTTP
// listener and no delay before a new group's first rebalance; mods change
// its configuration before it starts.
func startBroker(t *testing.T, dir string, mods ...func(*broker.Config)) *testBroker {
	t.Helper()
	b := inproc.StartConfig(t, func(c *broker.Config) {
		for _, m := range mods {
			m(c)
		}
	}, brokertest.DataDir(dir), brokertest.HTTP(), brokertest.GroupDelay(0))
	tb := &testBroker{Broker: b, t: t}
	// Runs before brokertest's own cleanup, with a shorter bound.
	t.Cleanup(tb.stop)
	return tb
}

// stop stops the broker within 10 s, for a test that starts another on
// its data directory.
func (tb *testBroker) stop() {
	if err := tb.Stop(10 * time.Second); err != nil {
		tb.t.Error(err)
	}
}

func (tb *testBroker) client(opts ...kgo.Opt) *kgo.Client {
	tb.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tb.Addr)}, opts...)...)
	if err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Cleanup(cl.Close)
	return cl
}

func (tb *testBroker) admin() *kadm.Client { return kadm.NewClient(tb.client()) }

// createTopicRF1 creates topic with parts partitions and replication
// factor 1 through adm; a failed request fails the test (an error of the
// topic's own is the test's to check).
func createTopicRF1(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, parts int32) {
	t.Helper()
	if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fetchOne is a Fetch of one partition from offset, at most maxBytes for
// the partition and the response, waiting at most 100 ms for data.
func fetchOne(topic string, partition int32, offset int64, maxBytes int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MaxBytes = 100, maxBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func TestProduceConsumeOrdered(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	ctx := ctxT(t, 60*time.Second)
	adm := tb.admin()
	createTopicRF1(t, ctx, adm, "orders", 3)
	prod := tb.client(kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond))
	const n = 3000
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < n; i++ {
		wg.Add(1)
		r := &kgo.Record{Partition: int32(i % 3), Key: []byte(fmt.Sprint(i % 3)), Value: []byte(fmt.Sprintf("v-%06d", i))}
		prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("produce failed: %v", firstErr)
	}
	cons := tb.client(kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	next := map[int32]int{0: 0, 1: 1, 2: 2}
	got := 0
	for got < n {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records before timeout", got, n)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			want := fmt.Sprintf("v-%06d", next[r.Partition])
			if string(r.Value) != want {
				t.Fatalf("partition %d offset %d: got %q, want %q", r.Partition, r.Offset, r.Value, want)
			}
			next[r.Partition] += 3
			got++
		})
	}
}

func TestAdminOperations(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	ctx := ctxT(t, 60*time.Second)
	adm := tb.admin()
	resp, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "adm")
	if err != nil || resp.Err != nil {
		t.Fatalf("create: %v %v", err, resp.Err)
	}
	if _, err := adm.CreateTopic(ctx, 2, 3, nil, "rf3"); err == nil {
		t.Fatal("replication factor 3 on one broker: got success, want INVALID_REPLICATION_FACTOR")
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"no.such.config": kadm.StringPtr("1")}, "badcfg"); err == nil {
		t.Fatal("unknown config: got success, want INVALID_CONFIG")
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "adm")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On("adm", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			found = true
			if c.MaybeValue() != "3600000" {
				t.Fatalf("retention.ms: got %q, want 3600000", c.MaybeValue())
			}
		}
	}
	if !found {
		t.Fatal("retention.ms not described")
	}
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")}}, "adm"); err != nil {
		t.Fatal(err)
	}
	rcs, _ = adm.DescribeTopicConfigs(ctx, "adm")
	rc, _ = rcs.On("adm", nil)
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.MaybeValue() != "compact" {
			t.Fatalf("cleanup.policy after alter: got %q, want compact", c.MaybeValue())
		}
	}
	if _, err := adm.CreatePartitions(ctx, 2, "adm"); err != nil {
		t.Fatal(err)
	}
	td, err := adm.ListTopics(ctx, "adm")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(td["adm"].Partitions); n != 4 {
		t.Fatalf("partitions after adding 2: got %d, want 4", n)
	}

	// Produce with known timestamps, then list offsets by time and delete records.
	prod := tb.client(kgo.DefaultProduceTopic("adm"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	base := time.UnixMilli(1_700_000_000_000)
	for i := 0; i < 10; i++ {
		r := &kgo.Record{Partition: 0, Value: []byte{byte(i)}, Timestamp: base.Add(time.Duration(i) * time.Second)}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	lo, err := adm.ListOffsetsAfterMilli(ctx, base.Add(4500*time.Millisecond).UnixMilli(), "adm")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lo.Lookup("adm", 0); o.Offset != 5 {
		t.Fatalf("offset for timestamp base+4.5s: got %d, want 5", o.Offset)
	}
	end, err := adm.ListEndOffsets(ctx, "adm")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := end.Lookup("adm", 0); o.Offset != 10 {
		t.Fatalf("end offset: got %d, want 10", o.Offset)
	}
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "adm", Partition: 0, At: 7})
	dr, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := dr.Lookup("adm", 0); r.Err != nil || r.LowWatermark != 7 {
		t.Fatalf("delete records: got low watermark %d err %v, want 7", r.LowWatermark, r.Err)
	}
	start, _ := adm.ListStartOffsets(ctx, "adm")
	if o, _ := start.Lookup("adm", 0); o.Offset != 7 {
		t.Fatalf("start offset after delete records: got %d, want 7", o.Offset)
	}
	if _, err := adm.DeleteTopics(ctx, "adm"); err != nil {
		t.Fatal(err)
	}
	td, _ = adm.ListTopics(ctx)
	if td.Has("adm") {
		t.Fatal("topic still listed after delete")
	}
}

func TestConsumerGroupRebalanceAndCommit(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	ctx := ctxT(t, 90*time.Second)
	adm := tb.admin()
	createTopicRF1(t, ctx, adm, "grp", 4)
	prod := tb.client(kgo.DefaultProduceTopic("grp"))
	for i := 0; i < 400; i++ {
		prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	newMember := func() *kgo.Client {
		return tb.client(kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("grp"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(300*time.Millisecond), kgo.DisableAutoCommit())
	}
	c1 := newMember()
	seen := map[string]bool{}
	for len(seen) < 200 {
		fs := c1.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("only %d records consumed", len(seen))
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	if err := c1.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := newMember()
	// Both members poll until the group settles with each owning partitions.
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		c1.PollFetches(pctx)
		c2.PollFetches(pctx)
		cancel()
		dg, err := adm.DescribeGroups(ctx, "g1")
		if err != nil {
			t.Fatal(err)
		}
		g := dg["g1"]
		if g.State == "Stable" && len(g.Members) == 2 {
			total := 0
			for _, m := range g.Members {
				ca, _ := m.Assigned.AsConsumer()
				for _, tp := range ca.Topics {
					total += len(tp.Partitions)
				}
				if len(ca.Topics) == 0 {
					total = -100
				}
			}
			if total == 4 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group did not settle with two members owning 4 partitions: state %s, members %d", g.State, len(g.Members))
		}
	}
	committed, err := adm.FetchOffsets(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	committed.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum < 200 {
		t.Fatalf("committed offsets sum to %d, want >= 200", sum)
	}
	lg, err := adm.ListGroups(ctx)
	if err != nil || len(lg) != 1 {
		t.Fatalf("list groups: %v %v", lg, err)
	}
}

func TestRestartKeepsDataOffsetsAndProducerIDs(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, dir)
	ctx := ctxT(t, 60*time.Second)
	prod := tb.client(kgo.DefaultProduceTopic("durable"), kgo.AllowAutoTopicCreation())
	for i := 0; i < 100; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := tb.admin()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "durable", Partition: 0, At: 42})
	if _, err := adm.CommitOffsets(ctx, "keeper", os); err != nil {
		t.Fatal(err)
	}
	prod.Close()
	tb.stop()

	tb2 := startBroker(t, dir)
	adm2 := tb2.admin()
	fo, err := adm2.FetchOffsets(ctx, "keeper")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fo.Lookup("durable", 0); !ok || o.At != 42 {
		t.Fatalf("committed offset after restart: got %+v, want 42", o)
	}
	end, _ := adm2.ListEndOffsets(ctx, "durable")
	if o, _ := end.Lookup("durable", 0); o.Offset != 100 {
		t.Fatalf("end offset after restart: got %d, want 100", o.Offset)
	}
	cons := tb2.client(kgo.ConsumeTopics("durable"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := 0
	for n < 100 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of 100 after restart", n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != fmt.Sprint(n) {
				t.Fatalf("offset %d: got %q, want %d", r.Offset, r.Value, n)
			}
			n++
		})
	}
}
