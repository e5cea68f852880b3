package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLogAppendTimeReplicated: in a three-broker cluster the leader stamps
// a LogAppendTime topic's batches before they enter the partition's raft
// log, so every replica holds the same bytes. After the leader is killed,
// the new leader (a former follower) serves the same append times, not
// the producer's and not times of its own.
func TestLogAppendTimeReplicated(t *testing.T) {
	bs, _, seeds, ctx := startClusterFor(t, 3, 4*time.Minute)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	cfg := "LogAppendTime"
	if res, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"message.timestamp.type": &cfg}, "lat3"); err != nil || res.Err != nil {
		t.Fatalf("create lat3: %v %v", err, res.Err)
	}
	old := time.UnixMilli(981173106000)
	from := time.Now().Add(-time.Millisecond)
	for i := range 5 {
		r := &kgo.Record{Topic: "lat3", Partition: 0, Value: fmt.Appendf(nil, "v%d", i), Timestamp: old}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	to := time.Now().Add(time.Millisecond)

	read := func(seeds []string) []time.Time {
		t.Helper()
		rd, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("lat3"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		var ts []time.Time
		for len(ts) < 5 {
			fs := rd.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("read %d of 5 records: %v", len(ts), ctx.Err())
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Attrs.TimestampType() != 1 {
					t.Errorf("record %s: timestamp type %d, want 1 (LogAppendTime)", r.Value, r.Attrs.TimestampType())
				}
				ts = append(ts, r.Timestamp)
			})
		}
		return ts
	}
	before := read(seeds)
	for i, ts := range before {
		if ts.Before(from) || ts.After(to) {
			t.Fatalf("record %d: timestamp %v, want the append time in [%v, %v]", i, ts, from, to)
		}
	}

	leader, epoch := leaderOf(ctx, seeds, "lat3", 0)
	if leader < 0 {
		t.Fatal("no leader for lat3-0")
	}
	bs[leader].Proc.Kill()
	var rest []string
	for _, b := range bs {
		if int32(b.ID) != leader {
			rest = append(rest, b.Addr)
		}
	}
	waitUntil(t, 90*time.Second, "a new leader of lat3-0", func() string {
		if l, e := leaderOf(ctx, rest, "lat3", 0); l < 0 || l == leader || e <= epoch {
			return fmt.Sprintf("leader %d epoch %d", l, e)
		}
		return ""
	})
	after := read(rest)
	for i := range before {
		if !after[i].Equal(before[i]) {
			t.Fatalf("record %d: old leader %d served %v, the new leader serves %v", i, leader, before[i], after[i])
		}
	}
	t.Logf("append times %v, identical after leader %d was killed", before, leader)
}
