package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/scheduler"
	"github.com/simtel/simtel/sink"
)

// env is a broker plus a lake for one test.
type env struct {
	t      *testing.T
	dir    string
	broker string
	lake   string
	s3     *testutil.S3Server
	// produced maps (partition, offset) to the produced sample.
	produced map[po]sample
}

type po struct {
	p int32
	o int64
}

type sample struct {
	ns    int64
	value float64
	bad   bool // malformed: must land in the dead letters
}

func newEnv(t *testing.T, s3 bool, partitions int32) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), produced: map[po]sample{}}
	if s3 {
		e.s3 = testutil.StartS3(t)
		e.s3.SetEnv(t) // children inherit it
		e.lake = e.s3.URL
	} else {
		e.lake = "file://" + filepath.Join(e.dir, "lake")
	}
	e.broker = brokertest.Start(t, brokertest.SkipShort(),
		brokertest.Topic("telemetry", partitions), brokertest.Topic(scheduler.JobsTopic, 1)).Addr
	return e
}

func (e *env) client(opts ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.broker), kgo.DefaultProduceTopic("telemetry"), kgo.ProducerLinger(5 * time.Millisecond)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

// produce writes n samples over runs, hosts and measurements; every
// badEvery-th one (if > 0) is malformed. It records where each landed.
func (e *env) produce(n, badEvery int, runs []string, seed uint64) {
	e.t.Helper()
	cl := e.client()
	defer cl.Close()
	rng := rand.New(rand.NewPCG(seed, 7))
	meas := []string{"cpu", "mem", "reward"}
	t0 := time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC).UnixNano() // crosses midnight
	const batch = 5000
	for lo := 0; lo < n; lo += batch {
		var recs []*kgo.Record
		var samples []sample
		for i := lo; i < min(lo+batch, n); i++ {
			run := runs[i%len(runs)]
			host := fmt.Sprintf("n%d", rng.IntN(8))
			s := sample{ns: t0 + int64(i)*int64(time.Millisecond) + int64(rng.IntN(1000)), value: math.Round(rng.Float64()*1e6) / 1e3}
			var v string
			if badEvery > 0 && i%badEvery == badEvery-1 {
				s.bad = true
				v = []string{"not line protocol", "cpu,host=a value=", "cpu value=1 12x", `cpu,host=x s="open`}[i/badEvery%4]
			} else {
				v = fmt.Sprintf("%s,host=%s,job=42,run=%s,step=0 value=%v,count=%di,ok=t %d", meas[i%len(meas)], host, run, s.value, i, s.ns)
			}
			recs = append(recs, &kgo.Record{Key: []byte(run + "/" + host), Value: []byte(v), Timestamp: time.Unix(0, s.ns)})
			samples = append(samples, s)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res := cl.ProduceSync(ctx, recs...)
		cancel()
		if err := res.FirstErr(); err != nil {
			e.t.Fatalf("produce: %v", err)
		}
		bySample := make(map[*kgo.Record]sample, len(recs))
		for i, r := range recs {
			bySample[r] = samples[i]
		}
		for _, r := range res {
			e.produced[po{r.Record.Partition, r.Record.Offset}] = bySample[r.Record]
		}
	}
}

func (e *env) startSink(extra ...string) *testutil.Proc {
	e.t.Helper()
	// Compaction off unless a test turns it on (a later flag wins): these
	// checks list the store, which holds replaced objects for a while.
	args := []string{"sink", "--brokers", e.broker, "--topics", "telemetry", "--lake", e.lake, "--log-level", "info", "--compact-interval", "0"}
	if e.s3 != nil {
		args = append(args, "--s3-endpoint", e.s3.Endpoint)
	}
	return testutil.Start(e.t, e.dir, append(args, extra...)...)
}

