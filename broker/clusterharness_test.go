package broker_test

// The harness of the tests on real multi-process clusters (cluster_test,
// replication_test, chaos_test, membership_test, offsets_failover_test):
// starting and stopping `simtel broker` processes in cluster mode,
// waiting for a controller and for partition leaders, Metadata and
// /metrics look-ups, idempotent acks=all load, reading a topic back and
// the checker of lost, duplicated and reordered records.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/internal/batchtest"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// clusterBroker is one real `simtel broker` process in cluster mode,
// started by brokertest (which logs its log tails if the test fails).
type clusterBroker = brokertest.Broker

// newClusterBroker prepares broker id on free ports, not started: groups
// rebalance at once and the log is at info level, which some tests read.
func newClusterBroker(t *testing.T, id int) *clusterBroker {
	return brokertest.NewNode(t, id, brokertest.GroupDelay(0), brokertest.Args("--log-level", "info"))
}

// joinBroker starts a broker with the next node id and the extra flags,
// joining the cluster through the gossip of (*bs)[0], and appends it to
// *bs.
func joinBroker(t *testing.T, bs *[]*clusterBroker, extra ...string) *clusterBroker {
	t.Helper()
	b := newClusterBroker(t, len(*bs))
	b.ExtraArgs = extra
	*bs = append(*bs, b)
	b.StartNodeFresh([]string{(*bs)[0].GossipAddr}, 0)
	return b
}

// metadataRequest asks for topics, or for every topic if topics is nil.
func metadataRequest(topics ...string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	if topics != nil {
		for _, tp := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(tp)
			req.Topics = append(req.Topics, rt)
		}
	}
	return req
}

// metadataFrom asks one broker (not the cluster) for its metadata.
func metadataFrom(ctx context.Context, addr string, topics ...string) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := metadataRequest(topics...)
	var resp *kmsg.MetadataResponse
	r, err := cl.SeedBrokers()[0].RetriableRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	resp = r.(*kmsg.MetadataResponse)
	return resp, nil
}

// waitCluster waits up to 45 s until addr reports want alive brokers and
// a controller among them; it returns the controller's id.
func waitCluster(t *testing.T, addr string, want int) int32 {
	t.Helper()
	return brokertest.WaitCluster(t, addr, want, 45*time.Second)
}

// startClusterOf starts n brokers (ids 0..n-1) forming one cluster, each
// with extra flags, and returns them and the controller's id. Under
// go test -short it skips the test (brokertest's nodes imply SkipShort),
// so its callers need no skip of their own.
func startClusterOf(t *testing.T, n int, extra ...string) ([]*clusterBroker, int32) {
	t.Helper()
	var bs []*clusterBroker
	for i := range n {
		b := newClusterBroker(t, i)
		b.ExtraArgs = extra
		var join []string
		if i > 0 {
			join = []string{bs[0].GossipAddr}
		}
		b.StartNodeFresh(join, n)
		bs = append(bs, b)
	}
	return bs, waitCluster(t, bs[0].Addr, n)
}

// startClusterWith starts n brokers (ids 0..n-1) forming one cluster,
// each with the flags args gives it (which may name its addresses, so a
// port taken meanwhile is not retried), and returns them and the
// controller's id.
func startClusterWith(t *testing.T, n int, args func(b *clusterBroker) []string) ([]*clusterBroker, int32) {
	t.Helper()
	var bs []*clusterBroker
	for i := range n {
		b := newClusterBroker(t, i)
		b.ExtraArgs = args(b)
		var join []string
		if i > 0 {
			join = []string{bs[0].GossipAddr}
		}
		bs = append(bs, b)
		b.StartNode(join, n)
	}
	return bs, waitCluster(t, bs[0].Addr, n)
}

// startClusterFor is startClusterOf for a test that runs within a time
// bound: it also returns the brokers' Kafka addresses and a context that
// ends after within or with the test.
func startClusterFor(t *testing.T, n int, within time.Duration, extra ...string) ([]*clusterBroker, int32, []string, context.Context) {
	t.Helper()
	bs, controller := startClusterOf(t, n, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	return bs, controller, brokertest.Addrs(bs), ctx
}

// startGroupCluster is startClusterFor of three brokers that also waits
// until they run one group coordinator per offsets partition.
func startGroupCluster(t *testing.T, within time.Duration) ([]*clusterBroker, int32, []string, context.Context) {
	t.Helper()
	bs, controller, seeds, ctx := startClusterFor(t, 3, within)
	waitCoordinators(t, bs)
	return bs, controller, seeds, ctx
}

// goUntilStopped runs f in a goroutine with a context derived from ctx;
// stop cancels that context and returns once f has.
func goUntilStopped(ctx context.Context, f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// waitUntil polls cond (testutil.WaitFor) until it returns "" or the
// timeout passes; then the test fails with cond's last answer.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	testutil.WaitFor(t, timeout, what, func() error {
		if last := cond(); last != "" {
			return errors.New(last)
		}
		return nil
	})
}

