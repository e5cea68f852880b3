package broker_test

// Handover windows (handover.go): a new topic takes writes as soon as
// Metadata names its leaders, and a consumer group keeps committing while
// its coordinator's broker restarts.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusterNewTopicTakesWritesAtOnce: on a fresh 3-broker cluster a
// topic created with CreateTopics (RF 1, then RF 3) takes its first
// records without a stall once Metadata names a leader for each of its
// partitions. A broker named leader that had not opened the partition
// yet (it heard of the topic late) or was not ready used to answer
// NOT_LEADER_FOR_PARTITION, and franz-go refreshes its metadata only
// after its MetadataMinAge: 5 s by default. The producer here has a
// longer one, so that such a stall cannot hide under the generous bound
// a loaded machine needs. Then a follower of the RF 3 topic answers a
// Produce with NOT_LEADER_OR_FOLLOWER naming the leader Metadata names
// (CurrentLeader and its address, KIP-951), so the client moves there
// without a metadata refresh.
func TestClusterNewTopicTakesWritesAtOnce(t *testing.T) {
	bs, controller, seeds, ctx := startClusterFor(t, 3, 4*time.Minute)
	const minAge, bound = 60 * time.Second, 20 * time.Second
	for _, rf := range []int16{1, 3} {
		topic := fmt.Sprintf("fresh-rf%d", rf)
		createTopic(t, ctx, []string{bs[controller].Addr}, topic, 6, rf)
		waitUntil(t, 60*time.Second, "Metadata names a leader of every partition of "+topic, func() string {
			md, err := metadataFrom(ctx, seeds[0], topic)
			if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 6 {
				return fmt.Sprintf("metadata %v (%v)", md, err)
			}
			for _, p := range md.Topics[0].Partitions {
				if p.ErrorCode != 0 || p.Leader < 0 {
					return fmt.Sprintf("partition %d: leader %d, error %d", p.Partition, p.Leader, p.ErrorCode)
				}
			}
			return ""
		})
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.MetadataMinAge(minAge))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		for i := range 600 {
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		cl.Close()
		t.Logf("RF %d: 600 records to the new topic acknowledged %v after the first was produced (load %s)", rf, took.Round(time.Millisecond), loadAvg())
		if len(errs) > 0 {
			t.Fatalf("RF %d: %d records failed, first: %v", rf, len(errs), errs[0])
		}
		if took > bound {
			t.Errorf("RF %d: the new topic's records took %v to be acknowledged (bound %v): a broker named leader refused them", rf, took.Round(time.Millisecond), bound)
		}
	}

	leader, epoch := leaderOf(ctx, seeds, "fresh-rf3", 0)
	if leader < 0 {
		t.Fatal("no leader of fresh-rf3/0")
	}
	follower := bs[(leader+1)%3]
	raw, err := kgo.NewClient(kgo.SeedBrokers(follower.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	r, err := raw.SeedBrokers()[0].Request(ctx, produceRequest("fresh-rf3", 0, plainBatch("to-a-follower"), -1, 5000))
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.ProduceResponse)
	rp := resp.Topics[0].Partitions[0]
	if resp.Version < 10 || rp.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("Produce v%d to follower %d: %v, want v10+ and NOT_LEADER_OR_FOLLOWER", resp.Version, follower.ID, kerr.ErrorForCode(rp.ErrorCode))
	}
	if rp.CurrentLeader.LeaderID != leader || rp.CurrentLeader.LeaderEpoch != epoch {
		t.Fatalf("follower %d names leader %d epoch %d, Metadata leader %d epoch %d", follower.ID, rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch, leader, epoch)
	}
	var addr string
	for _, b := range resp.Brokers {
		if b.NodeID == leader {
			addr = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		}
	}
	if addr != bs[leader].Addr {
		t.Fatalf("the answer's address of leader %d is %q, want %s (brokers %+v)", leader, addr, bs[leader].Addr, resp.Brokers)
	}
}

