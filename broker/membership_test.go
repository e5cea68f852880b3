package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/storage"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// metricSum adds up every series of a metric (all label sets) on a
// broker's /metrics.
func metricSum(addr, name string, match ...string) (float64, error) {
	sum := 0.0
	err := scrapeMetrics(addr, func(line string, v float64) {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			return
		}
		for _, m := range match {
			if !strings.Contains(line, m) {
				return
			}
		}
		sum += v
	})
	return sum, err
}

// partitionLog reads a stopped broker's copy of a partition from its
// data directory: batch bytes from offset from to the end.
func partitionLog(t *testing.T, b *clusterBroker, topic string, part int32) (start, end int64, read func(from int64) []byte) {
	t.Helper()
	l, err := storage.Open(storage.Config{Dir: filepath.Join(b.Dir, "data", topic+"-"+strconv.Itoa(int(part)))})
	if err != nil {
		t.Fatalf("broker %d: cannot open its %s-%d: %v", b.ID, topic, part, err)
	}
	t.Cleanup(func() { l.Close() })
	return l.StartOffset(), l.EndOffset(), func(from int64) []byte {
		res, err := l.Read(from, 1<<40, l.EndOffset())
		if err != nil {
			t.Fatalf("broker %d: %s-%d: read from offset %d: %v", b.ID, topic, part, from, err)
		}
		defer res.Release()
		var out []byte
		for _, c := range res.Chunks {
			n := len(out)
			out = append(out, make([]byte, c.Size)...)
			if _, err := c.File.ReadAt(out[n:], c.Pos); err != nil {
				t.Fatalf("broker %d: %s-%d: read %d bytes at %d of a segment: %v", b.ID, topic, part, c.Size, c.Pos, err)
			}
		}
		return out
	}
}

// sameLogs stops every broker and checks that each holds the same batches
// (same records, offsets and leader epochs) of topic/part from the
// highest start offset among them to the end.
func sameLogs(t *testing.T, bs []*clusterBroker, topic string, part int32) int64 {
	t.Helper()
	for _, b := range bs {
		if err := b.Proc.Stop(30 * time.Second); err != nil {
			t.Logf("broker %d: stop: %v", b.ID, err)
		}
	}
	type copyOf struct {
		id         int
		start, end int64
		read       func(int64) []byte
	}
	var copies []copyOf
	from := int64(0)
	for _, b := range bs {
		s, e, r := partitionLog(t, b, topic, part)
		copies = append(copies, copyOf{b.ID, s, e, r})
		from = max(from, s)
	}
	want := copies[0].read(from)
	for _, c := range copies {
		if c.end != copies[0].end {
			t.Errorf("%s-%d: broker %d ends at %d, broker %d at %d", topic, part, c.id, c.end, copies[0].id, copies[0].end)
		}
		if got := c.read(from); !bytes.Equal(got, want) {
			t.Errorf("%s-%d: broker %d holds %d bytes from offset %d, broker %d %d bytes, not the same", topic, part, c.id, len(got), from, copies[0].id, len(want))
		}
	}
	return copies[0].end
}

