package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
)

// simtelLake runs the real binary's `simtel lake ARGS` and returns stdout,
// stderr and the error.
func simtelLake(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t), append([]string{"lake"}, args...)...)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil && strings.Contains(errOut.String(), `unknown command "lake"`) {
		t.Fatal("the simtel binary has no lake command: register newLakeCmd(g) in cmd/simtel/root.go")
	}
	return out.String(), errOut.String(), err
}

func newQueryTestLake(t *testing.T) (*querytest.Lake, string, []replay.Sample) {
	t.Helper()
	dir, l := emptyTestLake(t)
	ss := querytest.GenSamples(5, []string{"r1", "r2"}, 150, 2)
	if err := l.WriteSamples(context.Background(), "telemetry", ss, 20); err != nil {
		t.Fatal(err)
	}
	return l, "file://" + dir, ss
}

func TestLakeQueryCLI(t *testing.T) {
	l, url, ss := newQueryTestLake(t)
	var n int
	var sum float64
	for _, s := range ss {
		if s.Measurement == "cpu" && s.Tags["run"] == "r1" {
			n++
			sum += s.Fields["usage"].(float64)
		}
	}
	const q = "SELECT count(*) AS n, sum(usage) AS s, count(DISTINCT run) AS runs FROM cpu"

	out, errOut, err := simtelLake(t, "query", q, "--lake", url, "--run", "r1", "--format", "csv")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) != 2 || recs[1][0] != lakeItoa(n) || recs[1][2] != "1" {
		t.Fatalf("csv: %v %q; want n=%d and one run", err, out, n)
	}

	out, errOut, err = simtelLake(t, "query", q, "--lake", url, "--format", "json")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	var row map[string]any
	if err := json.Unmarshal([]byte(out), &row); err != nil || row["runs"] != 2.0 {
		t.Fatalf("json: %v %q; want runs=2", err, out)
	}

	arrowFile := filepath.Join(t.TempDir(), "out.arrow")
	if _, errOut, err := simtelLake(t, "query", "SELECT time, usage, host FROM cpu WHERE run = 'r1' ORDER BY time", "--lake", url, "--run", "r1", "--format", "arrow", "--output", arrowFile); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	fh, err := os.Open(arrowFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	rd, err := ipc.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	var rows int
	var asum float64
	for rd.Next() {
		rec := rd.RecordBatch()
		u := rec.Column(1).(*array.Float64)
		for i := 0; i < int(rec.NumRows()); i++ {
			asum += u.Value(i)
		}
		rows += int(rec.NumRows())
	}
	if rd.Err() != nil || rows != n || !lakeNear(asum, sum) {
		t.Errorf("arrow: %d rows, sum %v (%v); want %d, %v", rows, asum, rd.Err(), n, sum)
	}
	rd.Release()

	out, errOut, err = simtelLake(t, "query", "--tables", "--lake", url)
	if err != nil || !strings.Contains(out, `"cpu"`) || !strings.Contains(out, "temp") || !strings.Contains(out, "UBIGINT") {
		t.Errorf("--tables: %v %s\n%s", err, errOut, out)
	}

	out, _, _ = simtelLake(t, "query", q, "--lake", url, "--run", "r1")
	if lines := strings.Split(out, "\n"); len(lines) < 3 || !strings.HasPrefix(lines[0], "n ") || lines[2] != "(1 row)" {
		t.Errorf("table output:\n%s", out)
	}

	_, errOut, err = simtelLake(t, "query", "SELECT nonsense FROM cpu", "--lake", url)
	if err == nil || !strings.Contains(errOut, "nonsense") || !strings.Contains(errOut, "Binder Error") {
		t.Errorf("bad column: %v %s", err, errOut)
	}

	// Truncate an object of r2: a query of r1 still works, one of r2 names it.
	snap, _ := l.Catalog.Load(context.Background())
	bad := snap.Objects(catalog.Filter{Run: "r2", Measurement: "mem"})[0].Key
	p, _ := store.LocalPath(l.Store, bad)
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := simtelLake(t, "query", "SELECT count(*) FROM mem", "--lake", url, "--run", "r1"); err != nil {
		t.Errorf("a query of r1 read r2's corrupt object: %s", errOut)
	}
	_, errOut, err = simtelLake(t, "query", "SELECT count(*) FROM mem", "--lake", url, "--run", "r2")
	if err == nil || !strings.Contains(errOut, bad) {
		t.Errorf("corrupt object: %v, stderr %q; want an error naming %s", err, errOut, bad)
	}
}

func lakeItoa(n int) string { return strconv.Itoa(n) }

func lakeNear(a, b float64) bool { d := a - b; return d < 1e-6 && d > -1e-6 }

