// Package brokertest starts simtel brokers for the tests of other
// packages: one `simtel broker` process (Start), a cluster of them
// (StartCluster), or cluster nodes started one by one (NewNode). The
// binary is built once per test binary by testutil.Binary. Read reads a
// topic back.
//
// brokertest does not import the broker, so a test that uses it does not
// link the broker: the agent's tests must not (internal/layering checks
// that agent/... does not depend on broker/...). Which to use when:
//
//   - brokertest.Start: the tests of packages below the broker (agent/...),
//     and any test that stops, kills, pauses or restarts its broker, or
//     gives it command-line flags (Args).
//   - inproc.Start (package brokertest/inproc): a broker in the test's own
//     process, which starts faster and needs no binary, for the tests of
//     packages that may link the broker (the broker's own, and those
//     above it: sink, lake, learner, rollup, scheduler, ...). StartWith is
//     its hook.
//   - StartCluster and NewNode: cluster mode, always processes.
//
// A broker process runs under go test -short too, unless the test asks
// for SkipShort (a test that stops, kills or restarts its broker, or runs
// long) or starts a cluster, which are skipped with -short.
package brokertest

import (
	"context"
	"errors"
	"fmt"
	"os"
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

	"github.com/simtel/simtel/internal/testutil"
)

// Option changes how Start and StartCluster start a broker.
type Option func(*options)

type options struct {
	skipShort  bool
	dir        string
	logDir     string
	listen     string
	http       bool
	groupDelay *time.Duration
	args       []string
	topics     []topic
}

type topic struct {
	name       string
	partitions int32
}

// SkipShort skips the test under go test -short: the option of a test
// that stops, kills, pauses or restarts its broker, or that runs long.
// Without it a broker process runs under -short too (scripts/test.sh's
// race run is -short), and Kill or Restart under -short fails the test.
// StartCluster and NewNode imply it.
func SkipShort() Option { return func(o *options) { o.skipShort = true } }

// DataDir makes the broker keep its data in dir instead of a new
// temporary directory.
func DataDir(dir string) Option { return func(o *options) { o.dir = dir } }

// LogDir makes a broker process write its log to a new file in dir
// instead of a temporary directory, for a test that keeps its logs.
func LogDir(dir string) Option { return func(o *options) { o.logDir = dir } }

// Listen makes a broker process listen for Kafka clients on addr (from
// testutil.FreePort), known before the broker starts, for a test that
// starts a client first.
func Listen(addr string) Option { return func(o *options) { o.listen = addr } }

// HTTP gives the broker an HTTP listener (/metrics, /healthz, /readyz) on
// a free loopback port; Broker.HTTPAddr is its address. Cluster brokers
// always have one.
func HTTP() Option { return func(o *options) { o.http = true } }

// GroupDelay sets the broker's group.initial.rebalance.delay (3 s by
// default, as in production); 0 makes a new group's first rebalance
// happen at once.
func GroupDelay(d time.Duration) Option { return func(o *options) { o.groupDelay = &d } }

