package broker_test

// Fault-injection tests on real multi-process clusters: a network
// partition that isolates a partition leader (through faultproxy, one
// proxy in front of each broker's raft listener) and repeated SIGKILLs of
// partition leaders, both under idempotent acks=all production and both
// checked by replChecker (lost, duplicated, reordered records). See
// docs/broker-cluster.md, "Fault tests".

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/internal/faultproxy"
)

// chaosCluster is n real brokers, broker i on its own loopback IP
// 127.0.0.(11+i) (Linux routes all of 127/8 to lo) with every port on
// it. Each broker's raft listener sits behind a faultproxy; the broker
// advertises the proxy as its raft address, so every raft connection
// (controller, partition groups, forwarded commands) from broker a to
// broker b goes through b's proxy, which knows a by the source IP (the
// raft mux dials from its --raft-listen IP). Gossip and Kafka traffic do
// not go through the proxies.
type chaosCluster struct {
	t       *testing.T
	bs      []*clusterBroker
	ips     []netip.Addr
	proxies []*faultproxy.Proxy
	seeds   []string
	rng     *rand.Rand
}

// chaosRand returns the test's random source and logs its seed;
// SIMTEL_CHAOS_SEED=N replays a run's choices (partitions, delays).
func chaosRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SIMTEL_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SIMTEL_CHAOS_SEED=%q is not a number", s)
		}
		seed = v
	}
	t.Logf("random seed %d (rerun with SIMTEL_CHAOS_SEED=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x5eed))
}

