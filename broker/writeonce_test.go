package broker_test

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterWritesEachByteOnce: a replicated partition's batches are
// written once per replica, into the partition log; the broker's raft WAL
// keeps references to them (and votes, configurations), a small fraction
// of the bytes. Three brokers, a 2-partition RF 3 topic, 16 MiB of
// incompressible records from an idempotent acks=all client: every
// broker's raft WAL wrote under 5 % of what was produced, and every
// broker's logs hold all of it.
func TestClusterWritesEachByteOnce(t *testing.T) {
	bs, _, seeds, ctx := startClusterFor(t, 3, 3*time.Minute)
	createTopic(t, ctx, seeds, "once", 2, 3)
	waitLeaders(t, ctx, seeds, "once", 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("once"), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 16 << 10
	recs := make([]*kgo.Record, 0, 256)
	for i := 0; i < n; i++ {
		v := make([]byte, 1024)
		_, _ = rand.Read(v)
		recs = append(recs, &kgo.Record{Value: v})
		if len(recs) == cap(recs) || i == n-1 {
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	produced := 0.0
	for _, b := range bs {
		v, err := metricSum(b.HTTPAddr, "simtel_broker_produced_bytes_total")
		if err != nil {
			t.Fatal(err)
		}
		produced += v
	}
	if produced < n*1024 {
		t.Fatalf("the brokers count %.0f bytes produced to the topic, want at least %d", produced, n*1024)
	}
	for _, b := range bs {
		wal, err := metricSum(b.HTTPAddr, "simtel_broker_raft_wal_written_bytes_total")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("broker %d: raft WAL wrote %.0f bytes for %.0f produced (%.2f %%)", b.ID, wal, produced, 100*wal/produced)
		if wal > produced/20 {
			t.Errorf("broker %d: the raft WAL wrote %.0f bytes for %.0f bytes produced: the batches went into it", b.ID, wal, produced)
		}
	}
	// Every replica has all of it in its partition log (applied).
	waitUntil(t, time.Minute, "every replica applied everything", func() string {
		for _, b := range bs {
			hws, err := hwOf(b.HTTPAddr, "once")
			if err != nil {
				return err.Error()
			}
			if hws[0]+hws[1] != n {
				return fmt.Sprintf("broker %d has applied %d and %d records of %d", b.ID, hws[0], hws[1], n)
			}
		}
		return ""
	})
}
