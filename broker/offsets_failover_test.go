package broker_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupTracker records what a consumer group read and which offsets the
// coordinator acknowledged as committed.
type groupTracker struct {
	mu       sync.Mutex
	seen     map[string]int  // value -> times read, by any member
	acked    map[int32]int64 // partition -> highest acknowledged commit
	commits  []time.Time     // acknowledged commit times
	failures int             // commits that returned an error
	first    map[int32]int64 // partition -> first offset read (second member)
	next     map[int32]int64 // partition -> offset after the last one read
	lastErr  error
}

// consumeAndCommit reads with cl until ctx ends, committing what it read
// synchronously after every commitEvery polls (so a member stopped
// between commits leaves progress for the next one to read again); it
// records reads and acknowledged commits in tr. With firsts it also
// records the first offset read per partition.
func (tr *groupTracker) consumeAndCommit(ctx context.Context, cl *kgo.Client, commitEvery int, firsts bool) {
	var pending []*kgo.Record
	for polls := 1; ctx.Err() == nil; polls++ {
		fs := cl.PollRecords(ctx, 200)
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		tr.mu.Lock()
		for _, r := range recs {
			tr.seen[string(r.Value)]++
			if _, ok := tr.first[r.Partition]; firsts && !ok {
				tr.first[r.Partition] = r.Offset
			}
			tr.next[r.Partition] = max(tr.next[r.Partition], r.Offset+1)
		}
		tr.mu.Unlock()
		pending = append(pending, recs...)
		if polls%commitEvery != 0 {
			continue
		}
		recs, pending = pending, nil
		err := cl.CommitRecords(ctx, recs...)
		tr.mu.Lock()
		if err != nil {
			tr.failures++
			tr.lastErr = err
		} else {
			for _, r := range recs {
				tr.acked[r.Partition] = max(tr.acked[r.Partition], r.Offset+1)
			}
			tr.commits = append(tr.commits, time.Now())
		}
		tr.mu.Unlock()
	}
}

func (tr *groupTracker) commitsAfter(at time.Time) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, c := range tr.commits {
		if c.After(at) {
			n++
		}
	}
	return n
}

// commitsSince is a waitUntil condition: n commits acknowledged after at.
func (tr *groupTracker) commitsSince(at time.Time, n int) func() string {
	return func() string {
		got := tr.commitsAfter(at)
		if got >= n {
			return ""
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return fmt.Sprintf("%d commits, %d failed, last error %v", got, tr.failures, tr.lastErr)
	}
}

// fetchCommitted asks the cluster (through seeds) for the group's
// committed offsets, retrying while the coordinator moves. Each try uses a
// new client: a client's sharded admin requests keep a cached coordinator
// that died until something else clears it.
func fetchCommitted(ctx context.Context, t *testing.T, seeds []string, groupID string) map[int32]int64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := kadm.NewClient(cl).FetchOffsets(actx, groupID)
		cancel()
		cl.Close()
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			out := map[int32]int64{}
			resp.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("fetch the committed offsets of %s: still failing after 60s: %v", groupID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// coordinatorsOn sums simtel_broker_group_coordinators over the brokers'
// /metrics; -1 if one cannot be read.
func coordinatorsOn(bs []*clusterBroker) int {
	n := 0
	for _, b := range bs {
		resp, err := http.Get("http://" + b.HTTPAddr + "/metrics")
		if err != nil {
			return -1
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return -1
		}
		found := false
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "simtel_broker_group_coordinators "); ok {
				c, _ := strconv.Atoi(v)
				n += c
				found = true
			}
		}
		if !found {
			return -1
		}
	}
	return n
}

// waitCoordinators waits until the brokers together run one coordinator
// per partition of __consumer_offsets (6).
func waitCoordinators(t *testing.T, bs []*clusterBroker) {
	t.Helper()
	waitUntil(t, 60*time.Second, "one group coordinator per offsets partition (6)", func() string {
		if n := coordinatorsOn(bs); n != 6 {
			return fmt.Sprintf("the brokers run %d group coordinators", n)
		}
		return ""
	})
}