// loadAvg is the machine's 1-minute load average, for reports.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(data))[0]
}

// replChecker records every acknowledged and every read record and
// reports lost, duplicated and reordered ones.
type replChecker struct {
	mu    sync.Mutex
	acked map[string]ackedAt // value -> where it was acknowledged
	// ackTimes per partition, to measure failover.
	ackTimes map[int32][]time.Time
}

type ackedAt struct {
	part int32
	off  int64
}

func (c *replChecker) ack(r *kgo.Record) {
	c.mu.Lock()
	c.acked[string(r.Value)] = ackedAt{r.Partition, r.Offset}
	c.ackTimes[r.Partition] = append(c.ackTimes[r.Partition], time.Now())
	c.mu.Unlock()
}

// firstAckAfter is the first acknowledgement on part after t.
func (c *replChecker) firstAckAfter(part int32, t time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, at := range c.ackTimes[part] {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// verify compares what was read (per partition, in offset order) with
// what was acknowledged. Values are "producer-sequence"; one producer's
// records in one partition must be read in sequence order.
func (c *replChecker) verify(read map[int32][]*kgo.Record) (lost, dup, reordered int, summary string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]int{}
	total := 0
	for p, recs := range read {
		lastSeq := map[string]int{}
		for _, r := range recs {
			total++
			v := string(r.Value)
			seen[v]++
			if seen[v] == 2 {
				dup++
			}
			prod, seqS, _ := strings.Cut(v, "-")
			seq, _ := strconv.Atoi(seqS)
			if last, ok := lastSeq[prod]; ok && seq <= last {
				reordered++
			}
			lastSeq[prod] = seq
			if a, ok := c.acked[v]; ok && (a.part != p || a.off != r.Offset) && seen[v] == 1 {
				reordered++ // read somewhere else than acknowledged
			}
		}
	}
	for v := range c.acked {
		if seen[v] == 0 {
			lost++
		}
	}
	summary = fmt.Sprintf("acknowledged %d, read %d, lost %d, duplicated %d, reordered %d", len(c.acked), total, lost, dup, reordered)
	return
}

// leaderOf asks live brokers for the leader and epoch of topic/part.
func leaderOf(ctx context.Context, addrs []string, topic string, part int32) (int32, int32) {
	for _, a := range addrs {
		m, err := metadataFrom(ctx, a, topic)
		if err != nil || len(m.Topics) == 0 || int(part) >= len(m.Topics[0].Partitions) {
			continue
		}
		mp := m.Topics[0].Partitions[part]
		return mp.Leader, mp.LeaderEpoch
	}
	return -1, -1
}

// scrapeMetrics calls each with every series of the /metrics of the broker
// whose HTTP listener is addr: the line and its value.
func scrapeMetrics(addr string, each func(line string, v float64)) error {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(line, "#") {
			continue
		}
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		each(line, v)
	}
	return sc.Err()
}

// partitionMetrics calls each with every series of a per-partition metric
// of topic on the broker whose HTTP listener is addr: the metric's name,
// the partition and the value.
func partitionMetrics(addr, topic string, each func(name string, p int32, v float64)) error {
	return scrapeMetrics(addr, func(line string, v float64) {
		name, labels, ok := strings.Cut(line, "{")
		if !ok || !strings.Contains(labels, `topic="`+topic+`"`) {
			return
		}
		_, rest, ok := strings.Cut(labels, `partition="`)
		if !ok {
			return
		}
		p, _ := strconv.Atoi(rest[:strings.IndexByte(rest, '"')])
		each(name, int32(p), v)
	})
}