// Args adds command-line flags to a broker process.
func Args(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Topic creates a topic with this many partitions once the broker is up
// (replicated on up to three brokers of a cluster), and waits until each
// of its partitions has a leader.
func Topic(name string, partitions int32) Option {
	return func(o *options) { o.topics = append(o.topics, topic{name, partitions}) }
}

// Broker is one broker started for a test. It stops when the test ends.
type Broker struct {
	ID       int
	Addr     string // Kafka listener, host:port
	HTTPAddr string // HTTP listener, host:port; "" without one
	Dir      string // data directory

	// Proc is the running process of a broker started with Start,
	// StartCluster or NewNode (nil for StartWith's); Restart replaces it.
	Proc *testutil.Proc

	// RaftAddr and GossipAddr are a cluster broker's raft and gossip
	// listeners, host:port ("" outside cluster mode).
	RaftAddr, GossipAddr string

	// ExtraArgs are more flags of this broker's process, after those of
	// Args; a test may change them between starts.
	ExtraArgs []string

	// stopStarted stops a broker of StartWith; nil for a process and
	// once stopped.
	stopStarted func(d time.Duration) error

	t      testing.TB
	o      *options
	logs   []string // log files of the processes, one per start
	join   []string // cluster mode: gossip addresses to join through
	expect int      // cluster mode: --bootstrap-expect; 0 for none
}

// Start starts a `simtel broker` process on free loopback ports and
// creates the topics given with Topic. The process is killed when the
// test ends, if it still runs.
func Start(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	o := &options{}
	for _, opt := range opts {
		opt(o)
	}
	b := &Broker{t: t, o: o, Dir: o.dir}
	if b.Dir == "" {
		b.Dir = t.TempDir()
	}
	b.Addr = o.listen
	if b.Addr == "" {
		b.Addr = testutil.FreePort(t)
	}
	if o.http {
		b.HTTPAddr = testutil.FreePort(t)
	}
	b.startFresh()
	createTopics(t, []string{b.Addr}, 1, o.topics)
	return b
}

// Settings are what the options given to StartWith say of the broker.
type Settings struct {
	Dir        string         // data directory, made for the test unless DataDir
	HTTP       bool           // whether the broker gets an HTTP listener (HTTP)
	GroupDelay *time.Duration // group.initial.rebalance.delay; nil: the broker's default
}

// StartFunc starts a broker for StartWith: it sets b's ID, Addr and
// HTTPAddr (a free port each) and returns what stops the broker, waiting
// up to d for a clean stop.
type StartFunc func(t testing.TB, b *Broker, s Settings) (stop func(d time.Duration) error)

// StartWith starts a broker with start instead of as a process, and
// creates the topics given with Topic; the broker stops when the test
// ends. It is the hook of package inproc, which runs the broker in the
// test's own process: brokertest does not import the broker, so the
// tests of packages the broker must not depend on (the agent's) do not
// link it. Args, Listen and LogDir, which are a process's, fail the test.
func StartWith(t testing.TB, start StartFunc, opts ...Option) *Broker {
	t.Helper()
	o := &options{}
	for _, opt := range opts {
		opt(o)
	}
	if len(o.args) > 0 || o.listen != "" || o.logDir != "" {
		t.Fatal("brokertest.Args, brokertest.Listen and brokertest.LogDir apply to a broker process (brokertest.Start)")
	}
	if o.skipShort && testing.Short() {
		t.Skip("stops or restarts a broker, or runs long (brokertest.SkipShort)")
	}
	b := &Broker{t: t, o: o, Dir: o.dir}
	if b.Dir == "" {
		b.Dir = t.TempDir()
	}
	b.stopStarted = start(t, b, Settings{Dir: b.Dir, HTTP: o.http, GroupDelay: o.groupDelay})
	t.Cleanup(func() {
		if err := b.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
	})
	createTopics(t, []string{b.Addr}, 1, o.topics)
	return b
}

// StartCluster starts n broker processes (node ids 0..n-1) in cluster
// mode, forming one cluster, waits until every one of them sees all n
// with a controller among them, and creates the topics given with Topic
// (replication factor min(n, 3)). n may be 1: a single broker in cluster
// mode, replicated partitions and all.
func StartCluster(t testing.TB, n int, opts ...Option) []*Broker {
	t.Helper()
	o := &options{http: true, skipShort: true}
	for _, opt := range opts {
		opt(o)
	}
	if o.dir != "" || o.listen != "" {
		t.Fatal("brokertest.DataDir and brokertest.Listen do not apply to a cluster")
	}
	var bs []*Broker
	for i := range n {
		b := newNode(t, i, o)
		var join []string
		if i > 0 {
			join = []string{bs[0].GossipAddr}
		}
		b.StartNodeFresh(join, n)
		bs = append(bs, b)
	}
	for _, b := range bs {
		WaitCluster(t, b.Addr, n, 60*time.Second)
	}
	createTopics(t, Addrs(bs), int16(min(n, 3)), o.topics)
	return bs
}

// NewNode prepares cluster broker id, a process on free loopback ports
// (Kafka, HTTP, raft, gossip) with a new data directory, without starting
// it: for a test that starts, joins and restarts cluster brokers one by
// one (StartCluster starts a whole cluster). The addresses and ExtraArgs
// may be changed before its first start. Its log tails are logged if the
// test fails.
func NewNode(t testing.TB, id int, opts ...Option) *Broker {
	t.Helper()
	o := &options{http: true, skipShort: true}
	for _, opt := range opts {
		opt(o)
	}
	if o.dir != "" || o.listen != "" || len(o.topics) > 0 {
		t.Fatal("brokertest.DataDir, brokertest.Listen and brokertest.Topic do not apply to a node")
	}
	return newNode(t, id, o)
}

func newNode(t testing.TB, id int, o *options) *Broker {
	b := &Broker{ID: id, t: t, o: o, Dir: t.TempDir(),
		Addr: testutil.FreePort(t), HTTPAddr: testutil.FreePort(t),
		RaftAddr: testutil.FreePort(t), GossipAddr: testutil.FreePort(t)}
	// Registered before the processes' own cleanups, so it runs after
	// they are gone and their logs complete.
	t.Cleanup(b.dumpLogs)
	return b
}

// StartNode starts a cluster broker's process, first or again after Stop
// or Kill, joining through the gossip addresses join and with
// --bootstrap-expect expect if it is positive, and waits for its Kafka
// port; the test fails if it does not come up.
func (b *Broker) StartNode(join []string, expect int) {
	b.t.Helper()
	if err := b.TryStartNode(join, expect); err != nil {
		b.t.Fatal(err)
	}
}

// TryStartNode is StartNode returning an error, with the process's log,
// for a test that handles it.
func (b *Broker) TryStartNode(join []string, expect int) error {
	b.t.Helper()
	if b.RaftAddr == "" {
		b.t.Fatal("brokertest: StartNode of a broker that is not a cluster node (NewNode)")
	}
	b.join, b.expect = join, expect
	return b.tryStart()
}

// StartNodeFresh is StartNode for a node's first start: if one of its
// ports was taken in the meantime, it tries others; any other error fails
// the test.
func (b *Broker) StartNodeFresh(join []string, expect int) {
	b.t.Helper()
	b.join, b.expect = join, expect
	b.startFresh()
}

// Addrs lists the Kafka addresses of bs, for seed brokers.
func Addrs(bs []*Broker) []string {
	addrs := make([]string, len(bs))
	for i, b := range bs {
		addrs[i] = b.Addr
	}
	return addrs
}

// MetricsURL is the broker's /metrics address (the broker needs HTTP).
func (b *Broker) MetricsURL() string {
	if b.HTTPAddr == "" {
		b.t.Fatal("brokertest: MetricsURL of a broker without HTTP()")
	}
	return "http://" + b.HTTPAddr + "/metrics"
}

// args are the flags of the broker process.
func (b *Broker) args() []string {
	args := []string{"broker", "--node-id", strconv.Itoa(b.ID), "--data-dir", b.Dir, "--listen", b.Addr,
		"--log-level", "warn"}
	if b.HTTPAddr != "" {
		args = append(args, "--http-listen", b.HTTPAddr)
	}
	if d := b.o.groupDelay; d != nil {
		args = append(args, "--group-initial-rebalance-delay", d.String())
	}
	if b.RaftAddr != "" {
		args = append(args, "--raft-listen", b.RaftAddr, "--gossip-listen", b.GossipAddr)
		if b.expect > 0 {
			args = append(args, "--bootstrap-expect", strconv.Itoa(b.expect))
		}
		for _, j := range b.join {
			args = append(args, "--join", j)
		}
	}
	args = append(args, b.o.args...)
	return append(args, b.ExtraArgs...)
}

// tryStart starts the process and waits for its Kafka port; an error says
// why it did not come up, with its log.
func (b *Broker) tryStart() error {
	b.t.Helper()
	logDir := b.o.logDir
	if logDir == "" {
		logDir = b.t.TempDir()
	}
	b.Proc = testutil.Start(b.t, logDir, b.args()...)
	b.logs = append(b.logs, b.Proc.Log)
	if err := testutil.WaitListening(b.Addr, b.Proc, 30*time.Second); err != nil {
		return fmt.Errorf("broker %d: %w", b.ID, err)
	}
	return nil
}

// startFresh starts a new broker process; if one of its ports was taken
// between FreePort and the broker binding it, it tries other ports.
func (b *Broker) startFresh() {
	b.t.Helper()
	if b.o.skipShort && testing.Short() {
		b.t.Skip("skipped with -short: stops, kills or restarts a broker, runs long or starts a cluster (brokertest.SkipShort)")
	}
	if b.RaftAddr == "" {
		// Registered before the process's own cleanup, so it runs after
		// the process is gone and its log complete (newNode registers a
		// node's).
		b.t.Cleanup(b.dumpLogs)
	}
	for range 5 {
		err := b.tryStart()
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "address already in use") || b.o.listen != "" {
			b.t.Fatal(err)
		}
		b.Addr = testutil.FreePort(b.t)
		if b.HTTPAddr != "" {
			b.HTTPAddr = testutil.FreePort(b.t)
		}
		if b.RaftAddr != "" {
			b.RaftAddr, b.GossipAddr = testutil.FreePort(b.t), testutil.FreePort(b.t)
		}
	}
	b.t.Fatalf("broker %d: no free ports after 5 tries", b.ID)
}

