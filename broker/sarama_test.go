package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sarama (github.com/IBM/sarama) is the other widely used Go client, with
// its own protocol implementation. These tests run it unchanged against the
// broker: idempotent acks=all producer, async producer with every codec,
// partition consumer, consumer groups (eager and cooperative) with a
// rebalance, and the cluster admin.

var saramaLogOnce sync.Once

// saramaVersion is one sarama config.Version to run the suite with. The zero
// value leaves sarama's default.
type saramaVersion struct {
	name    string
	version sarama.KafkaVersion
	set     bool
}

func saramaVersions() []saramaVersion {
	return []saramaVersion{
		// The newest Kafka version sarama knows: it then asks for the newest
		// request versions it implements, clamped by our ApiVersions answer.
		{name: "v" + sarama.MaxVersion.String(), version: sarama.MaxVersion, set: true},
		{name: "default-v" + sarama.DefaultVersion.String()},
	}
}

// saramaManualProducer is a sync acks=all producer that sends each
// message to the partition it names.
func saramaManualProducer(t *testing.T, tb *testBroker, v saramaVersion) sarama.SyncProducer {
	t.Helper()
	pcfg := newSaramaConfig(t, v)
	pcfg.Producer.Return.Successes = true
	pcfg.Producer.RequiredAcks = sarama.WaitForAll
	pcfg.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer([]string{tb.Addr}, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	return prod
}

func newSaramaConfig(t *testing.T, v saramaVersion) *sarama.Config {
	t.Helper()
	saramaLogOnce.Do(func() {
		if os.Getenv("SIMTEL_TEST_LOG") != "" {
			sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
		}
	})
	cfg := sarama.NewConfig()
	cfg.ClientID = "simtel-sarama-test"
	if v.set {
		cfg.Version = v.version
	}
	cfg.Net.DialTimeout = 10 * time.Second
	cfg.Net.ReadTimeout = 15 * time.Second
	cfg.Net.WriteTimeout = 10 * time.Second
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	return cfg
}

func TestSarama(t *testing.T) {
	for _, v := range saramaVersions() {
		t.Run(v.name, func(t *testing.T) {
			tb := startBroker(t, t.TempDir())
			t.Run("IdempotentSyncProducer", func(t *testing.T) { testSaramaIdempotentSyncProducer(t, tb, v) })
			t.Run("AsyncProducerCompression", func(t *testing.T) { testSaramaAsyncCompression(t, tb, v) })
			t.Run("ConsumerGroup/range", func(t *testing.T) {
				testSaramaConsumerGroup(t, tb, v, "range", sarama.NewBalanceStrategyRange())
			})
			t.Run("ConsumerGroup/cooperative-sticky", func(t *testing.T) {
				testSaramaConsumerGroup(t, tb, v, "cooperative-sticky", sarama.NewBalanceStrategyCooperativeSticky())
			})
			t.Run("ClusterAdmin", func(t *testing.T) { testSaramaClusterAdmin(t, tb, v) })
		})
	}
}

func saramaAdmin(t *testing.T, tb *testBroker, v saramaVersion) sarama.ClusterAdmin {
	t.Helper()
	adm, err := sarama.NewClusterAdmin([]string{tb.Addr}, newSaramaConfig(t, v))
	if err != nil {
		t.Fatalf("sarama.NewClusterAdmin: %v", err)
	}
	t.Cleanup(func() { _ = adm.Close() })
	return adm
}

func saramaCreateTopic(t *testing.T, adm sarama.ClusterAdmin, topic string, partitions int32) {
	t.Helper()
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("CreateTopic %s: %v", topic, err)
	}
}

// wantMsg is what the test expects at one offset.
type wantMsg struct {
	key, value string
	headers    map[string]string
	timestamp  time.Time // zero: not checked
}