// hwOf reads a broker's high watermark of every local partition of topic
// from /metrics (on a follower: its applied end offset).
func hwOf(addr, topic string) (map[int32]int64, error) {
	out := map[int32]int64{}
	if err := partitionMetrics(addr, topic, func(name string, p int32, v float64) {
		if name == "simtel_broker_partition_high_watermark" {
			out[p] = int64(v)
		}
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// clusterStatus is the part of `simtel cluster status -o json` the
// tests check.
type clusterStatus struct {
	Brokers []struct {
		ID       int32  `json:"id"`
		Address  string `json:"address"`
		Replicas int    `json:"replicas"`
		Leaders  int    `json:"leaders"`
	} `json:"brokers"`
	Problems []any `json:"problems"`
}

// clusterStatusOf runs `simtel cluster status` of topic against brokers.
// why, for waitUntil, is why the answer is not yet the wanted one: the
// command failed, or it does not list n brokers and no problems. Output
// that is not JSON fails the test.
func clusterStatusOf(t *testing.T, brokers, topic string, n int) (st clusterStatus, out []byte, why string) {
	t.Helper()
	out, err := exec.Command(testutil.Binary(t), "cluster", "status", "--brokers", brokers, "--topic", topic, "-o", "json").CombinedOutput()
	if err != nil {
		return st, out, fmt.Sprintf("simtel cluster status: %v\n%s", err, out)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("simtel cluster status -o json: %v\n%s", err, out)
	}
	if len(st.Brokers) != n || len(st.Problems) != 0 {
		return st, out, fmt.Sprintf("want %d brokers and no problems:\n%s", n, out)
	}
	return st, out, ""
}

// produceRequest is a Produce request of records (a record batch, or
// none) to one partition, with acks and a timeout in milliseconds.
func produceRequest(topic string, part int32, records []byte, acks int16, timeoutMillis int32) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, timeoutMillis
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = part
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// plainBatch is a one-record batch without a producer id.
func plainBatch(v string) []byte {
	return batchtest.Encode(kmsg.RecordBatch{Magic: 2, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, PartitionLeaderEpoch: -1}, v)
}

// chaosLoad is idempotent acks=all producers sending "pW-N" records (see
// loadConfig) round-robin over a topic's partitions until stopped, every
// acknowledgement recorded in chk.
type chaosLoad struct {
	chk  *replChecker
	stop context.CancelFunc
	wg   sync.WaitGroup
	errs sync.Map // value -> error of records not acknowledged

	mu struct {
		sync.Mutex
		watch map[int32]bool       // partitions whose acknowledgements are timed
		ackAt map[string]time.Time // value -> when acknowledged, watched partitions
	}
}

// watch starts timing each acknowledgement on parts.
func (l *chaosLoad) watch(parts []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range parts {
		l.mu.watch[p] = true
	}
}

func (l *chaosLoad) ack(r *kgo.Record) {
	l.chk.ack(r)
	l.mu.Lock()
	if l.mu.watch[r.Partition] {
		l.mu.ackAt[string(r.Value)] = time.Now()
	}
	l.mu.Unlock()
}

// ackedAt is when a record of a watched partition was acknowledged.
func (l *chaosLoad) ackedAt(v string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.mu.ackAt[v]
	return at, ok
}

// startLoad starts the load of the fault tests: producers clients sending
// about 2000 records a second each, refreshing metadata every 500 ms.
func startLoad(t *testing.T, ctx context.Context, seeds []string, topic string, producers int) *chaosLoad {
	// franz-go refreshes metadata at most every 5 s by default; a refresh
	// right after a fault often still sees the old leader, so the default
	// adds up to 5 s to every failover. 500 ms keeps the tests short and
	// the failover figures closer to the cluster's own.
	//
	// About 2000 records a second per producer: enough to have writes in
	// flight at every fault, few enough to read back quickly on a loaded
	// machine.
	return startLoadWith(t, ctx, loadConfig{
		seeds: seeds, topic: topic, producers: producers, prefix: "p",
		opts: []kgo.Opt{kgo.MaxBufferedRecords(2000), kgo.MetadataMinAge(500 * time.Millisecond),
			kgo.RetryTimeout(90 * time.Second), kgo.RecordDeliveryTimeout(120 * time.Second)},
		pauseEvery: 10, pauseAt: 9, pause: 5 * time.Millisecond,
	})
}

// loadConfig is how a chaosLoad produces.
type loadConfig struct {
	seeds     []string
	topic     string
	producers int
	prefix    string    // producer w sends "<prefix><w>-<n>"
	opts      []kgo.Opt // client options besides seeds, topic and round-robin partitioning
	// A producer sleeps pause after record n when n%pauseEvery == pauseAt.
	pauseEvery, pauseAt int
	pause               time.Duration
	logDir              string // if set, producer w logs to logDir/producer-<w>.log
}

// clientLog has a client log at level to a new file at path, closed when
// the test ends; each line starts with the wall-clock time, so that it
// reads beside the brokers' logs.
func clientLog(t *testing.T, path string, level kgo.LogLevel) (kgo.Opt, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { f.Close() })
	return kgo.WithLogger(kgo.BasicLogger(f, level, func() string {
		return time.Now().UTC().Format("15:04:05.000 ")
	})), nil
}

// startLoadWith starts cfg.producers idempotent acks=all producers that
// send until stop (see finish).
func startLoadWith(t *testing.T, ctx context.Context, cfg loadConfig) *chaosLoad {
	l := &chaosLoad{chk: &replChecker{acked: map[string]ackedAt{}, ackTimes: map[int32][]time.Time{}}}
	l.mu.watch, l.mu.ackAt = map[int32]bool{}, map[string]time.Time{}
	pctx, stop := context.WithCancel(ctx)
	l.stop = stop
	for w := range cfg.producers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.seeds...), kgo.DefaultProduceTopic(cfg.topic),
				kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}, cfg.opts...)
			if cfg.logDir != "" {
				if o, err := clientLog(t, filepath.Join(cfg.logDir, fmt.Sprintf("producer-%d.log", w)), kgo.LogLevelInfo); err != nil {
					t.Logf("producer %d: no client log: %v", w, err)
				} else {
					opts = append(opts, o)
				}
			}
			p, err := kgo.NewClient(opts...)
			if err != nil {
				t.Error(err)
				return
			}
			defer p.Close()
			for i := 0; pctx.Err() == nil; i++ {
				v := fmt.Sprintf("%s%d-%d", cfg.prefix, w, i)
				p.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
					if err != nil {
						l.errs.Store(v, err)
						return
					}
					l.ack(r)
				})
				if i%cfg.pauseEvery == cfg.pauseAt {
					time.Sleep(cfg.pause)
				}
			}
			if err := p.Flush(ctx); err != nil {
				t.Errorf("producer %d: flush: %v", w, err)
			}
		}()
	}
	return l
}

