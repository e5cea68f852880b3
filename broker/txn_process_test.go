package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// The worker of TestTxnExactlyOnceUnderKills: a transactional
// read-process-write loop (franz-go's GroupTransactSession) copying topic
// txn-in to txn-out, run as a separate process (this test binary
// re-executed) so the test can SIGKILL it at any point.
const txnWorkerEnv = "SIMTEL_TXN_WORKER_BROKER"

func TestTxnWorkerProcess(t *testing.T) {
	addr := os.Getenv(txnWorkerEnv)
	if addr == "" {
		t.Skip("helper process of TestTxnExactlyOnceUnderKills")
	}
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(strings.Split(addr, ",")...), // one broker, or a cluster's
		kgo.TransactionalID("copier"),
		kgo.TransactionTimeout(time.Minute),
		kgo.ConsumerGroup("copier"),
		kgo.InstanceID("copier-1"), // a restarted worker takes the old one's place at once
		kgo.SessionTimeout(10*time.Second),
		kgo.ConsumeTopics("txn-in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequireStableFetchOffsets(),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: cannot start:", err)
		os.Exit(2)
	}
	defer sess.Close()
	ctx := context.Background()
	for {
		fs := sess.PollRecords(ctx, 20)
		if err := fs.Err0(); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "worker: poll:", err)
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			fmt.Fprintln(os.Stderr, "worker: begin:", err)
			os.Exit(3)
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Topic: "txn-out", Key: r.Key, Value: r.Value}, nil)
		})
		// "Processing" time, so that kills land inside transactions.
		time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			// The broker restarted under us, or we were fenced: exit and
			// let the test start a fresh worker, as a supervisor would.
			fmt.Fprintln(os.Stderr, "worker: end:", err)
			os.Exit(4)
		}
		fmt.Fprintln(os.Stderr, "worker: transaction of", fs.NumRecords(), "records, committed:", committed)
	}
}

func startWorker(t *testing.T, addr, logDir string, n int) *testutil.Proc {
	t.Helper()
	logf, err := os.Create(fmt.Sprintf("%s/worker-%d.log", logDir, n))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTxnWorkerProcess$", "-test.timeout=0")
	cmd.Env = append(os.Environ(), txnWorkerEnv+"="+addr)
	return testutil.StartCmd(t, cmd, logf)
}

// supervisor keeps one worker process running against the brokers at
// addr (comma-separated), as a service manager would: a new one replaces
// each that exits, with its log in logDir.
type supervisor struct {
	t            *testing.T
	addr, logDir string
	worker       *testutil.Proc
	started      int // worker processes started
}

func startSupervisor(t *testing.T, addr, logDir string) *supervisor {
	s := &supervisor{t: t, addr: addr, logDir: logDir}
	s.worker = startWorker(t, addr, logDir, 0)
	s.started = 1
	return s
}

// replaceExited starts a new worker if the last one has exited.
func (s *supervisor) replaceExited() {
	if s.worker.Exited() {
		s.worker = startWorker(s.t, s.addr, s.logDir, s.started)
		s.started++
	}
}

// runUntil keeps a worker running until done says the copy is complete,
// then kills it; the test fails if ctx ends first.
func (s *supervisor) runUntil(ctx context.Context, done func() bool) {
	s.t.Helper()
	for !done() {
		if ctx.Err() != nil {
			s.t.Fatalf("the worker did not finish copying; see %s", s.logDir)
		}
		s.replaceExited()
		time.Sleep(200 * time.Millisecond)
	}
	s.worker.Kill()
}

// keptLogDir is where a test writes the logs of its brokers and workers:
// $SIMTEL_TEST_LOG_DIR, which keeps them after the test, or a temporary
// directory.
func keptLogDir(t *testing.T) string {
	if d := os.Getenv("SIMTEL_TEST_LOG_DIR"); d != "" {
		return d
	}
	return t.TempDir()
}

// TestTxnExactlyOnceUnderKills copies an input topic to an output topic
// with a transactional worker process that is SIGKILLed at random points
// and restarted, and once SIGKILLs and restarts the broker itself while
// the worker runs. Afterwards the output read with read_committed holds
// every input record exactly once, and read_uncommitted also sees the
// records of the transactions the kills aborted.
func TestTxnExactlyOnceUnderKills(t *testing.T) {
	const records = 3000
	const kills = 6
	logDir := keptLogDir(t)
	// At the info level: the log tells what the broker did around each kill.
	br := brokertest.Start(t, brokertest.SkipShort(), brokertest.LogDir(logDir), brokertest.Args("--log-level", "info"),
		brokertest.GroupDelay(0), brokertest.Topic("txn-in", 3), brokertest.Topic("txn-out", 3))
	addr := br.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	admCl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	progress := writeCopyInput(t, ctx, []string{addr}, adm, records)
	done := func() bool { return progress() == records }

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	sup := startSupervisor(t, addr, logDir)
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(300+rng.IntN(2500)) * time.Millisecond)
		if k == kills/2 {
			// The broker dies while the worker is mid-stream (most likely
			// inside a transaction); the worker's next call fails and it
			// is restarted like after its own crash.
			t.Logf("kill %d: SIGKILL of the broker", k)
			br.Kill()
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
			br.Restart()
		} else {
			t.Logf("kill %d: SIGKILL of the worker", k)
			sup.worker.Kill()
		}
		sup.replaceExited()
	}
	sup.runUntil(ctx, done)
	t.Logf("%d worker processes, %d kills (one of the broker)", sup.started, kills)

	committed, n := readOutput(t, ctx, []string{addr}, "txn-out", true)
	checkExactlyOnce(t, committed, n, records, logDir)
	_, all := readOutput(t, ctx, []string{addr}, "txn-out", false)
	t.Logf("read_uncommitted: %d records (%d from aborted transactions)", all, all-records)
	if all < records {
		t.Fatalf("read_uncommitted sees %d records, fewer than the %d committed", all, records)
	}
	if err := br.Stop(30 * time.Second); err != nil {
		t.Errorf("broker did not stop cleanly: %v", err)
	}
}