// TestReplicaCatchUpFromSnapshot: a replica that is down while more
// entries than the trailing raft log are written comes back, receives the
// partition's data in the leader's snapshot, and ends with the same log as
// the others (same records at the same offsets).
func TestReplicaCatchUpFromSnapshot(t *testing.T) {
	bs, controller, seeds, ctx := startClusterFor(t, 3, 4*time.Minute, "--replica-snapshot-entries", "40", "--replica-trailing-logs", "10")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("snap"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	_ = controller
	if r, err := adm.CreateTopic(ctx, 1, 3, nil, "snap"); err != nil || r.Err != nil {
		t.Fatalf("create snap with RF 3: %v %v", err, r.Err)
	}
	produce := func(from, n int) {
		for i := from; i < from+n; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("r-%d", i))}).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produce(0, 50)
	leader, _ := leaderOf(ctx, seeds, "snap", 0)
	if leader < 0 {
		t.Fatal("no leader for snap/0")
	}
	victim := bs[(leader+1)%3]
	victim.Proc.Kill()
	// One produce request per record: each is a raft entry, so this is
	// far more than the 10 entries kept behind a snapshot.
	produce(50, 400)
	// Snapshots are checked every 10 s: wait for the leader to take one
	// past the victim's position (raft then drops all but 10 entries
	// behind it, so the victim can only catch up from the snapshot).
	snapDir := filepath.Join(bs[leader].Dir, "data", "snap-0", "raft", "snapshots")
	waitUntil(t, 60*time.Second, "leader takes a snapshot", func() string {
		ents, _ := os.ReadDir(snapDir)
		for _, e := range ents {
			f := strings.Split(e.Name(), "-")
			if idx, _ := strconv.Atoi(f[min(1, len(f)-1)]); len(f) == 3 && idx > 300 {
				return ""
			}
		}
		return fmt.Sprintf("snapshots in %s: %d entries", snapDir, len(ents))
	})
	produce(450, 50)
	victim.StartNode([]string{bs[leader].GossipAddr}, 0)
	waitUntil(t, 90*time.Second, "restarted replica installs a snapshot and catches up", func() string {
		n, err := metricSum(victim.HTTPAddr, "simtel_broker_replica_snapshot_installs_total")
		if err != nil || n < 1 {
			return fmt.Sprintf("snapshot installs on broker %d: %v (%v)", victim.ID, n, err)
		}
		hw, err := hwOf(victim.HTTPAddr, "snap")
		if err != nil || hw[0] < 500 {
			return fmt.Sprintf("broker %d high watermark %v (%v)", victim.ID, hw, err)
		}
		return ""
	})
	produce(500, 20)
	// Let the last entries reach every replica before the stop; the one
	// restored from a snapshot reports itself in sync like the others.
	waitUntil(t, 30*time.Second, "all replicas applied the last write and in sync", func() string {
		for _, b := range bs {
			hw, err := hwOf(b.HTTPAddr, "snap")
			if err != nil || hw[0] < 520 {
				return fmt.Sprintf("broker %d high watermark %v (%v)", b.ID, hw, err)
			}
			st, err := replicaStates(b.HTTPAddr, "snap")
			if err != nil || !st[0].inSync {
				return fmt.Sprintf("broker %d: snap/0 not in sync (%v)", b.ID, err)
			}
		}
		return ""
	})
	end := sameLogs(t, bs, "snap", 0)
	if end != 520 {
		t.Errorf("logs end at %d, want 520", end)
	}
}

// spread reports how many replicas and leaders each broker has for topic
// (from one broker's Metadata), and whether the topic is settled: no
// reassignment visible (more replicas than rf), every partition led by its
// preferred (first) replica.
func spread(ctx context.Context, seeds []string, topic string, rf int) (replicas, leaders map[int32]int, settled bool, err error) {
	replicas, leaders = map[int32]int{}, map[int32]int{}
	var m *kmsg.MetadataResponse
	for _, s := range seeds {
		if m, err = metadataFrom(ctx, s, topic); err == nil {
			break
		}
	}
	if err != nil {
		return nil, nil, false, err
	}
	if len(m.Topics) != 1 {
		return nil, nil, false, fmt.Errorf("metadata has %d topics", len(m.Topics))
	}
	settled = true
	for _, p := range m.Topics[0].Partitions {
		for _, r := range p.Replicas {
			replicas[r]++
		}
		leaders[p.Leader]++
		if len(p.Replicas) != rf || p.Leader < 0 || p.ErrorCode != 0 || p.Leader != p.Replicas[0] {
			settled = false
		}
	}
	return replicas, leaders, settled, nil
}

// twoLeadersEach is a waitUntil condition for a topic of six partitions,
// replication factor 3, on brokers 0, 1 and 2: settled (see spread), each
// broker leading two partitions.
func twoLeadersEach(ctx context.Context, seeds []string, topic string) func() string {
	return func() string {
		_, leaders, settled, err := spread(ctx, seeds, topic, 3)
		if err != nil || !settled || leaders[0] != 2 || leaders[1] != 2 || leaders[2] != 2 {
			return fmt.Sprintf("leaders %v settled %v (%v)", leaders, settled, err)
		}
		return ""
	}
}

// createSpreadTopic creates topic with six partitions of three replicas on
// the three brokers bs and waits until each leads two; it returns that
// condition, for a test that waits for the spread again later.
func createSpreadTopic(t *testing.T, ctx context.Context, bs []*clusterBroker, controller int32, topic string) func() string {
	t.Helper()
	createTopic(t, ctx, []string{bs[controller].Addr}, topic, 6, 3)
	spreadOut := twoLeadersEach(ctx, brokertest.Addrs(bs), topic)
	waitUntil(t, 60*time.Second, "leaders spread 2/2/2", spreadOut)
	return spreadOut
}