// TestClusterGroupCommitsThroughCoordinatorRestarts: a member of a
// consumer group commits after every poll while the broker coordinating
// the group is restarted twice (SIGTERM, then started again; the group's
// offsets partition moves to another broker each time). With franz-go's
// defaults (a commit is retried for 30 s) no commit may fail, the member's
// session must not end, and commits go on within tens of seconds of each
// restart. Requests reaching a broker that is being elected or loading
// the groups wait for it rather than bounce (handover.go).
func TestClusterGroupCommitsThroughCoordinatorRestarts(t *testing.T) {
	bs, controller, seeds, ctx := startGroupCluster(t, 6*time.Minute)

	const topic, groupID = "handover", "handover-group"
	createTopic(t, ctx, []string{bs[controller].Addr}, topic, 3, 3)
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	stopProducing := goUntilStopped(ctx, func(pctx context.Context) {
		for i := 0; pctx.Err() == nil; i++ {
			prod.Produce(pctx, &kgo.Record{Value: fmt.Appendf(nil, "h%d", i)}, nil)
			time.Sleep(5 * time.Millisecond)
		}
	})
	defer stopProducing()

	tr := &groupTracker{seen: map[string]int{}, acked: map[int32]int64{}, first: map[int32]int64{}, next: map[int32]int64{}}
	sessionErrs := &groupSessionErrors{}
	memberOpts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(sessionErrs)}
	// With SIMTEL_TEST_LOG_DIR the member's client logs beside the
	// brokers: what it asked whom, and why its session ended if it did.
	if d := os.Getenv("SIMTEL_TEST_LOG_DIR"); d != "" {
		o, err := clientLog(t, filepath.Join(d, fmt.Sprintf("member-%d.log", time.Now().UnixNano())), kgo.LogLevelDebug)
		if err != nil {
			t.Fatal(err)
		}
		memberOpts = append(memberOpts, o)
	}
	member, err := kgo.NewClient(memberOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	stopMember := goUntilStopped(ctx, func(mctx context.Context) { tr.consumeAndCommit(mctx, member, 1, false) })
	defer stopMember()
	waitUntil(t, 60*time.Second, "the member commits 5 times", tr.commitsSince(time.Time{}, 5))

	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const resumeBound = 60 * time.Second
	for round := 1; round <= 2; round++ {
		coord := findCoordinator(t, ctx, admin, 0, groupID)
		victim := bs[coord]
		stopped := time.Now()
		if err := victim.Proc.Stop(30 * time.Second); err != nil {
			t.Logf("round %d: broker %d: %v", round, coord, err)
		}
		waitUntil(t, resumeBound, fmt.Sprintf("round %d: the member commits 3 times after broker %d stopped", round, coord), tr.commitsSince(stopped, 3))
		restartWithJoin(t, victim, bs)
		waitCoordinators(t, bs)
		waitUntil(t, resumeBound, fmt.Sprintf("round %d: the member commits 3 times after broker %d is back", round, coord), tr.commitsSince(time.Now(), 3))
		tr.mu.Lock()
		gap := longestGap(commitsFrom(tr.commits, stopped))
		tr.mu.Unlock()
		t.Logf("round %d: coordinator broker %d stopped and restarted; longest time between acknowledged commits since the stop %v (load %s)", round, coord, gap.Round(time.Millisecond), loadAvg())
	}

	tr.mu.Lock()
	failures, lastErr, gap := tr.failures, tr.lastErr, longestGap(tr.commits)
	tr.mu.Unlock()
	t.Logf("%d commits failed; longest time between acknowledged commits %v", failures, gap.Round(time.Millisecond))
	if failures > 0 {
		t.Errorf("%d commits failed (franz-go retries a commit for 30 s), the last with %v", failures, lastErr)
	}
	if errs := sessionErrs.list(); len(errs) > 0 {
		t.Errorf("the member's group session ended: %v", errors.Join(errs...))
	}
	if gap > resumeBound {
		t.Errorf("no commit was acknowledged for %v", gap.Round(time.Millisecond))
	}
}

// commitsFrom is the last commit time before at and every one after it.
func commitsFrom(ts []time.Time, at time.Time) []time.Time {
	for i, c := range ts {
		if c.After(at) {
			return ts[max(0, i-1):]
		}
	}
	return nil
}

// longestGap is the longest time between two consecutive times.
func longestGap(ts []time.Time) time.Duration {
	var gap time.Duration
	for i := 1; i < len(ts); i++ {
		gap = max(gap, ts[i].Sub(ts[i-1]))
	}
	return gap
}