func TestLakeReplayAndCompactCLI(t *testing.T) {
	_, url, ss := newQueryTestLake(t)
	var want []replay.Sample
	for _, s := range ss {
		if s.Tags["run"] == "r2" {
			want = append(want, s)
		}
	}
	querytest.SortSamples(want)
	check := func(label, out string) {
		t.Helper()
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%s: %d lines, want %d", label, len(lines), len(want))
		}
		for i, line := range lines {
			got, err := replay.ParseLine([]byte(line))
			if err != nil {
				t.Fatalf("%s line %d: %v", label, i, err)
			}
			w := want[i]
			w.Partition, w.Offset = 0, 0
			if got.String() != w.String() {
				t.Fatalf("%s line %d:\n got %s\nwant %s", label, i, got.String(), w.String())
			}
		}
	}
	out, errOut, err := simtelLake(t, "replay", "--run", "r2", "--lake", url)
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	check("replay", out)

	out, errOut, err = simtelLake(t, "compact", "--lake", url, "--min-files", "2")
	if err != nil || !strings.HasPrefix(out, "merged ") {
		t.Fatalf("compact: %v %s %s", err, out, errOut)
	}
	out, errOut, err = simtelLake(t, "replay", "--run", "r2", "--lake", url)
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	check("replay after compaction", out)

	if _, errOut, err := simtelLake(t, "replay", "--lake", url); err == nil || !strings.Contains(errOut, "--run is required") {
		t.Errorf("replay without --run: %v %s", err, errOut)
	}
	if _, errOut, err := simtelLake(t, "replay", "--run", "r2", "--speed", "fast", "--lake", url); err == nil || !strings.Contains(errOut, "--speed") {
		t.Errorf("bad --speed: %v %s", err, errOut)
	}
}

