package broker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterDormantPartitions: with --replica-dormant-after, producers
// that pause longer than it leave an RF 3 topic's raft groups asleep on
// every broker between their bursts, and each burst wakes them; a broker
// SIGKILLed while it leads dormant partitions has them elect elsewhere
// and the writes go on; once the writes stop the groups sleep, a reader
// gets every acknowledged record from the dormant leaders without waking
// them, and nothing acknowledged is lost, duplicated or reordered.
func TestClusterDormantPartitions(t *testing.T) {
	bs, _, seeds, ctx := startClusterFor(t, 3, 5*time.Minute, "--replica-dormant-after", "1s")
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
				got = append(got, fmt.Sprintf("broker %d: %v", b.ID, n))
				ok = ok && n == 3
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
		if n, _, _ := dormant(b); n != 3 {
			t.Fatalf("broker %d has %v dormant partitions after the topic was read, want 3: a read woke a partition", b.ID, n)
		}
	}
}
