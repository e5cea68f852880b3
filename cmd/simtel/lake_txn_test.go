package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
)

// lakeTxnEnv is a lake of one run and a real broker to replay it into.
type lakeTxnEnv struct {
	url  string
	addr string
	want []string // the run's samples as "line@key@timestamp", in replay order
	adm  *kadm.Client
	lake *querytest.Lake
}

// addRaw writes n raw records of topic "events" (two source partitions,
// line-protocol values) and returns them as readTopic shows them, in
// backfill order: partition 0 then 1, by offset.
func (e *lakeTxnEnv) addRaw(t *testing.T, n int) []string {
	t.Helper()
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	var want []string
	for p := range int32(2) {
		var recs []*kgo.Record
		for i := range n / 2 {
			ts := t0.Add(time.Duration(i) * time.Millisecond)
			line := fmt.Sprintf("ev,src=p%d n=%di %d", p, i, ts.UnixNano())
			rec := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%7)), Value: []byte(line), Partition: p, Offset: int64(i), Timestamp: ts}
			recs = append(recs, rec)
			s, err := replay.ParseLine(rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, s.String()+"@"+string(rec.Key)+"@"+ts.String())
		}
		for first := 0; first < len(recs); first += 250 {
			last := min(first+250, len(recs)) - 1
			if _, err := e.lake.RawFlush(context.Background(), "events", p, int64(first), int64(last), recs[first:last+1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	return want
}

func newLakeTxnEnv(t *testing.T, samples int, topics ...string) *lakeTxnEnv {
	t.Helper()
	dir, l := emptyTestLake(t)
	ss := querytest.GenSamples(11, []string{"r1"}, samples, 2)
	if err := l.WriteSamples(context.Background(), "telemetry", ss, 250); err != nil {
		t.Fatal(err)
	}
	querytest.SortSamples(ss)
	e := &lakeTxnEnv{url: "file://" + dir, lake: l}
	for _, s := range ss {
		key := s.Tags["run"] + "/" + s.Tags["host"]
		ts := time.Unix(0, s.Time).UTC().Truncate(time.Millisecond)
		s.Partition, s.Offset = 0, 0
		e.want = append(e.want, s.String()+"@"+key+"@"+ts.String())
	}

	// The lake's telemetry topic must exist for replay --brokers (its tail
	// is empty here); one partition per output topic, so the topic's order
	// is the command's order.
	opts := []brokertest.Option{brokertest.SkipShort(), brokertest.Topic("telemetry", 2)}
	for _, topic := range topics {
		opts = append(opts, brokertest.Topic(topic, 1))
	}
	e.addr = brokertest.Start(t, opts...).Addr
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.adm = kadm.NewClient(cl)
	return e
}

// highWatermark is the end of partition 0 of topic (data, aborted data and
// markers included).
func (e *lakeTxnEnv) highWatermark(t *testing.T, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := ends.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s: %v", topic, o.Err)
	}
	return o.Offset
}

// crashAndFinish runs `simtel lake ARGS` kills times, each time SIGKILLed
// once the topic grew by a random 1..step offsets (or left to exit if it
// finishes first), then once more to the end, which must succeed. It
// returns how many runs were killed while producing and the last run's
// stderr.
func (e *lakeTxnEnv) crashAndFinish(t *testing.T, rng *rand.Rand, topic string, kills int, step int64, args ...string) (int, string) {
	return e.crashAndFinishSig(t, rng, topic, kills, step, false, args...)
}

// crashAndFinishSig is crashAndFinish; with term the first run gets
// SIGTERM instead, must exit with an error that reports the records it
// committed, and that number must be more than zero.
func (e *lakeTxnEnv) crashAndFinishSig(t *testing.T, rng *rand.Rand, topic string, kills int, step int64, term bool, args ...string) (int, string) {
	t.Helper()
	killed := 0
	for i := range kills + 1 {
		run := startLake(t, args...)
		if i == kills {
			select {
			case err := <-run.done:
				if err != nil {
					t.Fatalf("final run %v: %v\n%s", args, err, run.stderr.String())
				}
			case <-time.After(5 * time.Minute):
				run.cmd.Process.Kill()
				<-run.done
				t.Fatalf("final run %v did not finish in 5 minutes:\n%s", args, run.stderr.String())
			}
			return killed, run.stderr.String()
		}
		target := e.highWatermark(t, topic) + 1 + rng.Int64N(step)
		var exited error
		finished := false
	wait:
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
			select {
			case exited = <-run.done:
				finished = true
				break wait
			case <-time.After(10 * time.Millisecond):
			}
			if e.highWatermark(t, topic) >= target {
				break
			}
		}
		if finished {
			t.Logf("run %d finished before the kill point (%v): %s", i, exited, lastLine(run.stderr.String()))
			if exited != nil {
				t.Fatalf("run %d: %v\n%s", i, exited, run.stderr.String())
			}
			continue
		}
		if term && i == 0 {
			run.cmd.Process.Signal(syscall.SIGTERM)
			err := <-run.done
			m := regexp.MustCompile(`stopped after (\d+) committed`).FindStringSubmatch(run.stderr.String())
			if err == nil || m == nil || m[1] == "0" {
				t.Fatalf("run %d after SIGTERM: %v, want an error that reports more than 0 committed records:\n%s", i, err, run.stderr.String())
			}
			t.Logf("run %d SIGTERMed at high watermark >= %d: %s", i, target, lastLine(run.stderr.String()))
			// Everything it produced was committed, nothing aborted.
			c, u := len(e.readTopic(t, topic, kgo.ReadCommitted())), len(e.readTopic(t, topic, kgo.ReadUncommitted()))
			if strconv.Itoa(c) != m[1] || u != c {
				t.Fatalf("after SIGTERM: read_committed %d, read_uncommitted %d records; want both %s", c, u, m[1])
			}
			continue
		}
		run.cmd.Process.Kill()
		<-run.done
		killed++
		t.Logf("run %d SIGKILLed at high watermark >= %d", i, target)
	}
	return killed, ""
}