// saramaReadPartition reads partition p of topic from the oldest offset with
// a sarama partition consumer and checks that it holds exactly want, in
// order, at offsets start, start+1, ...
func saramaReadPartition(t *testing.T, tb *testBroker, v saramaVersion, topic string, p int32, start int64, want []wantMsg) {
	t.Helper()
	cfg := newSaramaConfig(t, v)
	cons, err := sarama.NewConsumer([]string{tb.Addr}, cfg)
	if err != nil {
		t.Fatalf("sarama.NewConsumer: %v", err)
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
	if err != nil {
		t.Fatalf("ConsumePartition %s-%d: %v", topic, p, err)
	}
	defer pc.Close()
	timeout := time.After(30 * time.Second)
	for i, w := range want {
		var m *sarama.ConsumerMessage
		select {
		case m = <-pc.Messages():
		case err := <-pc.Errors():
			t.Fatalf("%s-%d: consumer error after %d of %d messages: %v", topic, p, i, len(want), err)
		case <-timeout:
			t.Fatalf("%s-%d: read %d of %d messages before timeout", topic, p, i, len(want))
		}
		wantOff := start + int64(i)
		if m.Offset != wantOff || string(m.Key) != w.key || string(m.Value) != w.value {
			t.Fatalf("%s-%d message %d: got offset %d key %q value %q, want offset %d key %q value %q",
				topic, p, i, m.Offset, m.Key, m.Value, wantOff, w.key, w.value)
		}
		if w.headers != nil {
			got := map[string]string{}
			for _, h := range m.Headers {
				got[string(h.Key)] = string(h.Value)
			}
			if fmt.Sprint(got) != fmt.Sprint(w.headers) {
				t.Fatalf("%s-%d offset %d: headers %v, want %v", topic, p, m.Offset, got, w.headers)
			}
		}
		if !w.timestamp.IsZero() && !m.Timestamp.Equal(w.timestamp) {
			t.Fatalf("%s-%d offset %d: timestamp %v, want %v", topic, p, m.Offset, m.Timestamp, w.timestamp)
		}
	}
	if hwm := pc.HighWaterMarkOffset(); hwm != start+int64(len(want)) {
		t.Fatalf("%s-%d: high watermark %d, want %d", topic, p, hwm, start+int64(len(want)))
	}
	// Nothing beyond what was produced.
	select {
	case m := <-pc.Messages():
		t.Fatalf("%s-%d: unexpected extra message at offset %d: %q", topic, p, m.Offset, m.Value)
	case <-time.After(200 * time.Millisecond):
	}
}

// rawBatches fetches partition p of topic with franz-go's raw request API and
// returns the headers of the record batches up to offset end, as stored:
// how the client framed them (compression codec, producer id, record
// count). It waits for the high watermark (the durable end) to reach end:
// an acks=1 produce is acknowledged before its fsync.
func rawBatches(t *testing.T, tb *testBroker, topic string, p int32, end int64) []kmsg.RecordBatch {
	t.Helper()
	cl := tb.client()
	var batches []kmsg.RecordBatch
	offset := int64(0)
	deadline := time.Now().Add(15 * time.Second)
	for offset < end {
		if time.Now().After(deadline) {
			t.Fatalf("raw fetch %s-%d: reached offset %d of %d before timeout", topic, p, offset, end)
		}
		req := fetchOne(topic, p, offset, 50<<20)
		req.MinBytes = 1
		resp, err := req.RequestWith(ctxT(t, 10*time.Second), cl)
		if err != nil {
			t.Fatalf("raw fetch %s-%d: %v", topic, p, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("raw fetch %s-%d: unexpected response shape", topic, p)
		}
		rpart := resp.Topics[0].Partitions[0]
		if rpart.ErrorCode != 0 {
			t.Fatalf("raw fetch %s-%d: error code %d", topic, p, rpart.ErrorCode)
		}
		raw := rpart.RecordBatches
		for len(raw) >= 12 {
			size := 12 + int(int32(binary.BigEndian.Uint32(raw[8:12])))
			if size > len(raw) {
				break
			}
			var b kmsg.RecordBatch
			if err := b.ReadFrom(raw[:size]); err != nil {
				t.Fatalf("raw fetch %s-%d: bad batch: %v", topic, p, err)
			}
			batches = append(batches, b)
			offset = b.FirstOffset + int64(b.LastOffsetDelta) + 1
			raw = raw[size:]
		}
	}
	return batches
}

func testSaramaIdempotentSyncProducer(t *testing.T, tb *testBroker, v saramaVersion) {
	const topic, parts, n = "sarama-idem", 3, 600
	saramaCreateTopic(t, saramaAdmin(t, tb, v), topic, parts)

	cfg := newSaramaConfig(t, v)
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Retry.Max = 5
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer([]string{tb.Addr}, cfg)
	if err != nil {
		t.Fatalf("sarama.NewSyncProducer: %v", err)
	}
	defer prod.Close()

	base := time.UnixMilli(time.Now().UnixMilli())
	want := make([][]wantMsg, parts)
	msg := func(i int) *sarama.ProducerMessage {
		p := int32(i % parts)
		w := wantMsg{
			key:       fmt.Sprintf("k%d", i),
			value:     fmt.Sprintf("idem-%05d", i),
			headers:   map[string]string{"idx": fmt.Sprint(i), "src": "sarama"},
			timestamp: base.Add(time.Duration(i) * time.Millisecond),
		}
		want[p] = append(want[p], w)
		return &sarama.ProducerMessage{
			Topic: topic, Partition: p,
			Key:   sarama.StringEncoder(w.key),
			Value: sarama.StringEncoder(w.value),
			Headers: []sarama.RecordHeader{
				{Key: []byte("idx"), Value: []byte(fmt.Sprint(i))},
				{Key: []byte("src"), Value: []byte("sarama")},
			},
			Timestamp: w.timestamp,
		}
	}
	// First half one at a time: each SendMessage is one acks=all round trip
	// and must get the next offset of its partition.
	for i := 0; i < n/2; i++ {
		m := msg(i)
		p, off, err := prod.SendMessage(m)
		if err != nil {
			t.Fatalf("SendMessage %d: %v", i, err)
		}
		if p != m.Partition || off != int64(len(want[p])-1) {
			t.Fatalf("SendMessage %d: stored at %d/%d, want %d/%d", i, p, off, m.Partition, len(want[p])-1)
		}
	}
	// Second half in one SendMessages call (several messages per batch).
	var batch []*sarama.ProducerMessage
	for i := n / 2; i < n; i++ {
		batch = append(batch, msg(i))
	}
	if err := prod.SendMessages(batch); err != nil {
		t.Fatalf("SendMessages: %v", err)
	}
	seen := map[int32]int64{}
	for i, m := range batch {
		if m.Partition != int32((n/2+i)%parts) {
			t.Fatalf("SendMessages message %d went to partition %d", n/2+i, m.Partition)
		}
		if off, ok := seen[m.Partition]; ok && m.Offset != off+1 {
			t.Fatalf("SendMessages message %d: offset %d after %d in partition %d", n/2+i, m.Offset, off, m.Partition)
		}
		seen[m.Partition] = m.Offset
	}
	for p := int32(0); p < parts; p++ {
		if seen[p] != int64(len(want[p])-1) {
			t.Fatalf("partition %d: last offset %d, want %d", p, seen[p], len(want[p])-1)
		}
	}

	// The batches really are idempotent: they carry a producer id and
	// contiguous sequence numbers.
	for p := int32(0); p < parts; p++ {
		bs := rawBatches(t, tb, topic, p, int64(len(want[p])))
		var records int32
		for _, b := range bs {
			if b.ProducerID < 0 {
				t.Fatalf("partition %d batch at %d: producer id %d, want an idempotent producer id", p, b.FirstOffset, b.ProducerID)
			}
			if b.FirstSequence != records {
				t.Fatalf("partition %d batch at %d: first sequence %d, want %d", p, b.FirstOffset, b.FirstSequence, records)
			}
			records += b.NumRecords
		}
		if int(records) != len(want[p]) {
			t.Fatalf("partition %d: %d records in batches, want %d", p, records, len(want[p]))
		}
	}

	for p := int32(0); p < parts; p++ {
		saramaReadPartition(t, tb, v, topic, p, 0, want[p])
	}

	// ListOffsets by timestamp: partition 0 holds messages 0, 3, 6, ...
	// with timestamps base+i ms; the first at or after base+31ms is message
	// 33, at offset 11.
	cl, err := sarama.NewClient([]string{tb.Addr}, newSaramaConfig(t, v))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if off, err := cl.GetOffset(topic, 0, base.Add(31*time.Millisecond).UnixMilli()); err != nil || off != 11 {
		t.Fatalf("GetOffset by timestamp base+31ms: %d %v, want 11", off, err)
	}
	if off, err := cl.GetOffset(topic, 0, base.Add(time.Hour).UnixMilli()); err != nil || off != -1 {
		t.Fatalf("GetOffset by a timestamp after every record: %d %v, want -1", off, err)
	}
}

func testSaramaAsyncCompression(t *testing.T, tb *testBroker, v saramaVersion) {
	codecs := []struct {
		name  string
		codec sarama.CompressionCodec
	}{
		{"snappy", sarama.CompressionSnappy},
		{"lz4", sarama.CompressionLZ4},
		{"zstd", sarama.CompressionZSTD},
		{"gzip", sarama.CompressionGZIP},
	}
	adm := saramaAdmin(t, tb, v)
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			const parts, n = 2, 2000
			topic := "sarama-" + c.name
			saramaCreateTopic(t, adm, topic, parts)

			cfg := newSaramaConfig(t, v)
			cfg.Producer.Compression = c.codec
			cfg.Producer.Return.Successes = true
			cfg.Producer.Flush.Messages = 200
			cfg.Producer.Flush.Frequency = 5 * time.Millisecond
			cfg.Producer.RequiredAcks = sarama.WaitForLocal
			prod, err := sarama.NewAsyncProducer([]string{tb.Addr}, cfg)
			if err != nil {
				t.Fatalf("sarama.NewAsyncProducer: %v", err)
			}
			pad := strings.Repeat(c.name, 40)
			go func() {
				for i := 0; i < n; i++ {
					prod.Input() <- &sarama.ProducerMessage{
						Topic:    topic,
						Key:      sarama.StringEncoder(fmt.Sprintf("key-%d", i%37)),
						Value:    sarama.StringEncoder(fmt.Sprintf("%s-%06d-%s", c.name, i, pad)),
						Metadata: i,
					}
				}
			}()
			// Offsets the broker acknowledged, per partition: offset -> send index.
			acked := map[int32]map[int64]int{}
			timeout := time.After(60 * time.Second)
			for got := 0; got < n; got++ {
				select {
				case m := <-prod.Successes():
					if acked[m.Partition] == nil {
						acked[m.Partition] = map[int64]int{}
					}
					if prev, dup := acked[m.Partition][m.Offset]; dup {
						t.Fatalf("messages %d and %d both acknowledged at %d/%d", prev, m.Metadata, m.Partition, m.Offset)
					}
					acked[m.Partition][m.Offset] = m.Metadata.(int)
				case pe := <-prod.Errors():
					t.Fatalf("async produce of message %v failed: %v", pe.Msg.Metadata, pe.Err)
				case <-timeout:
					t.Fatalf("only %d of %d messages acknowledged", got, n)
				}
			}
			if err := prod.Close(); err != nil {
				t.Fatalf("async producer close: %v", err)
			}

			total := 0
			for p := int32(0); p < parts; p++ {
				// Offsets are dense and in send order (same key, same
				// partition; one in-flight batch order per partition).
				var want []wantMsg
				last := -1
				for off := int64(0); off < int64(len(acked[p])); off++ {
					i, ok := acked[p][off]
					if !ok {
						t.Fatalf("partition %d: no message acknowledged at offset %d (acks: %d)", p, off, len(acked[p]))
					}
					if i <= last {
						t.Fatalf("partition %d: message %d at offset %d after message %d", p, i, off, last)
					}
					last = i
					want = append(want, wantMsg{key: fmt.Sprintf("key-%d", i%37), value: fmt.Sprintf("%s-%06d-%s", c.name, i, pad)})
				}
				total += len(want)

				// Stored as sarama framed it: compressed with the codec,
				// several records per batch.
				bs := rawBatches(t, tb, topic, p, int64(len(want)))
				multi := false
				for _, b := range bs {
					if got := sarama.CompressionCodec(b.Attributes & 0x7); got != c.codec {
						t.Fatalf("partition %d batch at %d: codec %v, want %v", p, b.FirstOffset, got, c.codec)
					}
					if b.NumRecords > 1 {
						multi = true
					}
				}
				if len(want) > 0 && !multi {
					t.Fatalf("partition %d: every batch has a single record; compression not exercised", p)
				}

				saramaReadPartition(t, tb, v, topic, p, 0, want)
			}
			if total != n {
				t.Fatalf("%d messages acknowledged, want %d", total, n)
			}
		})
	}
}