// TestClusterJoinRebalance: a fourth broker joins a three-broker cluster
// whose RF 3 topic holds data while idempotent acks=all producers write;
// the controller moves replicas and preferred leaders to it through raft
// membership changes until every broker holds its share; nothing
// acknowledged is lost, duplicated or reordered, and the moved replicas
// hold the same data as the others.
func TestClusterJoinRebalance(t *testing.T) {
	extra := []string{"--replica-snapshot-entries", "200", "--replica-trailing-logs", "50"}
	bs, controller, seeds, ctx := startClusterFor(t, 3, 6*time.Minute, extra...)
	const topic, parts = "join", 8
	createTopic(t, ctx, []string{bs[controller].Addr}, topic, parts, 3)
	waitLeaders(t, ctx, seeds, topic, 3)
	load := startLoad(t, ctx, seeds, topic, 3)
	load.waitAcks(t, 3000)

	joined := joinBroker(t, &bs, extra...)
	start := time.Now()
	all := append(slices.Clone(seeds), joined.Addr)
	// 8 partitions x 3 replicas over 4 brokers: 6 each; 8 preferred
	// leaders: 2 each.
	stable := 0
	waitUntil(t, 4*time.Minute, "the new broker holds its share of replicas and leaders", func() string {
		// A reordering of replicas (preferred leaders) does not show in
		// Metadata: ask the controller for moves before and after, and
		// see the same state twice in a row.
		if n, err := movingCount(ctx, all); err != nil || n > 0 {
			stable = 0
			return fmt.Sprintf("%d partitions moving (%v)", n, err)
		}
		replicas, leaders, settled, err := spread(ctx, all, topic, 3)
		if err != nil || !settled {
			stable = 0
			return fmt.Sprintf("moving: replicas %v leaders %v (%v)", replicas, leaders, err)
		}
		for id := range int32(4) {
			if replicas[id] != 6 || leaders[id] != 2 {
				stable = 0
				return fmt.Sprintf("replicas %v leaders %v", replicas, leaders)
			}
		}
		if n, err := movingCount(ctx, all); err != nil || n > 0 {
			stable = 0
			return fmt.Sprintf("%d partitions moving (%v)", n, err)
		}
		if stable++; stable < 2 {
			return "balanced once"
		}
		return ""
	})
	// simtel cluster status shows the same spread (retried: an election
	// under load can move a leader for a moment).
	waitUntil(t, 60*time.Second, "simtel cluster status shows the spread", func() string {
		st, _, why := clusterStatusOf(t, joined.Addr, topic, 4)
		if why != "" {
			return why
		}
		for _, b := range st.Brokers {
			if b.Replicas != 6 || b.Leaders != 2 {
				return fmt.Sprintf("broker %d has %d replicas and %d leaders, want 6 and 2", b.ID, b.Replicas, b.Leaders)
			}
		}
		return ""
	})
	// Brokers that lost a replica deleted its files.
	m, err := metadataFrom(ctx, joined.Addr, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Topics[0].Partitions {
		for _, b := range bs[:3] {
			if !slices.Contains(p.Replicas, int32(b.ID)) {
				dir := filepath.Join(b.Dir, "data", topic+"-"+strconv.Itoa(int(p.Partition)))
				waitUntil(t, 30*time.Second, "a moved-away replica's files are deleted", func() string {
					if _, err := os.Stat(dir); err == nil {
						return dir + " still exists"
					}
					return ""
				})
			}
		}
	}
	moved, _ := metricSum(joined.HTTPAddr, "simtel_broker_replica_snapshot_installs_total")
	logData, _ := os.ReadFile(joined.Proc.Log)
	t.Logf("the joined broker holds 6 replicas and leads 2 partitions %v after it started (load %s); %v of its replicas caught up from a snapshot (%d log lines about snapshots)",
		time.Since(start).Round(time.Second), loadAvg(), moved, strings.Count(string(logData), "snapshot"))
	load.waitMore(t, "writes go on after the rebalance", 2000)
	load.finishAndCheck(ctx, t, all, topic)

	// A partition that moved to the new broker holds the same batches on
	// all its replicas.
	for _, p := range m.Topics[0].Partitions {
		if !slices.Contains(p.Replicas, 3) {
			continue
		}
		waitUntil(t, 30*time.Second, "replicas applied the same end", func() string {
			var ends []int64
			for _, r := range p.Replicas {
				hw, err := hwOf(bs[r].HTTPAddr, topic)
				if err != nil {
					return err.Error()
				}
				ends = append(ends, hw[p.Partition])
			}
			if slices.Min(ends) != slices.Max(ends) {
				return fmt.Sprintf("ends %v", ends)
			}
			return ""
		})
		var replicas []*clusterBroker
		for _, r := range p.Replicas {
			replicas = append(replicas, bs[r])
		}
		end := sameLogs(t, replicas, topic, p.Partition)
		t.Logf("%s/%d: replicas %v hold the same %d offsets", topic, p.Partition, p.Replicas, end)
		break
	}
}

// TestClusterReplaceGoneBroker: a broker stopped for longer than
// --replica-replace-after has its replicas re-created on the other
// brokers: every partition is back to three alive replicas, and nothing
// acknowledged is lost meanwhile.
func TestClusterReplaceGoneBroker(t *testing.T) {
	bs, controller, seeds, ctx := startClusterFor(t, 4, 6*time.Minute, "--replica-replace-after", "3s", "--replica-snapshot-entries", "200", "--replica-trailing-logs", "50")
	const topic, parts = "replace", 4
	createTopic(t, ctx, []string{bs[controller].Addr}, topic, parts, 3)
	waitLeaders(t, ctx, seeds, topic, 3)
	load := startLoad(t, ctx, seeds, topic, 2)
	load.waitAcks(t, 2000)
	// Stop a broker that is not the controller, for good.
	victim := bs[(controller+1)%4]
	victim.Proc.Kill()
	killed := time.Now()
	rest := addrsBut(bs, victim, kafkaAddr)
	waitUntil(t, 4*time.Minute, "every partition is back to three alive replicas", func() string {
		replicas, leaders, settled, err := spread(ctx, rest, topic, 3)
		if err != nil || !settled || replicas[int32(victim.ID)] != 0 {
			return fmt.Sprintf("replicas %v leaders %v settled %v (%v)", replicas, leaders, settled, err)
		}
		return ""
	})
	t.Logf("broker %d killed; its replicas re-created on the others %v later (replace-after 3s, load %s)",
		victim.ID, time.Since(killed).Round(time.Second), loadAvg())
	load.waitMore(t, "writes go on", 2000)
	load.finishAndCheck(ctx, t, rest, topic)
}

// TestClusterRollingRestart restarts every broker of a three-broker
// cluster in turn under load, waiting each time until the restarted
// broker has caught up; nothing acknowledged is lost, duplicated or
// reordered, and leadership is spread again afterwards (preferred
// leaders).
func TestClusterRollingRestart(t *testing.T) {
	bs, controller, seeds, ctx := startClusterFor(t, 3, 8*time.Minute, "--replica-snapshot-entries", "200", "--replica-trailing-logs", "50")
	const topic, parts = "rolling", 6 // parts: as createSpreadTopic makes it
	spreadOut := createSpreadTopic(t, ctx, bs, controller, topic)
	load := startLoad(t, ctx, seeds, topic, 3)
	for _, b := range bs {
		load.waitAcks(t, 2000)
		if err := b.Proc.Stop(30 * time.Second); err != nil {
			t.Logf("broker %d: stop: %v", b.ID, err)
		}
		stopped := time.Now()
		var join []string
		for _, o := range bs {
			if o != b {
				join = append(join, o.GossipAddr)
			}
		}
		b.StartNode(join, 0)
		// Caught up: every replica on the restarted broker has applied at
		// least what the leaders had when it came back.
		var leaderHW map[int32]int64
		waitUntil(t, 30*time.Second, "leaders' high watermarks readable", func() string {
			leaderHW = map[int32]int64{}
			for p := range int32(parts) {
				l, _ := leaderOf(ctx, seeds, topic, p)
				if l < 0 {
					return fmt.Sprintf("no leader for %d", p)
				}
				hw, err := hwOf(bs[l].HTTPAddr, topic)
				if err != nil {
					return err.Error()
				}
				leaderHW[p] = hw[p]
			}
			return ""
		})
		waitUntil(t, 2*time.Minute, "the restarted broker catches up", func() string {
			hw, err := hwOf(b.HTTPAddr, topic)
			if err != nil || len(hw) != parts {
				return fmt.Sprintf("hw %v (%v)", hw, err)
			}
			for p, want := range leaderHW {
				if hw[p] < want {
					return fmt.Sprintf("partition %d at %d, leader was at %d", p, hw[p], want)
				}
			}
			return ""
		})
		waitUntil(t, 2*time.Minute, "no broker reports an under-replicated partition", func() string {
			for _, o := range bs {
				n, err := metricSum(o.HTTPAddr, "simtel_broker_under_replicated_partitions")
				if err != nil || n != 0 {
					return fmt.Sprintf("broker %d: %v under-replicated (%v)", o.ID, n, err)
				}
			}
			return ""
		})
		t.Logf("broker %d restarted and caught up %v after its stop (load %s)", b.ID, time.Since(stopped).Round(time.Millisecond), loadAvg())
	}
	waitUntil(t, 2*time.Minute, "leaders spread 2/2/2 again (preferred leaders)", spreadOut)
	load.finishAndCheck(ctx, t, seeds, topic)
}

// TestClusterRebalanceCommand: with --auto-rebalance=false a joining
// broker gets nothing until `simtel cluster rebalance` sends the moves
// (AlterPartitionAssignments); --dry-run only prints them; afterwards
// every broker holds its share, writes went on, nothing was lost.
func TestClusterRebalanceCommand(t *testing.T) {
	extra := []string{"--auto-rebalance=false"}
	bs, controller, seeds, ctx := startClusterFor(t, 3, 6*time.Minute, extra...)
	const topic, parts = "manual", 6
	createTopic(t, ctx, []string{bs[controller].Addr}, topic, parts, 2)
	waitLeaders(t, ctx, seeds, topic, 2)
	load := startLoad(t, ctx, seeds, topic, 2)
	joined := joinBroker(t, &bs, extra...)
	all := append(slices.Clone(seeds), joined.Addr)
	waitCluster(t, joined.Addr, 4)
	simtel := func(args ...string) string {
		out, err := exec.Command(testutil.Binary(t), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("simtel %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := simtel("cluster", "rebalance", "--brokers", joined.Addr, "--dry-run")
	t.Logf("dry run:\n%s", out)
	if !strings.Contains(out, "would move") {
		t.Fatalf("dry run plans no move:\n%s", out)
	}
	if replicas, _, _, _ := spread(ctx, all, topic, 2); replicas[3] != 0 {
		t.Fatalf("broker 3 got replicas without a rebalance: %v", replicas)
	}
	start := time.Now()
	out = simtel("cluster", "rebalance", "--brokers", joined.Addr, "--wait", "--timeout", "4m")
	t.Logf("rebalance (%v, load %s):\n%s", time.Since(start).Round(time.Second), loadAvg(), out)
	// 12 replicas over 4 brokers: 3 each; 6 preferred leaders: 1 or 2.
	waitUntil(t, 2*time.Minute, "every broker holds its share", func() string {
		replicas, leaders, settled, err := spread(ctx, all, topic, 2)
		if err != nil || !settled {
			return fmt.Sprintf("replicas %v leaders %v settled %v (%v)", replicas, leaders, settled, err)
		}
		for id := range int32(4) {
			if replicas[id] != 3 || leaders[id] < 1 || leaders[id] > 2 {
				return fmt.Sprintf("replicas %v leaders %v", replicas, leaders)
			}
		}
		return ""
	})
	if out := simtel("cluster", "rebalance", "--brokers", joined.Addr, "--dry-run"); !strings.Contains(out, "nothing to move") {
		t.Errorf("a second rebalance still plans moves:\n%s", out)
	}
	load.waitMore(t, "writes go on", 1000)
	load.finishAndCheck(ctx, t, all, topic)
}

// movingCount asks the controller how many partitions are being
// reassigned (ListPartitionReassignments for every topic).
func movingCount(ctx context.Context, seeds []string) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, err
	}
	n := 0
	for _, t := range resp.Topics {
		n += len(t.Partitions)
	}
	return n, nil
}