func (e *env) store() store.Store {
	e.t.Helper()
	opts := store.Options{}
	if e.s3 != nil {
		opts.S3Endpoint = e.s3.Endpoint
	}
	st, err := store.Open(context.Background(), e.lake, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// committedRecords sums the records of the catalog's flush entries.
func (e *env) committedRecords(st store.Store) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	objs, err := st.List(ctx, "_catalog/flush/")
	if err != nil {
		return -1
	}
	var n int64
	for _, o := range objs {
		rc, err := st.Get(ctx, o.Key)
		if err != nil {
			return -1
		}
		var en catalog.Entry
		err = json.NewDecoder(rc).Decode(&en)
		rc.Close()
		if err != nil {
			return -1
		}
		n += en.Records
	}
	return n
}

// waitCommitted waits until the catalog holds every produced record.
func (e *env) waitCommitted(st store.Store, d time.Duration, procs ...*testutil.Proc) {
	e.t.Helper()
	defer e.logTailOnFailure(procs...)
	want := int64(len(e.produced))
	testutil.WaitFor(e.t, d, fmt.Sprintf("catalog holds %d records", want), func() error {
		if got := e.committedRecords(st); got != want {
			return fmt.Errorf("it holds %d", got)
		}
		return nil
	})
}

// logTailOnFailure logs the tail of each process's log if the test has
// failed (deferred, it runs after a wait's Fatal too).
func (e *env) logTailOnFailure(procs ...*testutil.Proc) {
	if !e.t.Failed() {
		return
	}
	for _, p := range procs {
		log, _ := os.ReadFile(p.Log)
		e.t.Logf("sink log %s:\n%s", p.Log, tail(string(log), 60))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// verify reads every object of the lake and checks that each produced
// record is in exactly one row (telemetry or dead letter, as expected)
// with its exact time and value, and that nothing else is there.
func (e *env) verify(st store.Store) {
	e.t.Helper()
	ctx := context.Background()
	seen := map[po]string{}
	var telemetryRows, deadRows int
	for _, prefix := range []string{"telemetry/", "deadletter/"} {
		objs, err := st.List(ctx, prefix)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, o := range objs {
			for _, row := range e.objectRows(st, o.Key) {
				k, s := e.see(seen, o.Key, row)
				if prefix == "deadletter/" {
					deadRows++
					if !s.bad {
						e.t.Fatalf("good record %d/%d in dead letters %s: %v", k.p, k.o, o.Key, row["reason"])
					}
					continue
				}
				telemetryRows++
				if s.bad {
					e.t.Fatalf("malformed record %d/%d in %s", k.p, k.o, o.Key)
				}
				if row["_time_ns"].(int64) != s.ns || row["time"].(int64) != s.ns/1000 || row["value"].(float64) != s.value {
					e.t.Fatalf("record %d/%d in %s: row %v, want time %d value %v", k.p, k.o, o.Key, row, s.ns, s.value)
				}
				if want := lake.Date(time.Unix(0, s.ns)); !strings.Contains(o.Key, "/date="+want+"/") {
					e.t.Fatalf("record %d/%d at %s is in %s", k.p, k.o, want, o.Key)
				}
			}
		}
	}
	if len(seen) != len(e.produced) {
		e.t.Fatalf("lake holds %d records, want %d", len(seen), len(e.produced))
	}
	e.t.Logf("lake holds all %d records exactly once: %d telemetry rows, %d dead letters", len(seen), telemetryRows, deadRows)
	e.verifyDuckDB(st)
}

// verifyDuckDB counts the lake's rows the way users read them: through the
// catalog (not a listing) and DuckDB, as simtel lake query does. Every
// produced record must be one row, telemetry or dead letter.
func (e *env) verifyDuckDB(st store.Store) {
	e.t.Helper()
	ctx := context.Background()
	cache := store.NewCache(st, e.t.TempDir(), 1<<30)
	eng, err := query.Open(ctx, st, catalog.New(st), cache, query.Filter{})
	if err != nil {
		e.t.Fatalf("open the lake for DuckDB: %v", err)
	}
	defer eng.Close()
	// Every telemetry table and the dead letters (absent when there are none).
	var parts []string
	for _, v := range eng.Views() {
		if v.Kind == lake.KindTelemetry || v.Kind == lake.KindDeadLetter {
			parts = append(parts, fmt.Sprintf("SELECT _partition, _offset FROM %q", v.Name))
		}
	}
	if len(parts) == 0 {
		e.t.Fatal("DuckDB: the catalog lists no telemetry or dead-letter objects")
	}
	q := "SELECT count(*), count(DISTINCT (_partition, _offset)) FROM (" + strings.Join(parts, " UNION ALL ") + ")"
	var rows, distinct int
	if err := eng.DB().QueryRowContext(ctx, q).Scan(&rows, &distinct); err != nil {
		e.t.Fatalf("DuckDB count: %v", eng.Explain(err))
	}
	if rows != len(e.produced) || distinct != len(e.produced) {
		e.t.Fatalf("DuckDB over the catalog counts %d rows (%d distinct records), want exactly %d", rows, distinct, len(e.produced))
	}
	e.t.Logf("DuckDB over the catalog: %d rows, %d distinct (partition, offset), as produced", rows, distinct)
}

// objectRows reads object key of st back, one map per row by column name.
func (e *env) objectRows(st store.Store, key string) []map[string]any {
	e.t.Helper()
	rc, err := st.Get(context.Background(), key)
	if err != nil {
		e.t.Fatalf("cannot read %s: %v", key, err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	_, rows := sink.ReadObject(e.t, data)
	return rows
}

// see notes that row of object key holds its record, which must have been
// produced and be in no other object; it returns the record's position
// and what was produced there.
func (e *env) see(seen map[po]string, key string, row map[string]any) (po, sample) {
	e.t.Helper()
	k := po{row["_partition"].(int32), row["_offset"].(int64)}
	if prev, dup := seen[k]; dup {
		e.t.Fatalf("record %d/%d is in %s and in %s", k.p, k.o, prev, key)
	}
	seen[k] = key
	s, ok := e.produced[k]
	if !ok {
		e.t.Fatalf("%s has record %d/%d that was never produced", key, k.p, k.o)
	}
	return k, s
}

// waitLog waits up to 30 s until the process has logged substr.
func waitLog(t *testing.T, p *testutil.Proc, substr string) {
	t.Helper()
	waitLogFor(t, p, substr, 30*time.Second)
}

func sinkLog(t *testing.T, procs ...*testutil.Proc) string {
	t.Helper()
	var b strings.Builder
	for _, p := range procs {
		data, _ := os.ReadFile(p.Log)
		b.Write(data)
	}
	return b.String()
}

func TestSinkExactlyOnceFile(t *testing.T) { testExactlyOnce(t, false) }
func TestSinkExactlyOnceS3(t *testing.T)   { testExactlyOnce(t, true) }

func testExactlyOnce(t *testing.T, s3 bool) {
	e := newEnv(t, s3, 4)
	e.produce(200_000, 10_000, []string{"r1", "r2", "r3"}, 1)
	p := e.startSink("--flush-rows", "30000", "--flush-age", "2s")
	st := e.store()
	e.waitCommitted(st, 90*time.Second, p)
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v\n%s", err, tail(sinkLog(t, p), 30))
	}
	e.verify(st)
}

// TestSinkCrashes SIGKILLs the sink at random moments (flushes are small
// and frequent, so some kills land mid-upload) while samples keep coming.
func TestSinkCrashes(t *testing.T) {
	e := newEnv(t, false, 4)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	args := []string{"--flush-rows", "3000", "--flush-age", "500ms", "--upload-delay", "50ms"}
	p := e.startSink(args...)
	var procs []*testutil.Proc
	procs = append(procs, p)
	for round := range 6 {
		e.produce(30_000, 7_001, []string{"a", "b"}, uint64(round+10))
		waitLog(t, p, "flushed")
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		p.Kill()
		p = e.startSink(args...)
		procs = append(procs, p)
	}
	st := e.store()
	e.waitCommitted(st, 90*time.Second, p)
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v", err)
	}
	log := sinkLog(t, procs...)
	redone := strings.Count(log, "redoing an unfinished flush") + strings.Count(log, "clearing a stale flush intent")
	t.Logf("%d kills, %d flushes redone after a kill", len(procs)-1, redone)
	if redone == 0 {
		t.Fatalf("no kill landed mid-flush; the test did not exercise the redo path")
	}
	e.verify(st)
}

// TestSinkStoreOutage stops the S3 server for several seconds mid-run.
func TestSinkStoreOutage(t *testing.T) {
	e := newEnv(t, true, 4)
	p := e.startSink("--flush-rows", "5000", "--flush-age", "500ms")
	e.produce(40_000, 9_999, []string{"x"}, 21)
	waitLog(t, p, "flushed") // the outage hits flushes, not the group join
	e.s3.Stop()
	e.produce(40_000, 9_999, []string{"x"}, 22)
	time.Sleep(6 * time.Second)
	e.s3.Start()
	e.produce(20_000, 0, []string{"y"}, 23)
	st := e.store()
	e.waitCommitted(st, 120*time.Second, p)
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v", err)
	}
	log := sinkLog(t, p)
	if !strings.Contains(log, "store error; retrying") || !strings.Contains(log, "store is back") {
		t.Fatalf("sink log lacks the retry messages:\n%s", tail(log, 40))
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "store error; retrying") || strings.Contains(l, "store is back") {
			t.Logf("sink log: %s", l)
			if strings.Contains(l, "store is back") {
				break
			}
		}
	}
	e.verify(st)
}

// TestSinkTwoInGroup runs two sinks in one group; one leaves midway.
func TestSinkTwoInGroup(t *testing.T) {
	e := newEnv(t, false, 4)
	args := []string{"--flush-rows", "5000", "--flush-age", "1s"}
	a := e.startSink(args...)
	b := e.startSink(args...)
	waitLog(t, a, "partition assigned")
	waitLog(t, b, "partition assigned") // the group has settled with both
	e.produce(60_000, 5_000, []string{"g"}, 31)
	time.Sleep(2 * time.Second)
	e.produce(60_000, 5_000, []string{"h"}, 32)
	if err := b.Stop(30 * time.Second); err != nil {
		t.Fatalf("second sink stop: %v", err)
	}
	e.produce(30_000, 0, []string{"i"}, 33)
	st := e.store()
	e.waitCommitted(st, 90*time.Second, a, b)
	if err := a.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v", err)
	}
	for i, p := range []*testutil.Proc{a, b} {
		if log := sinkLog(t, p); !strings.Contains(log, "partition assigned") || !strings.Contains(log, "flushed") {
			t.Fatalf("sink %d got no partitions or flushed nothing:\n%s\nother sinks:\n%s", i, tail(log, 40), tail(sinkLog(t, a, b), 60))
		}
	}
	e.verify(st)
}

