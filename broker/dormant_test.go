package broker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterDormantPartitions: with --replica-dormant-after, producers
// that pause longer than it leave an RF 3 topic's raft groups asleep on
// every broker between their bursts, and each burst wakes them; a broker
// SIGKILLed while it leads dormant partitions has them elect elsewhere
// and the writes go on; once the writes stop the groups sleep, a reader
// gets every acknowledged record from the dormant leaders without waking
// them, and nothing acknowledged is lost, duplicated or reordered. The
// offsets partitions sleep too while no group has a member: a consumer
// group wakes them, commits, and once it has left they sleep again, and
// ListGroups and OffsetFetch still find the group and its offsets.
func TestClusterDormantPartitions(t *testing.T) {
	bs, _, seeds, ctx := startClusterFor(t, 3, 5*time.Minute, "--replica-dormant-after", "1s")
	waitCoordinators(t, bs)
	// Each broker's dormant replicas, once all sleep: the topic's three
	// and its replicas of __consumer_offsets.
	want := map[int]float64{}
	md, err := metadataFrom(ctx, seeds[0], "__consumer_offsets")
	if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) == 0 {
		t.Fatalf("metadata of __consumer_offsets: %v", err)
	}
	for _, p := range md.Topics[0].Partitions {
		for _, r := range p.Replicas {
			want[int(r)]++
		}
	}
	for _, b := range bs {
		want[b.ID] += 3
	}
	const topic = "dormant"
	createTopic(t, ctx, seeds, topic, 3, 3)
	waitLeaders(t, ctx, seeds, topic, 3)
	dormant := func(b *clusterBroker) (asleep, sleeps, wakes float64) {
		_ = scrapeMetrics(b.HTTPAddr, func(line string, v float64) {
			switch {
			case strings.HasPrefix(line, "simtel_broker_partitions_dormant "):
				asleep = v
			case strings.HasPrefix(line, "simtel_broker_dormant_sleeps_total "):
				sleeps = v
			case strings.HasPrefix(line, "simtel_broker_dormant_wakes_total "):
				wakes = v
			}
		})
		return
	}
	allAsleep := func(what string, among []*clusterBroker) {
		t.Helper()
		waitUntil(t, 60*time.Second, what, func() string {
			var got []string
			ok := true
			for _, b := range among {
				n, _, _ := dormant(b)
				got = append(got, fmt.Sprintf("broker %d: %v of %v", b.ID, n, want[b.ID]))
				ok = ok && n == want[b.ID]
			}
			if !ok {
				return "dormant partitions " + strings.Join(got, ", ")
			}
			return ""
		})
	}
	// Bursts of 1,500 records per producer, 6 s apart.
	load := startLoadWith(t, ctx, loadConfig{
		seeds: seeds, topic: topic, producers: 2, prefix: "p",
		opts: []kgo.Opt{kgo.MaxBufferedRecords(2000), kgo.MetadataMinAge(500 * time.Millisecond),
			kgo.RetryTimeout(90 * time.Second), kgo.RecordDeliveryTimeout(120 * time.Second)},
		pauseEvery: 1500, pauseAt: 1499, pause: 6 * time.Second,
	})
	load.waitAcks(t, 3000)
	allAsleep("every partition asleep on every broker in a pause", bs)
	load.waitMore(t, "records acknowledged in the next burst", 1000)

	// The leader of partition 0, killed while its partitions sleep.
	allAsleep("every partition asleep again", bs)
	leader, _ := leaderOf(ctx, seeds, topic, 0)
	if leader < 0 {
		t.Fatal("no leader named for partition 0")
	}
	victim := bs[leader]
	victim.Kill()
	killed := time.Now()
	load.waitAckAfter(t, 0, killed, "after the dormant leader's broker was killed")
	t.Logf("partition 0 took a write %v after its dormant leader's broker was killed", time.Since(killed).Round(time.Millisecond))
	restartWithJoin(t, victim, bs)
	load.waitMore(t, "records acknowledged after the restart", 3000)
	load.finish(t)

	allAsleep("every partition asleep after the writes", bs)
	var sleeps, wakes float64
	for _, b := range bs {
		_, s, w := dormant(b)
		sleeps, wakes = sleeps+s, wakes+w
	}
	if sleeps < 6 || wakes < 3 {
		t.Fatalf("the brokers put partitions to sleep %v times and woke them %v times; want at least 6 and 3", sleeps, wakes)
	}
	load.finishAndCheck(ctx, t, seeds, topic)
	for _, b := range bs {
		if n, _, _ := dormant(b); n != want[b.ID] {
			t.Fatalf("broker %d has %v dormant partitions after the topic was read, want %v: a read woke a partition", b.ID, n, want[b.ID])
		}
	}

	// A consumer group on the sleeping offsets partitions.
	const group = "dormant-readers"
	for _, b := range bs {
		_, _, w := dormant(b)
		wakes -= w
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	read, started := 0, time.Now()
	for read < 1000 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("the group read %d records: %v", read, err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		if read == 0 && fs.NumRecords() > 0 {
			t.Logf("the group's member got its first records %v after it started, its offsets partition asleep", time.Since(started).Round(time.Millisecond))
		}
		read += fs.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit on a woken offsets partition: %v", err)
	}
	committed := cl.CommittedOffsets()
	cl.Close() // leaves the group
	for _, b := range bs {
		_, _, w := dormant(b)
		wakes += w
	}
	if wakes < 1 {
		t.Fatal("the consumer group worked without any partition waking: its offsets partition did not sleep")
	}
	allAsleep("every partition asleep once the group left", bs)
	acl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(acl)
	defer adm.Close()
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := groups[group]; !ok {
		t.Fatalf("ListGroups with the offsets partitions asleep: %v, want %s among them", groups.Groups(), group)
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	for tp, ps := range committed {
		for p, o := range ps {
			if got, ok := offs.Lookup(tp, p); !ok || got.At != o.Offset {
				t.Fatalf("offset of %s/%d fetched from a sleeping coordinator: %v, %v; committed %d", tp, p, got.At, ok, o.Offset)
			}
		}
	}
}