// groupMember runs one sarama consumer group member in the background.
type groupMember struct {
	name string
	t    *testing.T
	cg   sarama.ConsumerGroup
	done chan struct{}

	mu       sync.Mutex
	claims   map[int32]bool    // partitions with a running ConsumeClaim
	consumed map[int32][]int64 // offsets handed to this member, in order
	bad      []string
}

func (m *groupMember) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (m *groupMember) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (m *groupMember) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	m.mu.Lock()
	m.claims[c.Partition()] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.claims, c.Partition())
		m.mu.Unlock()
	}()
	for msg := range c.Messages() {
		want := fmt.Sprintf("p%d-%03d", msg.Partition, msg.Offset)
		m.mu.Lock()
		if string(msg.Value) != want || string(msg.Key) != fmt.Sprint(msg.Partition) {
			m.bad = append(m.bad, fmt.Sprintf("%s-%d@%d: key %q value %q, want key %q value %q",
				msg.Topic, msg.Partition, msg.Offset, msg.Key, msg.Value, fmt.Sprint(msg.Partition), want))
		}
		m.consumed[msg.Partition] = append(m.consumed[msg.Partition], msg.Offset)
		m.mu.Unlock()
		s.MarkMessage(msg, "")
	}
	return nil
}

func (m *groupMember) snapshot() (claims []int32, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.claims {
		claims = append(claims, p)
	}
	slices.Sort(claims)
	for _, offs := range m.consumed {
		n += len(offs)
	}
	return claims, n
}

