package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/broker/storage"
)

// startClusterOf starts n brokers (ids 0..n-1) forming one cluster, each
// with extra flags, and returns them and the controller's id.
func startClusterOf(t *testing.T, n int, extra ...string) ([]*clusterBroker, int32) {
	t.Helper()
	var bs []*clusterBroker
	for i := range n {
		b := newClusterBroker(t, i)
		b.extra = extra
		var join []string
		if i > 0 {
			join = []string{bs[0].gossip}
		}
		b.startFresh(t, join, n)
		bs = append(bs, b)
	}
	return bs, waitCluster(t, bs[0].kafka, n)
}

// metricSum adds up every series of a metric (all label sets) on a
// broker's /metrics.
func metricSum(addr, name string, match ...string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, m := range match {
			if !strings.Contains(line, m) {
				continue next
			}
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum, sc.Err()
}

// waitUntil polls cond every 200 ms until it returns "" or the timeout
// passes; then the test fails with cond's last answer.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		last := cond()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after %v: %s", what, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// partitionLog reads a stopped broker's copy of a partition from its
// data directory: batch bytes from offset from to the end.
func partitionLog(t *testing.T, b *clusterBroker, topic string, part int32) (start, end int64, read func(from int64) []byte) {
	t.Helper()
	l, err := storage.Open(storage.Config{Dir: filepath.Join(b.dir, "data", topic+"-"+strconv.Itoa(int(part)))})
	if err != nil {
		t.Fatalf("broker %d: cannot open its %s-%d: %v", b.id, topic, part, err)
	}
	t.Cleanup(func() { l.Close() })
	return l.StartOffset(), l.EndOffset(), func(from int64) []byte {
		res, err := l.Read(from, 1<<40, l.EndOffset())
		if err != nil {
			t.Fatalf("broker %d: read %s-%d from %d: %v", b.id, topic, part, from, err)
		}
		defer res.Release()
		var out []byte
		for _, c := range res.Chunks {
			buf := make([]byte, c.Size)
			if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
				t.Fatal(err)
			}
			out = append(out, buf...)
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
		if err := b.proc.Stop(30 * time.Second); err != nil {
			t.Logf("broker %d: stop: %v", b.id, err)
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
		copies = append(copies, copyOf{b.id, s, e, r})
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
	if testing.Short() {
		t.Skip("starts real broker processes")
	}
	bs, controller := startClusterOf(t, 3, "--replica-snapshot-entries", "40", "--replica-trailing-logs", "10")
	defer dumpLogs(t, bs)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	seeds := []string{bs[0].kafka, bs[1].kafka, bs[2].kafka}
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
	victim.proc.Kill()
	// One produce request per record: each is a raft entry, so this is
	// far more than the 10 entries kept behind a snapshot.
	produce(50, 400)
	// Snapshots are checked every 10 s: wait for the leader to take one
	// past the victim's position (raft then drops all but 10 entries
	// behind it, so the victim can only catch up from the snapshot).
	snapDir := filepath.Join(bs[leader].dir, "data", "snap-0", "raft", "snapshots")
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
	victim.start(t, []string{bs[leader].gossip}, 0)
	waitUntil(t, 90*time.Second, "restarted replica installs a snapshot and catches up", func() string {
		n, err := metricSum(victim.http, "simtel_broker_replica_snapshot_installs_total")
		if err != nil || n < 1 {
			return fmt.Sprintf("snapshot installs on broker %d: %v (%v)", victim.id, n, err)
		}
		hw, err := hwOf(victim.http, "snap")
		if err != nil || hw[0] < 500 {
			return fmt.Sprintf("broker %d high watermark %v (%v)", victim.id, hw, err)
		}
		return ""
	})
	produce(500, 20)
	// Let the last entries reach every replica before the stop.
	waitUntil(t, 30*time.Second, "all replicas applied the last write", func() string {
		for _, b := range bs {
			hw, err := hwOf(b.http, "snap")
			if err != nil || hw[0] < 520 {
				return fmt.Sprintf("broker %d high watermark %v (%v)", b.id, hw, err)
			}
		}
		return ""
	})
	end := sameLogs(t, bs, "snap", 0)
	if end != 520 {
		t.Errorf("logs end at %d, want 520", end)
	}
}