// freePortOn returns a free host:port on ip.
func freePortOn(t *testing.T, ip netip.Addr) string {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatalf("cannot listen on %v (this test needs all of 127.0.0.0/8 on loopback): %v", ip, err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startChaosCluster starts n brokers (bootstrap-expect n) with extra
// flags and waits until every broker sees all n and a controller.
func startChaosCluster(t *testing.T, n int, extra ...string) *chaosCluster {
	t.Helper()
	cc := &chaosCluster{t: t, rng: chaosRand(t)}
	for i := range n {
		ip := netip.AddrFrom4([4]byte{127, 0, 0, byte(11 + i)})
		cb := newClusterBroker(t, i)
		cc.bs = append(cc.bs, cb)
		cc.ips = append(cc.ips, ip)
		cc.proxies = append(cc.proxies, nil)
	}
	t.Cleanup(func() {
		for _, p := range cc.proxies {
			if p != nil {
				p.Close()
			}
		}
	})
	for i, cb := range cc.bs {
		var join []string
		if i > 0 {
			join = []string{cc.bs[0].GossipAddr}
		}
		var err error
		for range 5 {
			ip := cc.ips[i]
			cb.Addr, cb.RaftAddr, cb.GossipAddr, cb.HTTPAddr = freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip)
			if cc.proxies[i] != nil {
				cc.proxies[i].Close()
			}
			if cc.proxies[i], err = faultproxy.New("127.0.0.1:0", cb.RaftAddr, nil); err != nil {
				t.Fatal(err)
			}
			cb.ExtraArgs = append(slices.Clip(extra), "--raft-advertise", cc.proxies[i].Addr())
			if err = cb.TryStartNode(join, n); err == nil || !strings.Contains(err.Error(), "address already in use") {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		cc.seeds = append(cc.seeds, cb.Addr)
	}
	for _, b := range cc.bs {
		waitCluster(t, b.Addr, n)
	}
	return cc
}

// cut sets what b's proxy does with raft connections from a.
func (cc *chaosCluster) cut(a, b int, m faultproxy.Mode) {
	cc.proxies[b].Set(cc.ips[a], m)
}

// isolate cuts broker v's raft links to and from every other broker
// (mode Blackhole or Refuse); heal restores all links.
func (cc *chaosCluster) isolate(v int, m faultproxy.Mode) {
	for o := range cc.bs {
		if o != v {
			cc.cut(v, o, m)
			cc.cut(o, v, m)
		}
	}
}

func (cc *chaosCluster) heal() {
	for a := range cc.bs {
		for b := range cc.bs {
			if a != b {
				cc.cut(a, b, faultproxy.Pass)
			}
		}
	}
}

// addrs is the Kafka addresses of the brokers not in except.
func (cc *chaosCluster) addrs(except ...int) []string {
	var out []string
	for i, b := range cc.bs {
		if !slices.Contains(except, i) {
			out = append(out, b.Addr)
		}
	}
	return out
}

// gossipOf is the gossip addresses of the brokers other than v.
func (cc *chaosCluster) gossipOf(v int) []string {
	var out []string
	for i, b := range cc.bs {
		if i != v {
			out = append(out, b.GossipAddr)
		}
	}
	return out
}

// partInfo is a partition's leader, epoch and replicas as the most
// up-to-date broker reports them.
type partInfo struct {
	leader, epoch int32
	replicas      []int32
}

// partitionsOf asks each broker in addrs for topic's partitions and keeps,
// per partition, the answer with the highest leader epoch (a broker cut
// off from the controller answers from stale metadata).
func partitionsOf(ctx context.Context, addrs []string, topic string) map[int32]partInfo {
	out := map[int32]partInfo{}
	for _, a := range addrs {
		mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m, err := metadataFrom(mctx, a, topic)
		cancel()
		if err != nil || len(m.Topics) != 1 || m.Topics[0].ErrorCode != 0 {
			continue
		}
		for _, p := range m.Topics[0].Partitions {
			if cur, ok := out[p.Partition]; p.ErrorCode == 0 && p.Leader >= 0 && (!ok || p.LeaderEpoch > cur.epoch) {
				out[p.Partition] = partInfo{p.Leader, p.LeaderEpoch, slices.Clone(p.Replicas)}
			}
		}
	}
	return out
}

// createSpread creates topic with parts partitions, RF 3, and waits until
// every partition has 3 replicas and a raft leader that reported itself
// (epoch > 0). It waits up to a minute for the leaders to spread evenly;
// on a loaded machine an election can move a leadership that the
// preferred-leader hand-back returns only later (its retries back off),
// so after that minute an uneven spread is accepted and logged.
func (cc *chaosCluster) createSpread(ctx context.Context, topic string, parts int) map[int32]partInfo {
	t := cc.t
	t.Helper()
	createTopic(t, ctx, cc.seeds, topic, int32(parts), 3)
	start := time.Now()
	for {
		ps := partitionsOf(ctx, cc.seeds, topic)
		leads := map[int32]int{}
		led := len(ps) == parts
		for _, p := range ps {
			leads[p.leader]++
			led = led && len(p.replicas) == 3 && p.epoch > 0
		}
		even := led
		for i := range cc.bs {
			even = even && leads[int32(i)] == parts/len(cc.bs)
		}
		switch {
		case even:
			return ps
		case led && time.Since(start) > 60*time.Second:
			t.Logf("%s: leaders not evenly spread after 60s, going on with %+v", topic, ps)
			return ps
		case time.Since(start) > 3*time.Minute:
			t.Fatalf("%s: not every partition has 3 replicas and a reported raft leader after 3m: %+v", topic, ps)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startSpreadLoad creates topic as createSpread does, starts three
// producers and a live reader on it, and waits until acks records are
// acknowledged: the faults of a chaos test start under load.
func (cc *chaosCluster) startSpreadLoad(ctx context.Context, topic string, parts, acks int) (map[int32]partInfo, *chaosLoad, *liveReader) {
	t := cc.t
	t.Helper()
	ps := cc.createSpread(ctx, topic, parts)
	load := startLoad(t, ctx, cc.seeds, topic, 3)
	live := startLiveReader(t, ctx, cc.seeds, topic)
	load.waitAcks(t, acks)
	return ps, load, live
}

// liveReader consumes a topic from the start while faults happen, so
// offset resets or duplicates seen by a reader during failovers show.
type liveReader struct {
	cl   *kgo.Client
	stop context.CancelFunc
	done chan struct{}
	once sync.Once
	mu   sync.Mutex
	read map[int32][]*kgo.Record
	n    int
}

func startLiveReader(t *testing.T, ctx context.Context, seeds []string, topic string) *liveReader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	lr := &liveReader{cl: cl, stop: stop, done: make(chan struct{}), read: map[int32][]*kgo.Record{}}
	go func() {
		defer close(lr.done)
		for lctx.Err() == nil {
			fs := cl.PollFetches(lctx)
			lr.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				lr.read[r.Partition] = append(lr.read[r.Partition], r)
				lr.n++
			})
			lr.mu.Unlock()
		}
	}()
	t.Cleanup(func() { lr.close() })
	return lr
}

// drain waits (up to 60s) until want records were read, then stops.
func (lr *liveReader) drain(want int) map[int32][]*kgo.Record {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		lr.mu.Lock()
		n := lr.n
		lr.mu.Unlock()
		if n >= want {
			break
		}
	}
	time.Sleep(500 * time.Millisecond) // a duplicate arriving late still counts
	lr.close()
	return lr.read
}

func (lr *liveReader) close() {
	lr.once.Do(func() {
		lr.stop()
		<-lr.done
		lr.cl.Close()
	})
}

// waitConverged waits until every replica of every partition of topic
// reports the same end offset (the high watermark, on a follower its
// applied end) and then compares the replicas' partition logs batch by
// batch (offsets, leader epochs, bytes): the same records everywhere.
func (cc *chaosCluster) waitConverged(ctx context.Context, topic string, parts map[int32]partInfo) {
	t := cc.t
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		hws := map[int32]map[int32]int64{} // broker -> partition -> end
		for i, b := range cc.bs {
			hws[int32(i)], _ = hwOf(b.HTTPAddr, topic)
		}
		same := true
		var diff string
		for p, pi := range parts {
			want := hws[pi.replicas[0]][p]
			for _, r := range pi.replicas {
				got, ok := hws[r][p]
				if !ok || got != want || got == 0 {
					same = false
					diff = fmt.Sprintf("partition %d: replica %d ends at %d (reported %v), replica %d at %d", p, r, got, ok, pi.replicas[0], want)
				}
			}
		}
		if same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas of %s do not converge 60s after the writes stopped: %s", topic, diff)
		}
		time.Sleep(200 * time.Millisecond)
	}
	batches := 0
	for p, pi := range parts {
		var ref []logBatch
		for i, r := range pi.replicas {
			got, err := readPartitionLog(filepath.Join(cc.bs[r].Dir, "data", topic+"-"+strconv.Itoa(int(p))))
			if err != nil {
				t.Fatalf("broker %d: %v", r, err)
			}
			if i == 0 {
				ref = got
				batches += len(got)
				continue
			}
			if err := sameLog(ref, got); err != nil {
				t.Fatalf("%s/%d: the log of replica %d differs from replica %d's: %v", topic, p, r, pi.replicas[0], err)
			}
		}
	}
	t.Logf("all replicas of %s's %d partitions end at the same offsets and hold the same %d batches byte for byte", topic, len(parts), batches)
}