// acked is the number of acknowledged records so far.
func (l *chaosLoad) acked() int {
	l.chk.mu.Lock()
	defer l.chk.mu.Unlock()
	return len(l.chk.acked)
}

// waitAcks waits until n records are acknowledged.
func (l *chaosLoad) waitAcks(t *testing.T, n int) {
	t.Helper()
	waitUntil(t, 60*time.Second, fmt.Sprintf("%d records acknowledged", n), func() string {
		if got := l.acked(); got < n {
			return fmt.Sprintf("only %d", got)
		}
		return ""
	})
}

// waitAckAfter waits for the first acknowledgement on part after at.
func (l *chaosLoad) waitAckAfter(t *testing.T, part int32, at time.Time, what string) time.Time {
	t.Helper()
	for {
		if a, ok := l.chk.firstAckAfter(part, at); ok {
			return a
		}
		if time.Since(at) > 90*time.Second {
			t.Fatalf("%s: no write acknowledged on partition %d within 90s", what, part)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finish stops the producers, waits for their last records and fails the
// test for every record that was not acknowledged.
func (l *chaosLoad) finish(t *testing.T) {
	t.Helper()
	l.stop()
	l.wg.Wait()
	n := 0
	l.errs.Range(func(k, v any) bool {
		if n++; n <= 10 {
			t.Errorf("record %v not acknowledged: %v", k, v)
		}
		return true
	})
	if n > 10 {
		t.Errorf("... %d records not acknowledged in all", n)
	}
}

// maxAckGap is the longest time between two acknowledgements on one
// partition (a write pause seen by the producers), and the partition.
func (g *chaosLoad) maxAckGap() (time.Duration, int32) {
	g.chk.mu.Lock()
	defer g.chk.mu.Unlock()
	var gap time.Duration
	var part int32
	for p, ts := range g.chk.ackTimes {
		sorted := slices.Clone(ts)
		slices.SortFunc(sorted, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(sorted); i++ {
			if d := sorted[i].Sub(sorted[i-1]); d > gap {
				gap, part = d, p
			}
		}
	}
	return gap, part
}

// finishAndCheck stops the producers, then reads the topic back from the
// start and checks every acknowledged record is there once, in order.
func (g *chaosLoad) finishAndCheck(ctx context.Context, t *testing.T, seeds []string, topic string) {
	t.Helper()
	g.finish(t)
	want := g.acked()
	lost, dup, reord, summary := g.chk.verify(readTopic(t, ctx, seeds, topic, want))
	gap, part := g.maxAckGap()
	t.Logf("checker: %s; longest pause between acknowledgements on one partition: %v (partition %d, load %s)", summary, gap.Round(time.Millisecond), part, loadAvg())
	if lost != 0 || dup != 0 || reord != 0 || want == 0 {
		t.Errorf("checker: %s", summary)
	}
}

// readTopic reads topic from the start until want records (and 2s more)
// or its deadline.
func readTopic(t *testing.T, ctx context.Context, seeds []string, topic string, want int) map[int32][]*kgo.Record {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := map[int32][]*kgo.Record{}
	n := 0
	// A minute, and a second more per 20,000 records: the failover test
	// reads back millions, which a CPU-starved machine serves slower than
	// a minute allows; the loop ends as soon as all are read.
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second+time.Duration(want/20000)*time.Second)
	defer cancel()
	quiet := time.Time{}
	for cctx.Err() == nil && (n < want || time.Now().Before(quiet)) {
		if n >= want && quiet.IsZero() {
			quiet = time.Now().Add(2 * time.Second)
		}
		fctx, fcancel := context.WithTimeout(cctx, time.Second)
		fs := c.PollFetches(fctx)
		fcancel()
		fs.EachError(func(tp string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Logf("fetch %s/%d: %v", tp, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			read[r.Partition] = append(read[r.Partition], r)
			n++
		})
	}
	return read
}

// checkRead runs the checker over what a reader read, logs its summary
// and fails the test unless nothing was lost, duplicated or reordered.
func checkRead(t *testing.T, chk *replChecker, who string, read map[int32][]*kgo.Record) {
	t.Helper()
	lost, dup, reord, summary := chk.verify(read)
	t.Logf("checker (%s): %s", who, summary)
	if lost != 0 || dup != 0 || reord != 0 || len(chk.acked) == 0 {
		t.Errorf("checker (%s): %s", who, summary)
	}
}

// createTopic creates topic with parts partitions and replication factor
// rf through the brokers at seeds (the controller, or any broker that
// forwards to it) and fails the test if it cannot.
func createTopic(t *testing.T, ctx context.Context, seeds []string, topic string, parts int32, rf int16) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if r, err := kadm.NewClient(cl).CreateTopic(ctx, parts, rf, nil, topic); err != nil || r.Err != nil {
		t.Fatalf("create %s with RF %d: %v %v", topic, rf, err, r.Err)
	}
}

// waitLeaders waits up to 60s until every partition of topic has rf
// replicas and is led by its preferred replica (see spread).
func waitLeaders(t *testing.T, ctx context.Context, seeds []string, topic string, rf int) {
	t.Helper()
	waitUntil(t, 60*time.Second, "every partition has a reported leader", func() string {
		_, leaders, settled, err := spread(ctx, seeds, topic, rf)
		if err != nil || !settled {
			return fmt.Sprintf("leaders %v (%v)", leaders, err)
		}
		return ""
	})
}

// waitMore waits up to 60s until n more records are acknowledged than
// when it is called.
func (l *chaosLoad) waitMore(t *testing.T, what string, n int) {
	t.Helper()
	before := l.acked()
	waitUntil(t, 60*time.Second, what, func() string {
		if got := l.acked(); got < before+n {
			return fmt.Sprintf("%d acknowledged, %d before", got, before)
		}
		return ""
	})
}

// findCoordinator asks the cluster, until it answers, which broker
// coordinates key: a group (typ 0) or a transactional id (typ 1).
func findCoordinator(t *testing.T, ctx context.Context, cl *kgo.Client, typ int8, key string) int32 {
	t.Helper()
	for ctx.Err() == nil {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType, req.CoordinatorKey = typ, key
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && resp.ErrorCode == 0 && resp.NodeID >= 0 {
			return resp.NodeID
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no coordinator for %q (type %d): %v", key, typ, ctx.Err())
	return -1
}

// restartWithJoin starts a stopped broker again, joining the others.
func restartWithJoin(t *testing.T, down *clusterBroker, bs []*clusterBroker) {
	t.Helper()
	down.StartNode(addrsBut(bs, down, gossipAddr), 0)
}

// addrsBut is an address (addr: kafkaAddr or gossipAddr) of every broker
// of bs but except: the brokers a test still talks to, or joins with,
// while except is down.
func addrsBut(bs []*clusterBroker, except *clusterBroker, addr func(*clusterBroker) string) []string {
	var out []string
	for _, b := range bs {
		if b != except {
			out = append(out, addr(b))
		}
	}
	return out
}

// kafkaAddr and gossipAddr pick the address addrsBut lists.
func kafkaAddr(b *clusterBroker) string  { return b.Addr }
func gossipAddr(b *clusterBroker) string { return b.GossipAddr }
