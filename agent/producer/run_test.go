package producer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/agent/producer"
	"github.com/simtel/simtel/agent/spool"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// memSpool is a spool in memory: it hands out its records at most
// perRead at a time and remembers every Ack.
type memSpool struct {
	recs    []spool.Record
	perRead int

	mu   sync.Mutex
	next int         // index of the next record to read
	acks []spool.Pos // in the order they came
	all  chan struct{}
}

func (m *memSpool) Read(ctx context.Context, maxRecords, maxBytes int) ([]spool.Record, spool.Pos, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next == len(m.recs) {
		m.mu.Unlock()
		<-ctx.Done() // a spool read waits for records
		m.mu.Lock()
		return nil, spool.Pos{}, ctx.Err()
	}
	end, size := m.next, 0
	for end < len(m.recs) && end-m.next < min(m.perRead, maxRecords) && (end == m.next || size < maxBytes) {
		size += len(m.recs[end].Key) + len(m.recs[end].Value)
		end++
	}
	out := m.recs[m.next:end]
	m.next = end
	return out, spool.Pos{Seq: uint64(end), Offset: uint64(end)}, nil
}

func (m *memSpool) AppendedAfter(pos spool.Pos) uint64 { return uint64(len(m.recs)) - pos.Seq }

func (m *memSpool) Ack(pos spool.Pos) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acks = append(m.acks, pos)
	if pos.Seq == uint64(len(m.recs)) {
		close(m.all)
	}
	return nil
}

// TestRunDeliversSpoolInOrder: the producer takes the spool's records read
// by read, the broker gets every one once, in spool order, under its key;
// the spool is acknowledged read by read up to its end, and each read is
// reported delivered with its count.
func TestRunDeliversSpoolInOrder(t *testing.T) {
	br := brokertest.Start(t, brokertest.Topic("telemetry", 1))
	const n, perRead = 2000, 300
	sp := &memSpool{perRead: perRead, all: make(chan struct{})}
	t0 := time.Now().UnixNano()
	for i := range n {
		sp.recs = append(sp.recs, spool.Record{Key: []byte("run-a/node7"), Value: fmt.Appendf(nil, "m seq=%di %d", i, t0+int64(i)), Time: t0 + int64(i)})
	}
	var mu sync.Mutex
	var got []producer.Delivery
	p, err := producer.New(producer.Config{
		Brokers:       []string{br.Addr},
		Topic:         "telemetry",
		Linger:        time.Millisecond,
		BatchMaxBytes: 1 << 20,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnDelivery: func(d producer.Delivery) {
			mu.Lock()
			got = append(got, d)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, sp); close(done) }()
	select {
	case <-sp.all:
	case <-time.After(30 * time.Second):
		t.Errorf("the spool was not acknowledged to its end within 30s")
	}
	cancel()
	p.Close()
	<-done

	reads := (n + perRead - 1) / perRead
	sp.mu.Lock()
	if len(sp.acks) != reads {
		t.Errorf("%d acks, want one per read, %d", len(sp.acks), reads)
	}
	for i, a := range sp.acks {
		if want := uint64(min((i+1)*perRead, n)); a.Seq != want {
			t.Errorf("ack %d at %d, want %d (read by read, in order)", i, a.Seq, want)
		}
	}
	sp.mu.Unlock()
	sent := 0
	for _, d := range got {
		sent += d.Sent
		if d.Dropped != 0 || d.Latency <= 0 {
			t.Errorf("delivery %+v: want nothing dropped and a latency", d)
		}
	}
	if len(got) != reads || sent != n {
		t.Errorf("%d deliveries of %d samples, want %d of %d", len(got), sent, reads, n)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addr), kgo.ConsumeTopics("telemetry"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	i := 0
	for i < n && rctx.Err() == nil {
		cl.PollFetches(rctx).EachRecord(func(r *kgo.Record) {
			if string(r.Value) != string(sp.recs[min(i, n-1)].Value) || string(r.Key) != "run-a/node7" {
				t.Fatalf("record %d: key %q value %q, want %q", i, r.Key, r.Value, sp.recs[min(i, n-1)].Value)
			}
			if ms := (t0 + int64(i)) / 1e6; r.Timestamp.UnixMilli() != ms {
				t.Fatalf("record %d: time %d ms, want %d", i, r.Timestamp.UnixMilli(), ms)
			}
			i++
		})
	}
	if i != n {
		t.Fatalf("%d of %d records reached the topic", i, n)
	}
}

// TestNewNeedsBrokersTopicAndLimit: a Config without brokers, topic or a
// positive batch limit is refused.
func TestNewNeedsBrokersTopicAndLimit(t *testing.T) {
	ok := producer.Config{Brokers: []string{"127.0.0.1:9"}, Topic: "t", BatchMaxBytes: 1}
	for name, mod := range map[string]func(*producer.Config){
		"no brokers": func(c *producer.Config) { c.Brokers = nil },
		"no topic":   func(c *producer.Config) { c.Topic = "" },
		"no limit":   func(c *producer.Config) { c.BatchMaxBytes = 0 },
	} {
		c := ok
		mod(&c)
		if _, err := producer.New(c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	p, err := producer.New(ok)
	if err != nil {
		t.Fatalf("valid config: %v", err)
	}
	p.Close()
}