// logBatch is one record batch as stored in a partition's segment files.
type logBatch struct {
	base  int64
	epoch int32
	bytes []byte
}

// readPartitionLog reads every record batch of a partition directory's
// segment files (<base>.log, batches back to back, in base order).
func readPartitionLog(dir string) ([]logBatch, error) {
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	slices.Sort(segs) // zero-padded base offsets sort as numbers
	var out []logBatch
	for _, s := range segs {
		data, err := os.ReadFile(s)
		if err != nil {
			return nil, fmt.Errorf("cannot read segment: %w", err)
		}
		for len(data) > 0 {
			if len(data) < 17 {
				return nil, fmt.Errorf("segment %s: %d trailing bytes are not a batch header", s, len(data))
			}
			size := 12 + int(binary.BigEndian.Uint32(data[8:12]))
			if size > len(data) {
				return nil, fmt.Errorf("segment %s: batch of %d bytes with %d left", s, size, len(data))
			}
			out = append(out, logBatch{base: int64(binary.BigEndian.Uint64(data[:8])), epoch: int32(binary.BigEndian.Uint32(data[12:16])), bytes: data[:size]})
			data = data[size:]
		}
	}
	return out, nil
}

// sameLog says where two replicas' logs first differ.
func sameLog(a, b []logBatch) error {
	for i := range min(len(a), len(b)) {
		if a[i].base != b[i].base || a[i].epoch != b[i].epoch || !bytes.Equal(a[i].bytes, b[i].bytes) {
			return fmt.Errorf("batch %d: offset %d epoch %d (%d bytes) vs offset %d epoch %d (%d bytes)",
				i, a[i].base, a[i].epoch, len(a[i].bytes), b[i].base, b[i].epoch, len(b[i].bytes))
		}
	}
	if len(a) != len(b) {
		return fmt.Errorf("%d batches vs %d", len(a), len(b))
	}
	return nil
}