func startGroupMember(t *testing.T, tb *testBroker, v saramaVersion, group, topic, name string, strategy sarama.BalanceStrategy) *groupMember {
	t.Helper()
	cfg := newSaramaConfig(t, v)
	cfg.ClientID = "sarama-" + name
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = true
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 200 * time.Millisecond
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy}
	cg, err := sarama.NewConsumerGroup([]string{tb.Addr}, group, cfg)
	if err != nil {
		t.Fatalf("sarama.NewConsumerGroup: %v", err)
	}
	m := &groupMember{name: name, t: t, cg: cg, done: make(chan struct{}), claims: map[int32]bool{}, consumed: map[int32][]int64{}}
	go func() {
		for err := range cg.Errors() {
			m.mu.Lock()
			m.bad = append(m.bad, fmt.Sprintf("consumer group error: %v", err))
			m.mu.Unlock()
		}
	}()
	go func() {
		defer close(m.done)
		for {
			err := cg.Consume(context.Background(), []string{topic}, m)
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return
			}
			if err != nil {
				m.mu.Lock()
				m.bad = append(m.bad, fmt.Sprintf("Consume: %v", err))
				m.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() { m.close() })
	return m
}

func (m *groupMember) close() {
	if err := m.cg.Close(); err != nil {
		m.t.Errorf("%s: close: %v", m.name, err)
	}
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		m.t.Errorf("%s: Consume did not return after Close", m.name)
	}
}