// TestSinkRunCompletion: a completed event on the jobs topic flushes the
// run's rows long before FlushAge and marks the run in the catalog.
func TestSinkRunCompletion(t *testing.T) {
	e := newEnv(t, false, 4)
	httpAddr := testutil.FreePort(t)
	p := e.startSink("--flush-age", "10m", "--topics", "telemetry", "--http-listen", httpAddr)
	waitLog(t, p, "partition assigned")
	time.Sleep(time.Second) // the jobs reader is at the end
	e.produce(5_000, 0, []string{"done-run"}, 41)
	st := e.store()
	cl := e.client()
	defer cl.Close()
	code := 0
	ev, _ := json.Marshal(scheduler.Event{Type: scheduler.EventCompleted, Run: "done-run", Time: time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), ExitCode: &code})
	start := time.Now()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: scheduler.JobsTopic, Key: []byte("done-run"), Value: ev}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(st, 30*time.Second, p)
	cat := catalog.New(st)
	defer e.logTailOnFailure(p)
	testutil.WaitFor(t, 20*time.Second, "run marked after its completion event", func() error {
		runs, err := cat.Runs(context.Background())
		if err != nil {
			return err
		}
		rs, ok := runs["done-run"]
		if !ok {
			return errors.New("no run done-run in the catalog")
		}
		if rs.State != scheduler.EventCompleted || !rs.Ended.Equal(time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)) {
			t.Fatalf("run state %+v", rs)
		}
		return nil
	})
	t.Logf("run flushed and marked %v after its completion event", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(sinkLog(t, p), "reason=run") {
		t.Fatalf("no flush with reason run in the log")
	}
	e.verify(st)
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`simtel_sink_records_consumed_total{topic="telemetry"} 5000`,
		`simtel_sink_rows_written_total{kind="telemetry"} 5000`,
		`simtel_sink_flushes_total{reason="run"}`,
		`simtel_sink_objects_written_total{kind="telemetry"}`,
		"simtel_sink_bytes_written_total", "simtel_sink_flush_duration_seconds_bucket",
		"simtel_sink_store_errors_total 0", "simtel_sink_buffered_rows 0",
		`simtel_sink_lag_records{partition="0",topic="telemetry"} 0`,
		"simtel_sink_last_flush_timestamp_seconds",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestRunInProcess runs the connector in the test process (so `go test
// -race` checks its goroutines and locks) and checks Run returns after a
// clean shutdown flush.
func TestRunInProcess(t *testing.T) {
	e := newEnv(t, false, 4)
	e.produce(20_000, 4_000, []string{"p"}, 51)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- sink.Run(ctx, sink.Config{
			Brokers: []string{e.broker}, Topics: []string{"telemetry"}, Lake: e.lake,
			FlushRows: 3000, FlushAge: time.Minute, HTTPListen: testutil.FreePort(t),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
	}()
	st := e.store()
	// 3000 per partition; the rest waits for the shutdown flush.
	testutil.WaitFor(t, 60*time.Second, "catalog holds 12000 records", func() error {
		if got := e.committedRecords(st); got < 12_000 {
			return fmt.Errorf("it holds %d", got)
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Run did not return 40s after cancel")
	}
	if got := e.committedRecords(st); got != int64(len(e.produced)) {
		t.Fatalf("after shutdown the catalog holds %d records, want %d", got, len(e.produced))
	}
	e.verify(st)
}