// Restart starts a broker process again, on the same data directory and
// ports, after Stop or Kill.
func (b *Broker) Restart() {
	b.t.Helper()
	b.process("Restart")
	if !b.Proc.Exited() {
		b.t.Fatalf("brokertest: Restart of broker %d, which is running", b.ID)
	}
	if err := b.tryStart(); err != nil {
		b.t.Fatal(err)
	}
}

// Stop stops the broker and waits up to d for a clean stop: a broker
// process by SIGTERM, a broker of StartWith by what its start returned (a
// second Stop does nothing; its data directory can then be given to
// another start with DataDir).
func (b *Broker) Stop(d time.Duration) error {
	if b.Proc == nil {
		stop := b.stopStarted
		b.stopStarted = nil
		if stop == nil {
			return nil
		}
		return stop(d)
	}
	return b.Proc.Stop(d)
}

// Kill ends the broker process with SIGKILL.
func (b *Broker) Kill() {
	b.process("Kill")
	b.Proc.Kill()
}

// process fails the test unless b is a broker process that may be
// killed or restarted: under -short, only one started with SkipShort (or
// a cluster's), so that the -short run stays free of those tests.
func (b *Broker) process(what string) {
	if b.Proc == nil {
		b.t.Fatalf("brokertest: %s needs a broker process (brokertest.Start, StartCluster or NewNode)", what)
	}
	if testing.Short() && !b.o.skipShort {
		b.t.Fatalf("brokertest: %s under -short: start the broker with brokertest.SkipShort", what)
	}
}