// rawProducer sends one-record produce requests (acks=all) for one
// partition straight to one broker, without a client's re-routing, and
// counts the answers.
type rawProducer struct {
	mu      sync.Mutex
	codes   map[string]int // error name ("ok", "timeout", ...) -> count
	okAfter []string       // values acknowledged
	sent    int
	first   map[string]time.Time // error name -> when first answered
	stop    context.CancelFunc
	done    chan struct{}
}

func startRawProducer(t *testing.T, ctx context.Context, addr, topic string, part int32, prefix string) *rawProducer {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestTimeoutOverhead(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	rp := &rawProducer{codes: map[string]int{}, first: map[string]time.Time{}, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(rp.done)
		defer cl.Close()
		for i := 0; rctx.Err() == nil; i++ {
			v := fmt.Sprintf("%s-%d", prefix, i)
			req := produceRequest(topic, part, plainBatch(v), -1, 2000)
			qctx, cancel := context.WithTimeout(rctx, 8*time.Second)
			r, err := cl.SeedBrokers()[0].Request(qctx, req)
			cancel()
			if rctx.Err() != nil {
				return
			}
			name := "ok"
			switch {
			case err != nil:
				name = "request error"
			default:
				if code := r.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
					name = kerr.ErrorForCode(code).Error()
				}
			}
			rp.mu.Lock()
			rp.sent++
			rp.codes[name]++
			if _, ok := rp.first[name]; !ok {
				rp.first[name] = time.Now()
			}
			if name == "ok" {
				rp.okAfter = append(rp.okAfter, v)
			}
			rp.mu.Unlock()
			select {
			case <-rctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { rp.finish() })
	return rp
}

// firstAnswer is when error name was first answered (false: not yet).
func (rp *rawProducer) firstAnswer(name string) (time.Time, bool) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	at, ok := rp.first[name]
	return at, ok
}

func (rp *rawProducer) finish() {
	rp.stop()
	<-rp.done
}

func (rp *rawProducer) String() string {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return fmt.Sprintf("%d requests, answers %v", rp.sent, rp.codes)
}

// partitionCase is one network partition scenario.
type partitionCase struct {
	brokers int
	// controller: isolate the controller leader (so the majority elects
	// a controller as well as partition leaders); else a broker that is
	// not the controller.
	controller bool
	mode       faultproxy.Mode
	// oneWay cuts only the connections the isolated broker opens; the
	// others still reach it (an asymmetric partition).
	oneWay bool
}

// The three-broker variant isolates the controller leader and blackholes
// its connections.
func TestClusterPartitionIsolatedLeader(t *testing.T) {
	testPartitionIsolatedLeader(t, partitionCase{brokers: 3, controller: true, mode: faultproxy.Blackhole})
}

// The five-broker variant isolates a broker that is not the controller
// and refuses the cut connections instead of blackholing them: the peers
// see resets at once rather than silence.
func TestClusterPartitionIsolatedLeaderFiveBrokers(t *testing.T) {
	testPartitionIsolatedLeader(t, partitionCase{brokers: 5, mode: faultproxy.Refuse})
}

// The one-way variant blackholes only what the leader sends: it cannot
// replicate or heartbeat, but the others' connections reach it, so the
// new leader's replication makes it a follower while still "cut".
func TestClusterPartitionOneWayLeader(t *testing.T) {
	testPartitionIsolatedLeader(t, partitionCase{brokers: 3, mode: faultproxy.Blackhole, oneWay: true})
}

// testPartitionIsolatedLeader cuts a partition leader's raft links to
// and from every other broker while producers send, and checks: the
// isolated broker acknowledges nothing sent to it after the cut; the
// majority elects new leaders for its partitions and acknowledges writes
// there; after healing, the old leader is a follower whose log is the
// same as the leader's; nothing acknowledged is lost, duplicated or
// reordered.
func testPartitionIsolatedLeader(t *testing.T, pc partitionCase) {
	if testing.Short() {
		t.Skip("starts real broker processes")
	}
	n, mode := pc.brokers, pc.mode
	cc := startChaosCluster(t, n)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic = "parted"
	before, load, live := cc.startSpreadLoad(ctx, topic, 2*n, 3000)

	// The victim: the controller leader too (withController), or a
	// broker that is not; one of its partitions at random.
	m, err := metadataFrom(ctx, cc.seeds[0])
	if err != nil {
		t.Fatal(err)
	}
	ledBy := func(v int) []int32 {
		var led []int32
		for p, pi := range before {
			if int(pi.leader) == v {
				led = append(led, p)
			}
		}
		slices.Sort(led)
		return led
	}
	v := int(m.ControllerID)
	if !pc.controller {
		// A broker other than the controller that leads a partition
		// (with an uneven spread, not every broker does).
		var cands []int
		for o := range n {
			if o != v && len(ledBy(o)) > 0 {
				cands = append(cands, o)
			}
		}
		if len(cands) == 0 {
			t.Fatalf("no broker other than the controller %d leads a partition of %s: %+v", v, topic, before)
		}
		v = cands[cc.rng.IntN(len(cands))]
	}
	led := ledBy(v)
	if len(led) == 0 {
		t.Fatalf("the controller %d leads no partition of %s: %+v", v, topic, before)
	}
	part := led[cc.rng.IntN(len(led))]
	dir := "to and from"
	if pc.oneWay {
		dir = "to"
	}
	t.Logf("isolating broker %d (leader of %s partitions %v; controller is %d): %s its raft connections %s the others", v, topic, led, m.ControllerID, mode, dir)
	load.watch(led)
	if pc.oneWay {
		for o := range cc.bs {
			if o != v {
				cc.cut(v, o, mode)
			}
		}
	} else {
		cc.isolate(v, mode)
	}
	cutAt := time.Now()

	// Writes sent to the isolated broker itself, without re-routing: none
	// may be acknowledged, it cannot reach a majority.
	iso := startRawProducer(t, ctx, cc.bs[v].Addr, topic, part, "isolated")

	// The majority elects new leaders (a higher epoch, on another broker)
	// and acknowledges writes on every partition the isolated broker led
	// (checked on the records read at the end: acknowledged before the
	// heal, stored in a batch of the new epoch).
	majority := cc.addrs(v)
	newEpoch := map[int32]int32{}
	for _, p := range led {
		for {
			pi := partitionsOf(ctx, majority, topic)[p]
			if pi.leader >= 0 && int(pi.leader) != v && pi.epoch > before[p].epoch {
				newEpoch[p] = pi.epoch
				load.waitAckAfter(t, p, time.Now(), fmt.Sprintf("partition %d after isolating its leader %d", p, v))
				t.Logf("partition %d: broker %d leads in epoch %d (was %d in %d), reported %v after the cut",
					p, pi.leader, pi.epoch, v, before[p].epoch, time.Since(cutAt).Round(time.Millisecond))
				break
			}
			if time.Since(cutAt) > 90*time.Second {
				t.Fatalf("partition %d: no new leader on the majority side 90s after isolating broker %d (now %+v)", p, v, pi)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The isolated broker loses its lease and says so.
	for {
		if at, ok := iso.firstAnswer(kerr.NotLeaderForPartition.Error()); ok {
			t.Logf("isolated broker %d answered NOT_LEADER_OR_FOLLOWER for partition %d %v after the cut", v, part, at.Sub(cutAt).Round(time.Millisecond))
			break
		}
		if time.Since(cutAt) > 60*time.Second {
			t.Fatalf("isolated broker %d never answered NOT_LEADER_OR_FOLLOWER for partition %d in 60s (%v)", v, part, iso)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// What the isolated broker tells clients: it cannot hear from the
	// controller, so its metadata is stale (reported, not checked;
	// clients ignore leaders with an epoch older than one they know).
	if pi, ok := partitionsOf(ctx, []string{cc.bs[v].Addr}, topic)[part]; ok {
		t.Logf("isolated broker %d's metadata names leader %d epoch %d for partition %d", v, pi.leader, pi.epoch, part)
	}
	// Writes go on for a while on the majority side.
	acks := load.acked()
	load.waitAcks(t, acks+3000)
	var st []string
	for i, p := range cc.proxies {
		s := p.Stats()
		st = append(st, fmt.Sprintf("%d: %d blackholed, %d refused, %d cut", i, s.Blackholed, s.Refused, s.Cut))
	}
	t.Logf("proxies during the isolation: %s", strings.Join(st, "; "))

	cc.heal()
	healAt := time.Now()
	iso.finish()
	t.Logf("healed after %v; writes sent to the isolated broker: %v", healAt.Sub(cutAt).Round(time.Millisecond), iso)
	if len(iso.okAfter) > 0 {
		t.Errorf("the isolated broker %d acknowledged %d writes sent after it was cut off: %v", v, len(iso.okAfter), iso.okAfter)
	}

	// The old leader rejoins as a follower and catches up while writes go
	// on: its applied ends move past those of the majority at the heal.
	atHeal := map[int32]int64{}
	for _, p := range led {
		if pi, ok := partitionsOf(ctx, majority, topic)[p]; ok {
			hw, _ := hwOf(cc.bs[pi.leader].HTTPAddr, topic)
			atHeal[p] = hw[p]
		}
	}
	for {
		hw, _ := hwOf(cc.bs[v].HTTPAddr, topic)
		caught := true
		for _, p := range led {
			caught = caught && hw[p] > atHeal[p]
		}
		if caught {
			break
		}
		if time.Since(healAt) > 60*time.Second {
			t.Fatalf("broker %d does not catch up within 60s of the heal: its ends %v, the leaders' at the heal %v", v, hw, atHeal)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("broker %d caught up %v after the heal", v, time.Since(healAt).Round(time.Millisecond))
	load.waitAcks(t, load.acked()+2000)
	load.finish(t)

	after := partitionsOf(ctx, cc.seeds, topic)
	for _, p := range led {
		t.Logf("partition %d after the heal: leader %d epoch %d", p, after[p].leader, after[p].epoch)
		// The old leader came back as a follower: it leads again only
		// if it won a later election, never in its old term.
		if int(after[p].leader) == v && after[p].epoch <= newEpoch[p] {
			t.Errorf("partition %d: the formerly isolated broker %d leads in epoch %d, the majority's leader had epoch %d", p, v, after[p].epoch, newEpoch[p])
		}
	}
	cc.waitConverged(ctx, topic, after)
	acked := load.acked()
	checkRead(t, load.chk, "live consumer, reading through the partition", live.drain(acked))
	read := readTopic(t, ctx, cc.seeds, topic, acked)
	for _, recs := range read {
		for _, r := range recs {
			if strings.HasPrefix(string(r.Value), "isolated-") {
				t.Errorf("record %s, sent to the isolated broker, is in partition %d at offset %d", r.Value, r.Partition, r.Offset)
			}
		}
	}
	for _, p := range led {
		var first time.Time
		during := 0
		for _, r := range read[p] {
			at, ok := load.ackedAt(string(r.Value))
			if ok && r.LeaderEpoch >= newEpoch[p] && at.After(cutAt) && at.Before(healAt) {
				during++
				if first.IsZero() || at.Before(first) {
					first = at
				}
			}
		}
		if during == 0 {
			t.Errorf("partition %d: no record acknowledged during the isolation is stored in epoch %d or later (the majority side's leader)", p, newEpoch[p])
			continue
		}
		t.Logf("partition %d: %d records acknowledged by the majority side during the isolation, the first %v after the cut",
			p, during, first.Sub(cutAt).Round(time.Millisecond))
	}
	checkRead(t, load.chk, "consumer after the heal", read)
}

func TestClusterLeaderKills(t *testing.T) {
	testLeaderKills(t, 3, 10)
}

func TestClusterLeaderKillsFiveBrokers(t *testing.T) {
	testLeaderKills(t, 5, 5)
}

// testLeaderKills SIGKILLs the leader of a random partition kills times,
// at random moments, while idempotent acks=all producers send; after each
// kill it waits for the next acknowledged write on that partition (the
// failover time), restarts the broker and waits until it has caught up.
// At the end every replica holds the same log and the checker finds
// nothing lost, duplicated or reordered, for a consumer reading through
// the kills and one reading afterwards.
func testLeaderKills(t *testing.T, n, kills int) {
	if testing.Short() {
		t.Skip("starts real broker processes")
	}
	// Frequent snapshots, so restarts go through snapshot restore.
	cc := startChaosCluster(t, n, "--replica-snapshot-entries", "200")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic = "kills"
	parts := 2 * n
	ps, load, live := cc.startSpreadLoad(ctx, topic, parts, 2000)

	var failovers, catchups []time.Duration
	for k := range kills {
		time.Sleep(time.Duration(200+cc.rng.IntN(1300)) * time.Millisecond)
		part := int32(cc.rng.IntN(parts))
		pi := partitionsOf(ctx, cc.seeds, topic)[part]
		if pi.leader < 0 || int(pi.leader) >= n {
			t.Fatalf("kill %d: no leader for %s/%d", k, topic, part)
		}
		v := int(pi.leader)
		victim := cc.bs[v]
		victim.Proc.Kill()
		killedAt := time.Now()
		at := load.waitAckAfter(t, part, killedAt, fmt.Sprintf("kill %d of broker %d", k, v))
		failovers = append(failovers, at.Sub(killedAt))
		now := partitionsOf(ctx, cc.addrs(v), topic)[part]
		t.Logf("kill %d: broker %d (leader of %s/%d, epoch %d) killed; next acknowledged write after %v; new leader %d epoch %d",
			k, v, topic, part, pi.epoch, at.Sub(killedAt).Round(time.Millisecond), now.leader, now.epoch)

		// Restart it and wait until every one of its replicas has moved
		// past where the partition's leader was when it came back, so
		// the next kill does not take a second replica of a partition
		// away.
		victim.StartNode(cc.gossipOf(v), 0)
		restartAt := time.Now()
		target := map[int32]int64{}
		cur := partitionsOf(ctx, cc.addrs(v), topic)
		for p, cp := range cur {
			if slices.Contains(ps[p].replicas, int32(v)) && cp.leader >= 0 && int(cp.leader) != v {
				hw, _ := hwOf(cc.bs[cp.leader].HTTPAddr, topic)
				target[p] = hw[p]
			}
		}
		for {
			hw, _ := hwOf(victim.HTTPAddr, topic)
			caught := true
			for p, want := range target {
				caught = caught && hw[p] > want
			}
			if caught {
				catchups = append(catchups, time.Since(restartAt).Round(time.Millisecond))
				break
			}
			if time.Since(restartAt) > 90*time.Second {
				t.Fatalf("kill %d: restarted broker %d has not caught up after 90s: its ends %v, the leaders' at its restart %v", k, v, hw, target)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	load.finish(t)

	cc.waitConverged(ctx, topic, partitionsOf(ctx, cc.seeds, topic))
	acked := load.acked()
	checkRead(t, load.chk, "live consumer, reading through the kills", live.drain(acked))
	checkRead(t, load.chk, "consumer after the kills", readTopic(t, ctx, cc.seeds, topic, acked))

	snaps := 0
	for _, b := range cc.bs {
		m, _ := filepath.Glob(filepath.Join(b.Dir, "data", topic+"-*", "raft", "snapshots", "*", "meta.json"))
		snaps += len(m)
	}
	sorted := slices.Clone(failovers)
	slices.Sort(sorted)
	t.Logf("failover (leader kill -> next acknowledged write on its partition) over %d kills on %d brokers: p50 %v, max %v, all %v; restarted broker caught up after %v; %d partition snapshots on disk",
		len(failovers), n, sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), failovers, catchups, snaps)
}