// lakeRun is a `simtel lake` process running in the background.
type lakeRun struct {
	cmd    *exec.Cmd
	stderr testutil.SyncBuffer
	done   chan error // its exit, sent once
}

// startLake starts `simtel lake args...` with a cache directory of its
// own.
func startLake(t *testing.T, args ...string) *lakeRun {
	t.Helper()
	r := &lakeRun{cmd: exec.Command(testutil.Binary(t), append([]string{"lake"}, args...)...), done: make(chan error, 1)}
	r.cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir())
	r.cmd.Stderr = &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	return r
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// readTopic reads partition 0 of topic from the start with the given
// isolation level until a poll of quiet brings nothing more.
func (e *lakeTxnEnv) readTopic(t *testing.T, topic string, iso kgo.IsolationLevel) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	end := e.highWatermark(t, topic)
	var out []string
	next := int64(0)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("fetch %s: %v", topic, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			n++
			next = r.Offset + 1
			s, err := replay.ParseLine(r.Value)
			if err != nil {
				t.Fatalf("%s offset %d: %v", topic, r.Offset, err)
			}
			out = append(out, s.String()+"@"+string(r.Key)+"@"+r.Timestamp.UTC().String())
		})
		// Done when a poll brought nothing and the last record is near the
		// end (only markers may follow), or the deadline passed.
		if n == 0 && (next >= end-1 || time.Now().After(deadline)) {
			return out
		}
	}
}

// checkExactlyOnce compares what a read_committed consumer got with the
// run's samples: each exactly once, in replay order.
func checkExactlyOnce(got, want []string) error {
	if len(got) != len(want) {
		seen := map[string]int{}
		dups := 0
		for _, g := range got {
			if seen[g]++; seen[g] == 2 {
				dups++
			}
		}
		return fmt.Errorf("topic holds %d records, want %d (%d of them appear more than once)", len(got), len(want), dups)
	}
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("record %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
	return nil
}

// A backfill and a replay --to-topic SIGKILLed at random points, rerun to
// completion: a read_committed consumer sees every sample exactly once in
// replay order; a read_uncommitted one may also see the aborted partial
// output of the killed runs.
func TestLakeTxnCrashResume(t *testing.T) {
	const n = 3000
	e := newLakeTxnEnv(t, n, "out-backfill", "out-replay", "out-raw")
	wantRaw := e.addRaw(t, n)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, c := range []struct {
		name, topic string
		args        []string
		want        []string
	}{
		{"backfill", "out-backfill", []string{"backfill", "--run", "r1", "--to-topic", "out-backfill", "--brokers", e.addr, "--lake", e.url, "--commit-records", "100", "--log-level", "warn"}, e.want},
		{"replay", "out-replay", []string{"replay", "--run", "r1", "--to-topic", "out-replay", "--brokers", e.addr, "--lake", e.url, "--commit-records", "100", "--log-level", "warn"}, e.want},
		{"raw", "out-raw", []string{"backfill", "--source-topic", "events", "--to-topic", "out-raw", "--brokers", e.addr, "--lake", e.url, "--commit-records", "100", "--log-level", "warn"}, wantRaw},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The backfill's first run is stopped with SIGTERM: it commits
			// what it produced. The others are SIGKILLed.
			killed, stderr := e.crashAndFinishSig(t, rng, c.topic, 4, 500, c.name == "backfill", c.args...)
			committed := e.readTopic(t, c.topic, kgo.ReadCommitted())
			if err := checkExactlyOnce(committed, c.want); err != nil {
				t.Fatalf("read_committed after %d kills: %v", killed, err)
			}
			uncommitted := e.readTopic(t, c.topic, kgo.ReadUncommitted())
			t.Logf("%s: %d runs killed while producing; read_committed: %d records (exactly once, in order); read_uncommitted: %d (%d of aborted transactions); last run: %s",
				c.name, killed, len(committed), len(uncommitted), len(uncommitted)-len(committed), lastLine(stderr))
			// Running the finished job again adds nothing.
			out, errOut, err := simtelLake(t, c.args...)
			if err != nil || !strings.Contains(errOut, " 0 ") {
				t.Fatalf("rerun of a finished job: %v %s %s", err, out, errOut)
			}
			if err := checkExactlyOnce(e.readTopic(t, c.topic, kgo.ReadCommitted()), c.want); err != nil {
				t.Fatalf("after a rerun of the finished job: %v", err)
			}
		})
	}

	// The same transactional id with another selection is refused.
	_, errOut, err := simtelLake(t, "backfill", "--run", "r1", "--measurement", "cpu", "--to-topic", "out-backfill", "--brokers", e.addr, "--lake", e.url,
		"--transactional-id", "simtel-backfill-r1-out-backfill")
	if err == nil || !strings.Contains(errOut, "another selection") {
		t.Errorf("reused transactional id: %v %s", err, errOut)
	}
}

