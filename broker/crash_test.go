package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// TestCrashLosesNoAckedRecord SIGKILLs a real broker process three times
// while idempotent producers send with acks=all and keep retrying across
// the restarts. Afterwards every acknowledged record is in the log exactly
// once, at the offset it was acknowledged with, and each producer's records
// are in the order it sent them.
func TestCrashLosesNoAckedRecord(t *testing.T) {
	// brokertest skips it with -short: it starts a broker process.
	b := brokertest.Start(t, brokertest.SkipShort(), brokertest.Topic("crash", 3))
	addr := b.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	type ack struct {
		partition int32
		offset    int64
	}
	var mu sync.Mutex
	acked := map[string]ack{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const producers = 4
	for w := 0; w < producers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("crash"),
				kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(1<<30), kgo.RetryTimeout(0),
				kgo.ProducerLinger(2*time.Millisecond), kgo.RecordDeliveryTimeout(0))
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					if err := cl.Flush(ctx); err != nil {
						t.Errorf("producer %d flush: %v", w, err)
					}
					return
				default:
				}
				key := fmt.Sprintf("p%d", w)
				val := fmt.Sprintf("p%d-%08d", w, i)
				cl.Produce(ctx, &kgo.Record{Key: []byte(key), Value: []byte(val)}, func(r *kgo.Record, err error) {
					if err != nil {
						return // not acknowledged: may or may not be stored
					}
					mu.Lock()
					acked[val] = ack{r.Partition, r.Offset}
					mu.Unlock()
				})
				if i%200 == 199 {
					time.Sleep(time.Millisecond)
				}
			}
		}(w)
	}
	for round := 0; round < 3; round++ {
		time.Sleep(1500 * time.Millisecond)
		b.Kill()
		time.Sleep(300 * time.Millisecond)
		b.Restart()
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if len(acked) == 0 {
		t.Fatal("no record was acknowledged")
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("crash"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	endAdm := kadm.NewClient(cons)
	ends, err := endAdm.ListEndOffsets(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	seen := map[string]ack{}
	lastSeq := map[string]int{}
	for int64(len(seen)) < total {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(seen), total)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if prev, dup := seen[v]; dup {
				t.Fatalf("record %s stored twice: offsets %d and %d", v, prev.offset, r.Offset)
			}
			seen[v] = ack{r.Partition, r.Offset}
			w, seqStr, _ := strings.Cut(v, "-")
			seq, _ := strconv.Atoi(seqStr)
			if last, ok := lastSeq[w]; ok && seq <= last {
				t.Fatalf("producer %s: record %d stored after %d", w, seq, last)
			}
			lastSeq[w] = seq
		})
	}
	for v, a := range acked {
		got, ok := seen[v]
		if !ok {
			t.Fatalf("acknowledged record %s (partition %d offset %d) is missing after %d crashes", v, a.partition, a.offset, 3)
		}
		if got != a {
			t.Fatalf("acknowledged record %s: acked at %d/%d, found at %d/%d", v, a.partition, a.offset, got.partition, got.offset)
		}
	}
	t.Logf("%d records acknowledged, %d stored, all acknowledged found exactly once across 3 SIGKILLs", len(acked), len(seen))
}