// TestClusterGroupCoordinatorFailover SIGKILLs the coordinator of a
// consumer group while its member consumes and commits, with idempotent
// producers writing all along (the killed broker also leads a partition of
// the topic): no acknowledged commit is lost, the member goes on
// committing on the new coordinator, a second member resumes exactly at
// the committed offsets, every acknowledged record is read (re-reads of
// uncommitted progress are reported as duplicates, which are allowed),
// and the log itself has no lost, duplicated or reordered record.
func TestClusterGroupCoordinatorFailover(t *testing.T) {
	bs, controller, seeds, ctx := startGroupCluster(t, 6*time.Minute)

	const topic, parts, groupID = "events", 3, "offsets-failover"
	createTopic(t, ctx, []string{bs[controller].Addr}, topic, parts, 3)

	// Idempotent producers, acks=all, until told to stop.
	load := startLoadWith(t, ctx, loadConfig{
		seeds: seeds, topic: topic, producers: 2, prefix: "g",
		opts: []kgo.Opt{kgo.MaxBufferedRecords(1000),
			kgo.RetryTimeout(60 * time.Second), kgo.RecordDeliveryTimeout(90 * time.Second)},
		pauseEvery: 20, pauseAt: 0, pause: 10 * time.Millisecond,
	})
	defer load.stop()
	chk := load.chk

	// Member A consumes and commits every poll.
	tr := &groupTracker{seen: map[string]int{}, acked: map[int32]int64{}, first: map[int32]int64{}, next: map[int32]int64{}}
	newMember := func() *kgo.Client {
		c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.RetryTimeout(60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := newMember()
	stopA := goUntilStopped(ctx, func(actx context.Context) { tr.consumeAndCommit(actx, a, 3, false) })
	waitUntil(t, 60*time.Second, "member A makes 5 commits", tr.commitsSince(time.Time{}, 5))

	// Find and SIGKILL the group's coordinator.
	fc, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = groupID
	r, err := req.RequestWith(ctx, fc)
	fc.Close()
	if err != nil || r.ErrorCode != 0 {
		t.Fatalf("FindCoordinator %s: %v %v", groupID, err, r)
	}
	victim := bs[r.NodeID]
	var survivors []string
	var alive []*clusterBroker
	for _, b := range bs {
		if b != victim {
			survivors = append(survivors, b.Addr)
			alive = append(alive, b)
		}
	}
	tr.mu.Lock()
	ackedAtKill := maps.Clone(tr.acked)
	commitsBefore := len(tr.commits)
	tr.mu.Unlock()
	victim.Proc.Kill()
	killedAt := time.Now()
	t.Logf("SIGKILL of broker %d, coordinator of %s, after %d acknowledged commits %v", victim.ID, groupID, commitsBefore, ackedAtKill)

	// No acknowledged commit is lost: the new coordinator has each at
	// least where it was acknowledged (the member keeps committing, so
	// it may be further).
	got := fetchCommitted(ctx, t, survivors, groupID)
	fetchAfter := time.Since(killedAt)
	for p, want := range ackedAtKill {
		if got[p] < want {
			t.Errorf("partition %d: committed offset %d on the new coordinator, but %d was acknowledged before the kill", p, got[p], want)
		}
	}
	// The survivors take over every offsets partition the victim led.
	waitCoordinators(t, alive)
	t.Logf("every offsets partition has a coordinator again %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	// Member A goes on committing through the new coordinator.
	waitUntil(t, 90*time.Second, "member A commits 3 times on the new coordinator", tr.commitsSince(killedAt, 3))
	tr.mu.Lock()
	firstCommitAfter := time.Duration(0)
	for _, c := range tr.commits {
		if c.After(killedAt) {
			firstCommitAfter = c.Sub(killedAt)
			break
		}
	}
	tr.mu.Unlock()
	t.Logf("after the kill: committed offsets readable after %v, member A's next acknowledged commit after %v",
		fetchAfter.Round(time.Millisecond), firstCommitAfter.Round(time.Millisecond))

	// Stop A without committing what it reads last; every acknowledged
	// commit (before and after the kill) must be what the cluster holds.
	stopA()
	a.Close()
	tr.mu.Lock()
	ackedByA := maps.Clone(tr.acked)
	readByA := len(tr.seen)
	failedCommits := tr.failures
	tr.mu.Unlock()
	committed := fetchCommitted(ctx, t, survivors, groupID)
	uncommitted := int64(0)
	for p, want := range ackedByA {
		if committed[p] < want {
			t.Errorf("partition %d: committed offset %d, but member A had %d acknowledged", p, committed[p], want)
		}
	}
	tr.mu.Lock()
	for p, next := range tr.next {
		uncommitted += max(0, next-committed[p])
	}
	tr.mu.Unlock()
	t.Logf("member A stopped with %d records read but not committed (committed %v)", uncommitted, committed)
	load.finish(t)

	// Member B resumes from the committed offsets and reads the rest.
	b := newMember()
	defer b.Close()
	stopB := goUntilStopped(ctx, func(bctx context.Context) { tr.consumeAndCommit(bctx, b, 1, true) })
	chk.mu.Lock()
	want := maps.Clone(chk.acked)
	chk.mu.Unlock()
	missing := func() int {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		n := 0
		for v := range want {
			if tr.seen[v] == 0 {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(90 * time.Second); missing() > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	stopB()

	tr.mu.Lock()
	dups := 0
	for _, n := range tr.seen {
		if n > 1 {
			dups += n - 1
		}
	}
	firsts := maps.Clone(tr.first)
	tr.mu.Unlock()
	lost := missing()
	t.Logf("group: %d records acknowledged by the producers, %d distinct read by A before it stopped, lost %d, re-read after the failover (uncommitted progress, allowed) %d; %d commits failed during the failover",
		len(want), readByA, lost, dups, failedCommits)
	if lost != 0 {
		t.Errorf("%d acknowledged records were never read by the group", lost)
	}
	for p, off := range firsts {
		if off != committed[p] {
			t.Errorf("partition %d: member B started at offset %d, the committed offset is %d", p, off, committed[p])
		}
	}

	// The log itself: idempotent producers across the partition-leader
	// kill left no duplicate, no gap and no reordering.
	// (readTopic reads 2s past the expected count, so that a duplicate
	// beyond it shows.)
	lostLog, dupLog, reord, summary := chk.verify(readTopic(t, ctx, survivors, topic, len(want)))
	t.Logf("log checker: %s", summary)
	if lostLog != 0 || dupLog != 0 || reord != 0 || len(want) == 0 {
		t.Errorf("log checker: %s", summary)
	}
}