// WaitCluster polls the broker at addr until it reports want brokers and
// a controller among them, and returns the controller's node id; the test
// fails if that takes longer than within. It asks that one broker
// directly: kgo answers a Metadata request through the client from its
// cache, which would keep a first answer without a controller.
func WaitCluster(t testing.TB, addr string, want int, within time.Duration) int32 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var controller int32
	testutil.WaitFor(t, within, fmt.Sprintf("%s: a cluster of %d brokers with a controller", addr, want), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		r, err := cl.SeedBrokers()[0].RetriableRequest(ctx, kmsg.NewPtrMetadataRequest())
		if err != nil {
			return err
		}
		m := r.(*kmsg.MetadataResponse)
		var ids []int32
		for _, b := range m.Brokers {
			ids = append(ids, b.NodeID)
		}
		if len(ids) != want || !slices.Contains(ids, m.ControllerID) {
			return fmt.Errorf("brokers %v, controller %d", ids, m.ControllerID)
		}
		controller = m.ControllerID
		return nil
	})
	return controller
}

// createTopics creates topics and waits until each of their partitions
// has a leader. It tries again while a new cluster cannot create topics
// yet.
func createTopics(t testing.TB, seeds []string, rf int16, topics []topic) {
	t.Helper()
	if len(topics) == 0 {
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(60 * time.Second)
	for _, tp := range topics {
		for {
			err := createTopic(cl, tp, rf)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cannot create topic %s (%d partitions, replication factor %d): %v", tp.name, tp.partitions, rf, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// createTopic creates tp unless it exists and says whether each of its
// partitions has a leader, asking the first seed broker directly (see
// WaitCluster).
func createTopic(cl *kgo.Client, tp topic, rf int16) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := kadm.NewClient(cl).CreateTopic(ctx, tp.partitions, rf, nil, tp.name)
	if err == nil && r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
		err = r.Err
	}
	if err != nil {
		return err
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(tp.name)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.SeedBrokers()[0].RetriableRequest(ctx, req)
	if err != nil {
		return err
	}
	m := resp.(*kmsg.MetadataResponse)
	if len(m.Topics) != 1 {
		return fmt.Errorf("metadata has %d topics", len(m.Topics))
	}
	d := m.Topics[0]
	if err := kerr.ErrorForCode(d.ErrorCode); err != nil {
		return err
	}
	if int32(len(d.Partitions)) != tp.partitions {
		return fmt.Errorf("metadata has %d partitions", len(d.Partitions))
	}
	for _, p := range d.Partitions {
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return fmt.Errorf("partition %d: %w", p.Partition, err)
		}
		if p.Leader < 0 {
			return fmt.Errorf("partition %d has no leader", p.Partition)
		}
	}
	return nil
}

// dumpLogs logs the tail of each of the broker's process logs if the
// test failed.
func (b *Broker) dumpLogs() {
	if !b.t.Failed() {
		return
	}
	for _, name := range b.logs {
		data, _ := os.ReadFile(name)
		if len(data) > 6000 {
			data = data[len(data)-6000:]
		}
		b.t.Logf("broker %d (%s) log tail:\n%s", b.ID, filepath.Base(name), data)
	}
}