// With --no-transactions the same crashes leave duplicates that the check
// finds: the check can fail.
func TestLakeTxnCrashWithoutTransactionsDuplicates(t *testing.T) {
	const n = 2000
	e := newLakeTxnEnv(t, n, "out")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	killed, _ := e.crashAndFinish(t, rng, "out", 2, 500, "backfill", "--run", "r1", "--to-topic", "out", "--brokers", e.addr, "--lake", e.url, "--no-transactions", "--log-level", "warn")
	got := e.readTopic(t, "out", kgo.ReadCommitted())
	err := checkExactlyOnce(got, e.want)
	t.Logf("without transactions, %d runs killed: %v", killed, err)
	if killed > 0 && err == nil {
		t.Fatalf("%d runs were killed while producing without transactions, yet the topic holds each sample exactly once", killed)
	}
}

// A cluster-mode broker coordinates transactions too (replicated
// __transaction_state): the backfill uses them there as on a single node,
// and --no-transactions still works.
func TestLakeTxnClusterBroker(t *testing.T) {
	_, url, ss := newQueryTestLake(t)
	// A single broker in cluster mode.
	addr := brokertest.StartCluster(t, 1, brokertest.Topic("restored", 1), brokertest.Topic("restored-plain", 1))[0].Addr
	n := 0
	for _, s := range ss {
		if s.Tags["run"] == "r1" {
			n++
		}
	}
	_, errOut, err := simtelLake(t, "backfill", "--run", "r1", "--to-topic", "restored", "--brokers", addr, "--lake", url)
	if err != nil || !strings.Contains(errOut, "backfilled "+lakeItoa(n)+" records") {
		t.Fatalf("transactional backfill into a cluster broker: %v %s", err, errOut)
	}
	t.Logf("transactional backfill: %s", lastLine(errOut))
	_, errOut, err = simtelLake(t, "backfill", "--run", "r1", "--to-topic", "restored-plain", "--brokers", addr, "--lake", url, "--no-transactions")
	if err != nil || !strings.Contains(errOut, "backfilled "+lakeItoa(n)+" records") {
		t.Fatalf("backfill --no-transactions: %v %s", err, errOut)
	}
}

// A run that is paused (SIGSTOP) in the middle of a transaction is a
// zombie: a rerun with the same transactional id fences it and finishes
// the job; the zombie, resumed, fails instead of adding output.
func TestLakeTxnZombieFenced(t *testing.T) {
	e := newLakeTxnEnv(t, 3000, "out")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	args := []string{"backfill", "--run", "r1", "--to-topic", "out", "--brokers", e.addr, "--lake", e.url, "--commit-records", "100", "--log-level", "warn"}
	zombie := startLake(t, args...)
	defer func() {
		zombie.cmd.Process.Kill()
		<-zombie.done
	}()
	target := 1 + rng.Int64N(1000)
	for e.highWatermark(t, "out") < target {
		select {
		case err := <-zombie.done:
			zombie.done <- err
			t.Fatalf("the run finished before it could be paused (%v): %s", err, zombie.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	testutil.Pause(t, zombie.cmd.Process)
	t.Logf("paused the first run at high watermark >= %d", target)

	_, errOut, err := simtelLake(t, args...)
	if err != nil {
		t.Fatalf("rerun while the first run is paused: %v %s", err, errOut)
	}
	t.Logf("rerun: %s", lastLine(errOut))
	if err := zombie.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-zombie.done:
		zombie.done <- err
		if err == nil || !strings.Contains(zombie.stderr.String(), "took over this job") {
			t.Fatalf("the fenced run: %v, want an error that says another run took over: %s", err, zombie.stderr.String())
		}
		t.Logf("the fenced run: %v: %s", err, lastLine(zombie.stderr.String()))
	case <-time.After(3 * time.Minute):
		t.Fatalf("the fenced run did not exit within 3 minutes after SIGCONT: %s", zombie.stderr.String())
	}
	if err := checkExactlyOnce(e.readTopic(t, "out", kgo.ReadCommitted()), e.want); err != nil {
		t.Fatalf("read_committed: %v", err)
	}
}