func (m *groupMember) checkNoErrors(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.bad) > 0 {
		t.Fatalf("member %s:\n%s", m.name, strings.Join(m.bad, "\n"))
	}
}

func testSaramaConsumerGroup(t *testing.T, tb *testBroker, v saramaVersion, strategyName string, strategy sarama.BalanceStrategy) {
	const parts, perPhase = 4, 50
	topic := "sarama-grp-" + strategyName
	group := "sarama-group-" + strategyName
	adm := saramaAdmin(t, tb, v)
	saramaCreateTopic(t, adm, topic, parts)

	prod := saramaManualProducer(t, tb, v)
	defer prod.Close()
	produce := func(from, to int) {
		t.Helper()
		var msgs []*sarama.ProducerMessage
		for i := from; i < to; i++ {
			for p := int32(0); p < parts; p++ {
				msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: p,
					Key: sarama.StringEncoder(fmt.Sprint(p)), Value: sarama.StringEncoder(fmt.Sprintf("p%d-%03d", p, i))})
			}
		}
		if err := prod.SendMessages(msgs); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	committed := func() (map[int32]int64, error) {
		resp, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2, 3}})
		if err != nil {
			return nil, err
		}
		if resp.Err != sarama.ErrNoError {
			return nil, resp.Err
		}
		out := map[int32]int64{}
		for p := int32(0); p < parts; p++ {
			b := resp.GetBlock(topic, p)
			if b == nil {
				return nil, fmt.Errorf("no offset block for partition %d", p)
			}
			if b.Err != sarama.ErrNoError {
				return nil, fmt.Errorf("partition %d: %w", p, b.Err)
			}
			out[p] = b.Offset
		}
		return out, nil
	}
	waitCommitted := func(want int64) {
		t.Helper()
		waitUntil(t, 15*time.Second, fmt.Sprintf("committed offsets %d on every partition", want), func() string {
			c, err := committed()
			if err != nil {
				return err.Error()
			}
			for p := int32(0); p < parts; p++ {
				if c[p] != want {
					return fmt.Sprint(c)
				}
			}
			return ""
		})
	}

	// Phase 1: two members share the four partitions.
	a := startGroupMember(t, tb, v, group, topic, "a", strategy)
	b := startGroupMember(t, tb, v, group, topic, "b", strategy)
	waitUntil(t, 30*time.Second, "two members each owning two partitions", func() string {
		ca, _ := a.snapshot()
		cb, _ := b.snapshot()
		all := append(slices.Clone(ca), cb...)
		slices.Sort(all)
		if len(ca) == 2 && len(cb) == 2 && slices.Equal(all, []int32{0, 1, 2, 3}) {
			return ""
		}
		return fmt.Sprintf("a=%v b=%v", ca, cb)
	})
	groups, err := adm.DescribeConsumerGroups([]string{group})
	if err != nil || len(groups) != 1 {
		t.Fatalf("DescribeConsumerGroups: %v %v", groups, err)
	}
	if g := groups[0]; g.Err != sarama.ErrNoError || g.State != "Stable" || g.ProtocolType != "consumer" || len(g.Members) != 2 || g.Protocol != strategy.Name() {
		t.Fatalf("DescribeConsumerGroups: err %v state %q protocol type %q protocol %q members %d; want Stable consumer %s 2",
			g.Err, g.State, g.ProtocolType, g.Protocol, len(g.Members), strategy.Name())
	} else {
		owned := map[int32]string{}
		for id, md := range g.Members {
			as, err := md.GetMemberAssignment()
			if err != nil {
				t.Fatalf("member %s assignment: %v", id, err)
			}
			for _, p := range as.Topics[topic] {
				if prev, dup := owned[p]; dup {
					t.Fatalf("partition %d assigned to %s and %s", p, prev, id)
				}
				owned[p] = id
			}
			if !strings.HasPrefix(md.ClientId, "sarama-") {
				t.Fatalf("member %s client id %q", id, md.ClientId)
			}
		}
		if len(owned) != parts {
			t.Fatalf("described assignment covers %d partitions, want %d", len(owned), parts)
		}
	}

	// consumed says how many records a and b consumed until they are want.
	consumed := func(want int) func() string {
		return func() string {
			_, na := a.snapshot()
			_, nb := b.snapshot()
			if na+nb == want {
				return ""
			}
			return fmt.Sprintf("a=%d b=%d", na, nb)
		}
	}
	produce(0, perPhase)
	waitUntil(t, 30*time.Second, "both members to consume phase 1", consumed(parts*perPhase))
	waitCommitted(perPhase)
	a.checkNoErrors(t)
	b.checkNoErrors(t)
	bClaims, _ := b.snapshot()

	// Phase 2: b leaves; a takes over b's partitions from the committed
	// offsets.
	b.close()
	waitUntil(t, 30*time.Second, "a to own all partitions after b left", func() string {
		if ca, _ := a.snapshot(); !slices.Equal(ca, []int32{0, 1, 2, 3}) {
			return fmt.Sprintf("a=%v", ca)
		}
		return ""
	})
	produce(perPhase, 2*perPhase)
	waitUntil(t, 30*time.Second, "a to consume phase 2", consumed(2*parts*perPhase))
	a.checkNoErrors(t)
	b.checkNoErrors(t)

	// Every offset exactly once across both members, in order per member.
	a.mu.Lock()
	b.mu.Lock()
	for p := int32(0); p < parts; p++ {
		var all []int64
		for _, m := range []*groupMember{a, b} {
			if !sort.SliceIsSorted(m.consumed[p], func(i, j int) bool { return m.consumed[p][i] < m.consumed[p][j] }) {
				t.Errorf("member %s consumed partition %d out of order: %v", m.name, p, m.consumed[p])
			}
			all = append(all, m.consumed[p]...)
		}
		slices.Sort(all)
		for i, off := range all {
			if off != int64(i) {
				t.Errorf("partition %d: consumed offsets %v, want 0..%d each once", p, all, 2*perPhase-1)
				break
			}
		}
		if len(all) != 2*perPhase {
			t.Errorf("partition %d: consumed %d records, want %d", p, len(all), 2*perPhase)
		}
		if slices.Contains(bClaims, p) && (len(b.consumed[p]) != perPhase || len(a.consumed[p]) != perPhase || a.consumed[p][0] != perPhase) {
			t.Errorf("partition %d moved from b to a: b read %d, a read %d starting at %v; want %d each, a from offset %d",
				p, len(b.consumed[p]), len(a.consumed[p]), a.consumed[p], perPhase, perPhase)
		}
	}
	a.mu.Unlock()
	b.mu.Unlock()
	if t.Failed() {
		t.FailNow()
	}

	// Committed offsets seen through sarama's OffsetManager.
	waitCommitted(2 * perPhase)
	cl, err := sarama.NewClient([]string{tb.Addr}, newSaramaConfig(t, v))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	om, err := sarama.NewOffsetManagerFromClient(group, cl)
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < parts; p++ {
		pom, err := om.ManagePartition(topic, p)
		if err != nil {
			t.Fatalf("ManagePartition %d: %v", p, err)
		}
		if off, _ := pom.NextOffset(); off != 2*perPhase {
			t.Fatalf("OffsetManager: partition %d next offset %d, want %d", p, off, 2*perPhase)
		}
		pom.AsyncClose() // Close would wait for the next auto-commit tick
	}
	_ = om.Close()

	lg, err := adm.ListConsumerGroups()
	if err != nil {
		t.Fatalf("ListConsumerGroups: %v", err)
	}
	if lg[group] != "consumer" {
		t.Fatalf("ListConsumerGroups: %v, want %s with protocol type consumer", lg, group)
	}

	// Last member leaves: group empty, offsets kept.
	a.close()
	groups, err = adm.DescribeConsumerGroups([]string{group})
	if err != nil || len(groups) != 1 {
		t.Fatalf("DescribeConsumerGroups: %v %v", groups, err)
	}
	if g := groups[0]; g.State != "Empty" || len(g.Members) != 0 {
		t.Fatalf("after both members left: state %q with %d members, want Empty with 0", g.State, len(g.Members))
	}
	if c, err := committed(); err != nil || len(c) != parts || c[0] != 2*perPhase || c[3] != 2*perPhase {
		t.Fatalf("committed offsets after the group emptied: %v %v", c, err)
	}

	// OffsetDelete of one partition, then DeleteGroups.
	if err := adm.DeleteConsumerGroupOffset(group, topic, 0); err != nil {
		t.Fatalf("DeleteConsumerGroupOffset: %v", err)
	}
	if c, err := committed(); err != nil || c[0] != -1 || c[1] != 2*perPhase {
		t.Fatalf("committed offsets after deleting partition 0's: %v %v; want -1 for partition 0 only", c, err)
	}
	if err := adm.DeleteConsumerGroup(group); err != nil {
		t.Fatalf("DeleteConsumerGroup: %v", err)
	}
	if lg, err := adm.ListConsumerGroups(); err != nil {
		t.Fatalf("ListConsumerGroups: %v", err)
	} else if _, ok := lg[group]; ok {
		t.Fatalf("group %s still listed after DeleteConsumerGroup", group)
	}
	if c, err := committed(); err != nil || c[1] != -1 {
		t.Fatalf("committed offsets after DeleteConsumerGroup: %v %v; want none", c, err)
	}
}