// writeCopyInput writes records numbered records to txn-in, the input of
// the copying worker, and returns how far the worker has got: how many of
// them its group (copier) has committed, -1 while that cannot be read.
// Committed offsets never pass the input's end, so the count reaches
// records only once every input partition is committed to its end.
func writeCopyInput(t *testing.T, ctx context.Context, seeds []string, adm *kadm.Client, records int) (progress func() int64) {
	t.Helper()
	produceNumbered(t, ctx, seeds, "txn-in", records)
	inEnds, err := adm.ListEndOffsets(ctx, "txn-in")
	if err != nil {
		t.Fatal(err)
	}
	return func() int64 {
		offs, err := adm.FetchOffsets(ctx, "copier")
		if err != nil {
			return -1
		}
		var n int64
		inEnds.Each(func(e kadm.ListedOffset) {
			if o, ok := offs.Lookup("txn-in", e.Partition); ok && o.At > 0 {
				n += o.At
			}
		})
		return n
	}
}

// produceNumbered writes records "0" to "n-1" (key and value) to topic.
func produceNumbered(t *testing.T, ctx context.Context, seeds []string, topic string, n int) {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < n; i++ {
		v := strconv.Itoa(i)
		prod.Produce(ctx, &kgo.Record{Key: []byte(v), Value: []byte(v)}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("input record %s: %v", v, err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// readOutput reads topic from the start to its current end with
// read_committed (committed) or read_uncommitted and counts each value
// and all data records.
func readOutput(t *testing.T, ctx context.Context, seeds []string, topic string, committed bool) (map[string]int, int) {
	t.Helper()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(admCl).ListEndOffsets(ctx, topic)
	admCl.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) { want[e.Partition] = e.Offset })
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	total := 0
	reached := map[int32]bool{}
	for p, end := range want {
		if end == 0 {
			reached[p] = true
		}
	}
	for len(reached) < len(want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s-%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= want[r.Partition] {
				reached[r.Partition] = true
			}
			if !r.Attrs.IsControl() {
				seen[string(r.Value)]++
				total++
			}
		})
	}
	return seen, total
}

// checkExactlyOnce fails the test unless seen (total records in all)
// holds each of "0" to "records-1" exactly once.
func checkExactlyOnce(t *testing.T, seen map[string]int, total, records int, logDir string) {
	t.Helper()
	var missing, dup []string
	for i := 0; i < records; i++ {
		switch c := seen[strconv.Itoa(i)]; {
		case c == 0:
			missing = append(missing, strconv.Itoa(i))
		case c > 1:
			dup = append(dup, fmt.Sprintf("%d×%d", i, c))
		}
	}
	t.Logf("read_committed: %d records, %d distinct, %d missing, %d duplicated", total, len(seen), len(missing), len(dup))
	if len(missing) > 0 || len(dup) > 0 || total != records {
		t.Fatalf("not exactly once: missing %s; duplicated %s (worker logs in %s)", head(missing), head(dup), logDir)
	}
}

func head(s []string) string {
	if len(s) > 10 {
		return strings.Join(s[:10], ",") + ",…"
	}
	return strings.Join(s, ",")
}

// TestTxnBrokerRestartMidTransaction SIGKILLs the broker process while a
// transaction is open (records acknowledged, not yet committed) and
// restarts it: the same producer then commits and the records become
// visible to read_committed; a second open transaction, interrupted the
// same way, is aborted by a new producer with the same transactional id
// and stays invisible to read_committed while read_uncommitted sees it.
func TestTxnBrokerRestartMidTransaction(t *testing.T) {
	// brokertest skips it with -short: it starts a broker process.
	br := brokertest.Start(t, brokertest.SkipShort(), brokertest.Topic("restart-tx", 2))
	addr := br.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	newProducer := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("restart-tx"),
			kgo.TransactionalID("restart-writer"), kgo.TransactionTimeout(time.Minute), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	produce := func(cl *kgo.Client, prefix string, n int) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("%s-%d", prefix, i))).FirstErr(); err != nil {
				t.Fatalf("produce %s-%d: %v", prefix, i, err)
			}
		}
	}

	p1 := newProducer()
	defer p1.Close()
	produce(p1, "kept", 10)
	br.Kill()
	br.Restart()
	if err := p1.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit after the broker restart: %v", err)
	}

	produce(p1, "lost", 10)
	br.Kill()
	br.Restart()
	p2 := newProducer() // fences p1 and aborts its open transaction
	defer p2.Close()
	if err := p2.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p2.ProduceSync(ctx, kgo.StringRecord("after")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := p2.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	committed := consumeAll(t, ctx, addr, "restart-tx", true, 11)
	uncommitted := consumeAll(t, ctx, addr, "restart-tx", false, 21)
	count := func(vals []string, prefix string) int {
		n := 0
		for _, v := range vals {
			if strings.HasPrefix(v, prefix) {
				n++
			}
		}
		return n
	}
	if len(committed) != 11 || count(committed, "kept-") != 10 || count(committed, "after") != 1 {
		t.Fatalf("read_committed got %v, want the 10 committed records and 'after'", committed)
	}
	if len(uncommitted) != 21 || count(uncommitted, "lost-") != 10 {
		t.Fatalf("read_uncommitted got %d records %v, want 21 with the 10 aborted ones", len(uncommitted), uncommitted)
	}
	if err := br.Stop(30 * time.Second); err != nil {
		t.Errorf("broker did not stop cleanly: %v", err)
	}
}