func TestLakeBackfillCLI(t *testing.T) {
	l, url, ss := newQueryTestLake(t)
	// A raw topic with headers and binary values.
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	var raw []*kgo.Record
	for i := range 50 {
		raw = append(raw, &kgo.Record{Key: []byte{'k', byte(i % 5)}, Value: []byte{0, 1, byte(i), 0xff}, Partition: 0, Offset: int64(i),
			Timestamp: t0.Add(time.Duration(i) * time.Millisecond),
			Headers:   []kgo.RecordHeader{{Key: "trace", Value: []byte{byte(i)}}, {Key: "empty"}}})
	}
	ctx := context.Background()
	if _, err := l.RawFlush(ctx, "events", 0, 0, 29, raw[:30]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.RawFlush(ctx, "events", 0, 30, 49, raw[30:]); err != nil {
		t.Fatal(err)
	}

	addr := brokertest.Start(t, brokertest.SkipShort(), brokertest.Topic("restored", 3), brokertest.Topic("events-restored", 3),
		brokertest.Topic("telemetry", 3), brokertest.Topic("replayed", 3)).Addr

	_, errOut, err := simtelLake(t, "backfill", "--run", "r1", "--to-topic", "restored", "--brokers", addr, "--lake", url)
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	var want []replay.Sample
	for _, s := range ss {
		if s.Tags["run"] == "r1" {
			want = append(want, s)
		}
	}
	querytest.SortSamples(want)
	if !strings.Contains(errOut, "backfilled "+lakeItoa(len(want))+" records") {
		t.Errorf("final count missing: %s", errOut)
	}
	recs := lakeConsumeAll(t, addr, "restored", len(want))
	// Per key the order is kept; compare the multiset and each key's order.
	perKey := map[string][]string{}
	for _, s := range want {
		k := s.Tags["run"] + "/" + s.Tags["host"]
		s.Partition, s.Offset = 0, 0
		perKey[k] = append(perKey[k], s.String()+"@"+time.Unix(0, s.Time).UTC().Truncate(time.Millisecond).String())
	}
	gotKey := lakeLinesByKey(t, recs)
	for k, w := range perKey {
		if !slices.Equal(gotKey[k], w) {
			t.Errorf("key %s: got %d records, want %d in order (first got %v, want %v)", k, len(gotKey[k]), len(w), lakeFirst(gotKey[k]), lakeFirst(w))
		}
	}

	// Replay into a topic, paced: 150 s of samples at 100x. The lake's
	// telemetry topic exists on this broker but is empty: nothing to merge.
	start := time.Now()
	metricsAddr := testutil.FreePort(t)
	rp := exec.Command(testutil.Binary(t), "lake", "replay", "--run", "r1", "--to-topic", "replayed", "--speed", "100x",
		"--brokers", addr, "--lake", url, "--metrics-listen", metricsAddr)
	var rpErr bytes.Buffer
	rp.Stderr = &rpErr
	if err := rp.Start(); err != nil {
		t.Fatal(err)
	}
	// While it runs, /metrics shows the samples going out.
	var scraped string
	for time.Since(start) < 10*time.Second && !strings.Contains(scraped, `simtel_lake_replay_samples_total{source="lake"}`) {
		time.Sleep(50 * time.Millisecond)
		if resp, err := http.Get("http://" + metricsAddr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			scraped = string(b)
		}
	}
	if err := rp.Wait(); err != nil || !strings.Contains(rpErr.String(), "replayed "+lakeItoa(len(want))+" samples") {
		t.Fatalf("replay --to-topic: %v: %s", err, rpErr.String())
	}
	for _, m := range []string{`simtel_lake_replay_samples_total{source="lake"}`, "simtel_lake_replay_produced_total", "simtel_lake_replay_sample_time_seconds"} {
		if !strings.Contains(scraped, m) {
			t.Errorf("/metrics during the replay lacks %s:\n%s", m, scraped)
		}
	}
	span := time.Duration(want[len(want)-1].Time - want[0].Time)
	if el := time.Since(start); el < span/100 {
		t.Errorf("replay at 100x took %v for %v of samples; want at least %v", el, span, span/100)
	}
	gotKey = lakeLinesByKey(t, lakeConsumeAll(t, addr, "replayed", len(want)))
	for k, w := range perKey {
		if !slices.Equal(gotKey[k], w) {
			t.Errorf("replayed key %s: got %d records, want %d in order", k, len(gotKey[k]), len(w))
		}
	}

	_, errOut, err = simtelLake(t, "backfill", "--source-topic", "events", "--to-topic", "events-restored", "--brokers", addr, "--lake", url)
	if err != nil || !strings.Contains(errOut, "backfilled 50 records") {
		t.Fatalf("raw backfill: %v: %s", err, errOut)
	}
	got := lakeConsumeAll(t, addr, "events-restored", 50)
	byKey := map[string][]*kgo.Record{}
	for _, r := range got {
		byKey[string(r.Key)] = append(byKey[string(r.Key)], r)
	}
	wantKey := map[string][]*kgo.Record{}
	for _, r := range raw {
		wantKey[string(r.Key)] = append(wantKey[string(r.Key)], r)
	}
	for k, w := range wantKey {
		g := byKey[k]
		if len(g) != len(w) {
			t.Fatalf("raw key %q: %d records, want %d", k, len(g), len(w))
		}
		for i := range w {
			if !bytes.Equal(g[i].Value, w[i].Value) || !g[i].Timestamp.Equal(w[i].Timestamp) || len(g[i].Headers) != 2 ||
				g[i].Headers[0].Key != "trace" || !bytes.Equal(g[i].Headers[0].Value, w[i].Headers[0].Value) || g[i].Headers[1].Key != "empty" {
				t.Fatalf("raw key %q record %d: got %v %v %v, want %v %v %v", k, i, g[i].Value, g[i].Timestamp, g[i].Headers, w[i].Value, w[i].Timestamp, w[i].Headers)
			}
		}
	}
}

// lakeLinesByKey parses each record's value as a line and groups the
// lines, with the record's timestamp, by key in the order consumed.
func lakeLinesByKey(t *testing.T, recs []*kgo.Record) map[string][]string {
	t.Helper()
	byKey := map[string][]string{}
	for _, r := range recs {
		s, err := replay.ParseLine(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		byKey[string(r.Key)] = append(byKey[string(r.Key)], s.String()+"@"+r.Timestamp.UTC().String())
	}
	return byKey
}

func lakeFirst(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// lakeConsumeAll reads the n records of topic, and fails if it holds more.
func lakeConsumeAll(t *testing.T, addr, topic string, n int) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return brokertest.Read(t, ctx, []string{addr}, topic, n, brokertest.Exactly(), brokertest.OnFetchError(brokertest.IgnoreFetchErrors))
}

// The query command against a real S3 server (versitygw): objects come
// through the download cache.
func TestLakeQueryCLIS3(t *testing.T) {
	st, s3 := storetest.S3(t)
	ctx := context.Background()
	l := &querytest.Lake{Store: st, Catalog: catalog.New(st)}
	ss := querytest.GenSamples(9, []string{"r1", "r2"}, 100, 2)
	if err := l.WriteSamples(ctx, "telemetry", ss, 30); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range ss {
		if s.Tags["run"] == "r1" && s.Measurement == "mem" {
			n++
		}
	}
	cacheDir := t.TempDir()
	for range 2 {
		cmd := exec.Command(testutil.Binary(t), "lake", "query", "SELECT count(*) AS n FROM mem", "--run", "r1", "--format", "csv",
			"--lake", s3.URL, "--s3-endpoint", s3.Endpoint, "--cache-dir", cacheDir)
		cmd.Env = append(os.Environ(), s3.Env()...)
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "n\n"+lakeItoa(n)+"\n" {
			t.Fatalf("query over S3: %v\n%s\nwant n=%d", err, out, n)
		}
	}
	// Both runs used one downloaded copy per object of r1's mem.
	var files int
	filepath.WalkDir(cacheDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			files++
		}
		return nil
	})
	snap, _ := l.Catalog.Load(ctx)
	if want := len(snap.Objects(catalog.Filter{Run: "r1", Measurement: "mem"})); files != want {
		t.Errorf("%d objects in the cache, want %d (r1's mem objects only)", files, want)
	}
}