func testSaramaClusterAdmin(t *testing.T, tb *testBroker, v saramaVersion) {
	const topic = "sarama-admin"
	adm := saramaAdmin(t, tb, v)

	retention := "3600000"
	err := adm.CreateTopic(topic, &sarama.TopicDetail{
		NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention},
	}, false)
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Fatalf("CreateTopic of an existing topic: %v, want %v", err, sarama.ErrTopicAlreadyExists)
	}
	if err := adm.CreateTopic("sarama-validate-only", &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, true); err != nil {
		t.Fatalf("CreateTopic validate-only: %v", err)
	}

	topics, err := adm.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if d, ok := topics[topic]; !ok || d.NumPartitions != 3 || d.ReplicationFactor != 1 {
		t.Fatalf("ListTopics: %s = %+v (present %v), want 3 partitions, replication 1", topic, d, ok)
	}
	if _, ok := topics["sarama-validate-only"]; ok {
		t.Fatal("validate-only CreateTopic created the topic")
	}
	md, err := adm.DescribeTopics([]string{topic})
	if err != nil || len(md) != 1 || md[0].Err != sarama.ErrNoError || len(md[0].Partitions) != 3 {
		t.Fatalf("DescribeTopics: %v %v", md, err)
	}
	brokers, controller, err := adm.DescribeCluster()
	if err != nil || len(brokers) != 1 || brokers[0].ID() != controller || brokers[0].Addr() != tb.Addr {
		t.Fatalf("DescribeCluster: %v controller %d, %v; want one broker at %s being the controller", brokers, controller, err, tb.Addr)
	}

	describe := func() map[string]sarama.ConfigEntry {
		t.Helper()
		entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
		if err != nil {
			t.Fatalf("DescribeConfig: %v", err)
		}
		out := map[string]sarama.ConfigEntry{}
		for _, e := range entries {
			out[e.Name] = e
		}
		return out
	}
	cfgs := describe()
	if e := cfgs["retention.ms"]; e.Value != retention || e.Default || e.Source != sarama.SourceTopic {
		t.Fatalf("DescribeConfig retention.ms = %+v, want %s from the topic", e, retention)
	}
	if e := cfgs["cleanup.policy"]; e.Value != "delete" || e.Source == sarama.SourceTopic {
		t.Fatalf("DescribeConfig cleanup.policy = %+v, want default delete", e)
	}
	if be, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.BrokerResource, Name: fmt.Sprint(brokers[0].ID())}); err != nil || len(be) == 0 {
		t.Fatalf("DescribeConfig of the broker: %d entries, %v", len(be), err)
	}
	// Only the named keys.
	sel, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"retention.ms"}})
	if err != nil || len(sel) != 1 || sel[0].Name != "retention.ms" {
		t.Fatalf("DescribeConfig of retention.ms only: %+v %v", sel, err)
	}

	// AlterConfigs replaces the topic's whole config set (Kafka semantics):
	// retention.ms goes back to its default.
	compact, segment := "compact,delete", "1048576"
	if err := adm.AlterConfig(sarama.TopicResource, topic, map[string]*string{"cleanup.policy": &compact, "segment.bytes": &segment}, false); err != nil {
		t.Fatalf("AlterConfig: %v", err)
	}
	cfgs = describe()
	if e := cfgs["cleanup.policy"]; e.Value != compact || e.Source != sarama.SourceTopic {
		t.Fatalf("after AlterConfig: cleanup.policy = %+v, want %s", e, compact)
	}
	if e := cfgs["segment.bytes"]; e.Value != segment {
		t.Fatalf("after AlterConfig: segment.bytes = %+v, want %s", e, segment)
	}
	if e := cfgs["retention.ms"]; e.Value == retention || e.Source == sarama.SourceTopic {
		t.Fatalf("after AlterConfig without retention.ms: retention.ms = %+v, want the default", e)
	}
	bad := "-7x"
	if err := adm.AlterConfig(sarama.TopicResource, topic, map[string]*string{"retention.ms": &bad}, false); err == nil {
		t.Fatal("AlterConfig retention.ms=-7x succeeded")
	}
	if err := adm.AlterConfig(sarama.TopicResource, topic, map[string]*string{"no.such.config": &bad}, false); err == nil {
		t.Fatal("AlterConfig of an unknown config succeeded")
	}
	// IncrementalAlterConfigs changes one key and keeps the others.
	if err := adm.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &retention},
	}, false); err != nil {
		t.Fatalf("IncrementalAlterConfig: %v", err)
	}
	cfgs = describe()
	if cfgs["retention.ms"].Value != retention || cfgs["cleanup.policy"].Value != compact {
		t.Fatalf("after IncrementalAlterConfig: retention.ms %+v cleanup.policy %+v", cfgs["retention.ms"], cfgs["cleanup.policy"])
	}

	// DeleteRecords moves the log start offset. acks=all: the high
	// watermark is the durable end, and DeleteRecords refuses offsets
	// above it (an acks=1 produce may not be fsynced yet).
	prod := saramaManualProducer(t, tb, v)
	var want []wantMsg
	for i := 0; i < 10; i++ {
		k, val := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 1, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(val)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, wantMsg{key: k, value: val})
	}
	_ = prod.Close()
	if err := adm.DeleteRecords(topic, map[int32]int64{1: 4}); err != nil {
		t.Fatalf("DeleteRecords: %v", err)
	}
	if err := adm.DeleteRecords(topic, map[int32]int64{1: 11}); err == nil {
		t.Fatal("DeleteRecords past the high watermark succeeded")
	}
	cl, err := sarama.NewClient([]string{tb.Addr}, newSaramaConfig(t, v))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if off, err := cl.GetOffset(topic, 1, sarama.OffsetOldest); err != nil || off != 4 {
		t.Fatalf("oldest offset after DeleteRecords: %d %v, want 4", off, err)
	}
	if off, err := cl.GetOffset(topic, 1, sarama.OffsetNewest); err != nil || off != 10 {
		t.Fatalf("newest offset after DeleteRecords: %d %v, want 10", off, err)
	}
	saramaReadPartition(t, tb, v, topic, 1, 4, want[4:])

	if err := adm.CreatePartitions(topic, 5, nil, false); err != nil {
		t.Fatalf("CreatePartitions: %v", err)
	}
	if md, err := adm.DescribeTopics([]string{topic}); err != nil || len(md) != 1 || len(md[0].Partitions) != 5 {
		t.Fatalf("DescribeTopics after CreatePartitions: %v %v", md, err)
	}

	if err := adm.DeleteTopic(topic); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if err := adm.DeleteTopic(topic); !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		t.Fatalf("DeleteTopic of a deleted topic: %v, want %v", err, sarama.ErrUnknownTopicOrPartition)
	}
	topics, err = adm.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if _, ok := topics[topic]; ok {
		t.Fatal("topic still listed after DeleteTopic")
	}
}
