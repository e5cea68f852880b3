package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func fileCatalog(t *testing.T) (*catalog.Catalog, store.Store) {
	t.Helper()
	s := storetest.Dir(t)
	return catalog.New(s), s
}

// entry builds the entry of one flush holding one telemetry object per
// measurement, with a sample per offset starting at t0+first seconds.
func entry(topic string, p int32, first, last int64, run string, measurements ...string) catalog.Entry {
	e := catalog.Entry{Topic: topic, Partition: p, FirstOffset: first, LastOffset: last, Records: last - first + 1, Written: time.Now().UTC()}
	for _, m := range measurements {
		min := t0.Add(time.Duration(first) * time.Second)
		max := t0.Add(time.Duration(last) * time.Second)
		e.Objects = append(e.Objects, catalog.Object{
			Key: lake.TelemetryKey(m, run, lake.Date(min), topic, p, first, last), Kind: lake.KindTelemetry,
			Measurement: m, Run: run, Date: lake.Date(min), MinTime: min, MaxTime: max,
			Rows: last - first + 1, Bytes: 1000, Columns: []string{"time", "host", m + "_value"},
		})
	}
	return e
}

func keys(objs []catalog.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func TestCommitLastIntent(t *testing.T) {
	ctx := context.Background()
	c, s := fileCatalog(t)
	if _, ok, err := c.Last(ctx, "telemetry", 0); ok || err != nil {
		t.Fatalf("Last of an empty lake = %v, %v; want none", ok, err)
	}
	for _, e := range []catalog.Entry{
		entry("telemetry", 0, 0, 9, "r1", "cpu"),
		entry("telemetry", 0, 100, 199, "r1", "cpu"), // after a gap (compacted topic)
		entry("telemetry", 0, 10, 99, "r1", "cpu"),
		entry("telemetry", 1, 0, 4, "r1", "cpu"),
		entry("tele/metry", 0, 0, 1000, "r1", "cpu"),
	} {
		if err := c.Commit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	last, ok, err := c.Last(ctx, "telemetry", 0)
	if err != nil || !ok || last.LastOffset != 199 || last.FirstOffset != 100 {
		t.Errorf("Last(telemetry/0) = %d-%d %v %v, want 100-199", last.FirstOffset, last.LastOffset, ok, err)
	}
	if last, _, _ := c.Last(ctx, "telemetry", 1); last.LastOffset != 4 {
		t.Errorf("Last(telemetry/1) = %d, want 4", last.LastOffset)
	}
	if last, _, _ := c.Last(ctx, "tele/metry", 0); last.LastOffset != 1000 {
		t.Errorf("Last(tele/metry/0) = %d, want 1000 (topic with a slash is its own directory)", last.LastOffset)
	}
	if _, err := s.Stat(ctx, "_catalog/flush/telemetry/0/00000000000000000100-00000000000000000199.json"); err != nil {
		t.Errorf("flush entry not at the documented key: %v", err)
	}

	// Intents.
	if _, ok, err := c.Intent(ctx, "telemetry", 0); ok || err != nil {
		t.Errorf("Intent before PutIntent = %v, %v", ok, err)
	}
	in := catalog.Intent{Topic: "telemetry", Partition: 0, FirstOffset: 200, LastOffset: 250}
	if err := c.PutIntent(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, ok, err := c.Intent(ctx, "telemetry", 0)
	if err != nil || !ok || got != in {
		t.Errorf("Intent = %+v %v %v, want %+v", got, ok, err, in)
	}
	if err := c.ClearIntent(ctx, "telemetry", 0); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c.Intent(ctx, "telemetry", 0); ok {
		t.Errorf("intent still there after ClearIntent")
	}
	if err := c.ClearIntent(ctx, "telemetry", 0); err != nil {
		t.Errorf("second ClearIntent: %v", err)
	}

	// Bad input is refused with an error.
	for _, e := range []catalog.Entry{
		{Partition: 0, FirstOffset: 0, LastOffset: 1},
		{Topic: "t", Partition: -1},
		{Topic: "t", FirstOffset: 5, LastOffset: 4},
		{Topic: "t", Objects: []catalog.Object{{Kind: lake.KindRaw}}},
	} {
		if err := c.Commit(ctx, e); err == nil {
			t.Errorf("Commit(%+v) succeeded", e)
		}
	}
	if err := c.PutIntent(ctx, catalog.Intent{Topic: "t", FirstOffset: 3, LastOffset: 1}); err == nil {
		t.Errorf("PutIntent with a reversed range succeeded")
	}
}

func TestLoadAndQueries(t *testing.T) {
	ctx := context.Background()
	c, _ := fileCatalog(t)
	commits := []catalog.Entry{
		entry("telemetry", 0, 0, 9, "r1", "cpu", "reward"),
		entry("telemetry", 0, 10, 19, "r2", "cpu"),
		entry("telemetry", 1, 0, 4, "r1", "cpu"),
		entry("telemetry", 1, 5, 5, "", "event"),
	}
	raw := catalog.Entry{Topic: "jobs", Partition: 0, FirstOffset: 0, LastOffset: 2, Objects: []catalog.Object{{
		Key: lake.RawKey("jobs", "2026-11-29", 0, 0, 2), Kind: lake.KindRaw, Date: "2026-11-29",
		MinTime: t0, MaxTime: t0.Add(time.Hour), Rows: 3, Bytes: 500,
	}}}
	for _, e := range append(commits, raw) {
		if err := c.Commit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// A redone flush (same range) replaces the entry instead of adding one.
	if err := c.Commit(ctx, commits[1]); err != nil {
		t.Fatal(err)
	}
	// An intent is not data.
	if err := c.PutIntent(ctx, catalog.Intent{Topic: "telemetry", Partition: 0, FirstOffset: 20, LastOffset: 29}); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkRun(ctx, catalog.RunState{Run: "r1", State: "completed", Ended: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkRun(ctx, catalog.RunState{Run: "r9", State: "failed", ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	runs, err := c.Runs(ctx)
	if err != nil || len(runs) != 2 || runs["r1"].State != "completed" || runs["r9"].ExitCode != 3 {
		t.Errorf("Runs = %+v, %v", runs, err)
	}

	snap, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Entries) != 5 {
		t.Errorf("Load: %d entries, want 5", len(snap.Entries))
	}
	if len(snap.Problems) != 0 {
		t.Errorf("problems: %v", snap.Problems)
	}
	cases := []struct {
		name string
		f    catalog.Filter
		want int
	}{
		{"all", catalog.Filter{}, 6},
		{"telemetry", catalog.Filter{Kind: lake.KindTelemetry}, 5},
		{"raw", catalog.Filter{Kind: lake.KindRaw}, 1},
		{"topic jobs", catalog.Filter{Topic: "jobs"}, 1},
		{"topic telemetry", catalog.Filter{Topic: "telemetry"}, 5},
		{"cpu", catalog.Filter{Measurement: "cpu"}, 3},
		{"run r1", catalog.Filter{Run: "r1"}, 3},
		{"no run", catalog.Filter{Run: lake.NoValue}, 2}, // the event object and the raw one
		{"r1 cpu", catalog.Filter{Run: "r1", Measurement: "cpu"}, 2},
		// Samples at t0+0..9s, 10..19s, 0..4s, 5s; the raw object spans an hour.
		{"from 10s", catalog.Filter{Kind: lake.KindTelemetry, From: t0.Add(10 * time.Second)}, 1},
		{"to 5s", catalog.Filter{Kind: lake.KindTelemetry, To: t0.Add(5 * time.Second)}, 3},
		{"[5s,6s)", catalog.Filter{Kind: lake.KindTelemetry, From: t0.Add(5 * time.Second), To: t0.Add(6 * time.Second)}, 3},
		{"to t0", catalog.Filter{To: t0}, 0},
	}
	for _, tc := range cases {
		if got := snap.Objects(tc.f); len(got) != tc.want {
			t.Errorf("Objects(%s) = %d objects %v, want %d", tc.name, len(got), keys(got), tc.want)
		}
	}
	all := keys(snap.Objects(catalog.Filter{}))
	if !slices.IsSorted(all) {
		t.Errorf("Objects not sorted by key: %v", all)
	}

	ri := snap.Runs()
	byRun := map[string]catalog.RunInfo{}
	var order []string
	for _, r := range ri {
		byRun[r.Run] = r
		order = append(order, r.Run)
	}
	if fmt.Sprint(order) != fmt.Sprint([]string{"r1", lake.NoValue, "r2", "r9"}) {
		t.Errorf("Runs order = %v, want r1 __none__ r2 r9 (by first sample, no data last)", order)
	}
	r1 := byRun["r1"]
	if r1.State != "completed" || r1.Rows != 25 || r1.Objects != 3 || r1.Bytes != 3000 ||
		!r1.From.Equal(t0) || !r1.To.Equal(t0.Add(9*time.Second)) || fmt.Sprint(r1.Measurements) != "[cpu reward]" {
		t.Errorf("run r1 = %+v", r1)
	}
	if r2 := byRun["r2"]; r2.State != catalog.StateOpen || r2.Rows != 10 {
		t.Errorf("run r2 = %+v, want open with 10 rows", r2)
	}
	if r9 := byRun["r9"]; r9.State != "failed" || r9.Objects != 0 || r9.ExitCode != 3 {
		t.Errorf("run r9 = %+v, want failed without data", r9)
	}

	ms := snap.Measurements()
	if len(ms) != 3 || ms[0].Name != "cpu" || ms[0].Objects != 3 || fmt.Sprint(ms[0].Runs) != "[r1 r2]" ||
		fmt.Sprint(ms[0].Columns) != "[cpu_value host time]" {
		t.Errorf("Measurements = %+v", ms)
	}
}

func TestCorruptEntryIsSkipped(t *testing.T) {
	ctx := context.Background()
	c, s := fileCatalog(t)
	if err := c.Commit(ctx, entry("telemetry", 0, 0, 9, "r1", "cpu")); err != nil {
		t.Fatal(err)
	}
	bad := "_catalog/flush/telemetry/0/00000000000000000010-00000000000000000019.json"
	if err := s.Put(ctx, bad, strings.NewReader("{not json"), 9); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Entries) != 1 || len(snap.Problems) != 1 || !strings.Contains(snap.Problems[0], bad) {
		t.Errorf("entries %d, problems %v; want 1 entry and a problem naming %s", len(snap.Entries), snap.Problems, bad)
	}
}

func TestCompaction(t *testing.T) {
	ctx := context.Background()
	c, s := fileCatalog(t)
	e1 := entry("telemetry", 0, 0, 9, "r1", "cpu")
	e2 := entry("telemetry", 0, 10, 19, "r1", "cpu")
	e3 := entry("telemetry", 1, 0, 9, "r1", "cpu")
	for _, e := range []catalog.Entry{e1, e2, e3} {
		if err := c.Commit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	merged := catalog.Object{
		Key: "telemetry/cpu/run=r1/date=2026-11-29/compacted-1.parquet", Kind: lake.KindTelemetry, Measurement: "cpu", Run: "r1",
		Date: "2026-11-29", MinTime: t0, MaxTime: t0.Add(19 * time.Second), Rows: 30, Bytes: 2500,
	}
	cp := catalog.Compaction{Replaced: []string{e1.Objects[0].Key, e2.Objects[0].Key, e3.Objects[0].Key}, Objects: []catalog.Object{merged}}
	if err := c.CommitCompaction(ctx, cp); err == nil {
		t.Fatal("CommitCompaction accepted a new object that is not in the lake")
	}
	if err := s.Put(ctx, merged.Key, strings.NewReader("PAR1"), 4); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitCompaction(ctx, catalog.Compaction{Objects: []catalog.Object{merged}}); err == nil {
		t.Error("CommitCompaction accepted a compaction that replaces nothing")
	}
	if err := c.CommitCompaction(ctx, cp); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := snap.Objects(catalog.Filter{})
	if len(got) != 1 || got[0].Key != merged.Key {
		t.Fatalf("after compaction Objects = %v, want only %s", keys(got), merged.Key)
	}
	if n := len(snap.Objects(catalog.Filter{Topic: "telemetry"})); n != 1 {
		t.Errorf("compacted object lost its topic: Objects(topic) = %d", n)
	}
	if r := snap.Runs(); len(r) != 1 || r[0].Rows != 30 || r[0].Objects != 1 {
		t.Errorf("Runs after compaction = %+v", r)
	}
	// A later flush is visible next to the compacted object; compacting
	// the compacted object again chains.
	e4 := entry("telemetry", 0, 20, 29, "r1", "cpu")
	if err := c.Commit(ctx, e4); err != nil {
		t.Fatal(err)
	}
	merged2 := merged
	merged2.Key = "telemetry/cpu/run=r1/date=2026-11-29/compacted-2.parquet"
	merged2.Rows = 40
	s.Put(ctx, merged2.Key, strings.NewReader("PAR1"), 4)
	if err := c.CommitCompaction(ctx, catalog.Compaction{Replaced: []string{merged.Key, e4.Objects[0].Key}, Objects: []catalog.Object{merged2}}); err != nil {
		t.Fatal(err)
	}
	snap, _ = c.Load(ctx)
	if got := keys(snap.Objects(catalog.Filter{Topic: "telemetry"})); fmt.Sprint(got) != "["+merged2.Key+"]" {
		t.Errorf("after a second compaction Objects = %v, want [%s]", got, merged2.Key)
	}
}

func TestCompactEntries(t *testing.T) {
	ctx := context.Background()
	c, s := fileCatalog(t)
	var want []string
	for i := int64(0); i < 50; i++ {
		e := entry("telemetry", int32(i%2), i*10, i*10+9, "r1", "cpu")
		want = append(want, e.Objects[0].Key)
		if err := c.Commit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	before, _ := c.Load(ctx)

	// Readers running during compaction never see a gap or a duplicate.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	loads := 0
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				snap, err := c.Load(ctx)
				mu.Lock()
				loads++
				if err != nil {
					bad = append(bad, err.Error())
				} else if got := keys(snap.Objects(catalog.Filter{})); !slices.Equal(got, want) || len(snap.Entries) != 50 {
					bad = append(bad, fmt.Sprintf("saw %d objects, %d entries", len(got), len(snap.Entries)))
				}
				last, ok, err := c.Last(ctx, "telemetry", 1)
				if err != nil || !ok || last.LastOffset != 499 {
					bad = append(bad, fmt.Sprintf("Last = %d %v %v", last.LastOffset, ok, err))
				}
				mu.Unlock()
			}
		})
	}
	for round := 0; round < 3; round++ {
		st, err := c.CompactEntriesWith(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %+v", round, st)
		if round == 0 && (st.Partitions != 2 || st.Merged != 50 || st.Entries != 50) {
			t.Errorf("first compaction: %+v, want 2 partitions, 50 files merged", st)
		}
		if round > 0 && st.Partitions != 0 {
			t.Errorf("compaction %d merged again: %+v", round, st)
		}
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("readers saw a gap or duplicate during compaction (%d of %d loads): %v", len(bad), loads, bad[:min(len(bad), 5)])
	}
	flushes, _ := s.List(ctx, "_catalog/flush/")
	snaps, _ := s.List(ctx, "_catalog/snap/")
	if len(flushes) != 0 || len(snaps) != 2 {
		t.Errorf("after compaction: %d flush files, %d snapshots; want 0 and 2", len(flushes), len(snaps))
	}
	after, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after.Entries) != fmt.Sprint(before.Entries) {
		t.Errorf("entries changed by compaction")
	}
	// New flushes after a compaction merge into a new snapshot.
	if err := c.Commit(ctx, entry("telemetry", 0, 500, 509, "r1", "cpu")); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(ctx, entry("telemetry", 0, 510, 519, "r1", "cpu")); err != nil {
		t.Fatal(err)
	}
	if err := c.CompactEntries(ctx); err != nil {
		t.Fatal(err)
	}
	snaps, _ = s.List(ctx, "_catalog/snap/telemetry/0/")
	if len(snaps) != 1 || !strings.HasSuffix(snaps[0].Key, "/00000000000000000000-00000000000000000519.json") {
		t.Errorf("snapshots of partition 0: %v", snaps)
	}
	if last, _, _ := c.Last(ctx, "telemetry", 0); last.LastOffset != 519 {
		t.Errorf("Last after compaction = %d, want 519", last.LastOffset)
	}
	if after, _ := c.Load(ctx); len(after.Entries) != 52 {
		t.Errorf("after second compaction: %d entries, want 52", len(after.Entries))
	}
}

// TestS3Catalog runs the catalog against a real S3 server, with the local
// cache of catalog files.
func TestS3Catalog(t *testing.T) {
	s, srv := storetest.S3(t)
	ctx := context.Background()
	cacheDir := t.TempDir()
	c := catalog.New(s, catalog.WithCacheDir(cacheDir))
	for i := int64(0); i < 20; i++ {
		if err := c.Commit(ctx, entry("telemetry", 0, i*10, i*10+9, "r1", "cpu")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.MarkRun(ctx, catalog.RunState{Run: "r1", State: "completed"}); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.Objects(catalog.Filter{Run: "r1"})); n != 20 {
		t.Errorf("Objects(r1) = %d, want 20", n)
	}
	if r := snap.Runs(); len(r) != 1 || r[0].State != "completed" || r[0].Rows != 200 {
		t.Errorf("Runs = %+v", r)
	}
	cached := 0
	filepath.WalkDir(cacheDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			cached++
		}
		return nil
	})
	if cached != 20 {
		t.Errorf("%d catalog files cached, want 20 (the flush entries; run states are always fetched)", cached)
	}
	// With the server down, the cache alone cannot answer a Load (the
	// listing needs the server), and the error says why.
	if last, ok, err := c.Last(ctx, "telemetry", 0); err != nil || !ok || last.LastOffset != 199 {
		t.Errorf("Last = %d %v %v", last.LastOffset, ok, err)
	}
	if err := c.CompactEntries(ctx); err != nil {
		t.Fatal(err)
	}
	snap2, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap2.Entries) != 20 {
		t.Errorf("after compaction: %d entries, want 20", len(snap2.Entries))
	}
	srv.Stop()
	if _, err := c.Load(ctx); !errors.Is(err, store.ErrUnreachable) {
		t.Errorf("Load with the server stopped: %v, want ErrUnreachable", err)
	}
}
