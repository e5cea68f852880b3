package compact_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/compact"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/store/storetest"
)

// newLake returns a lake in a temporary directory holding ss on topic
// telemetry, written in flushes of flushSize offsets.
func newLake(t *testing.T, ss []replay.Sample, flushSize int) *querytest.Lake {
	ctx := context.Background()
	st := storetest.Dir(t)
	l := &querytest.Lake{Store: st, Catalog: catalog.New(st)}
	if err := l.WriteSamples(ctx, "telemetry", ss, flushSize); err != nil {
		t.Fatal(err)
	}
	return l
}

// runCompact runs a compaction of l with cfg, reading objects straight
// from its store.
func runCompact(ctx context.Context, l *querytest.Lake, cfg compact.Config) (compact.Result, error) {
	return compact.Run(ctx, l.Store, l.Catalog, &querytest.LocalFetcher{Store: l.Store}, cfg)
}

// rowSet is every row of every measurement as text, sorted: the multiset
// of the lake's rows.
func rowSet(t *testing.T, l *querytest.Lake) []string {
	t.Helper()
	ctx := context.Background()
	e, err := query.Open(ctx, l.Store, l.Catalog, &querytest.LocalFetcher{Store: l.Store}, query.Filter{NoRaw: true}, query.Options{NoHivePartitioning: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var out []string
	for _, v := range e.Views() {
		var cols []string
		for _, c := range v.Columns {
			cols = append(cols, c.Name)
		}
		slices.Sort(cols)
		rows, err := e.Query(ctx, "SELECT "+strings.Join(quote(cols), ", ")+" FROM "+query.Ident(v.Name))
		if err != nil {
			t.Fatal(err)
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = append(out, v.Name+fmt.Sprint(cols, vals))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	slices.Sort(out)
	return out
}

func quote(cols []string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = query.Ident(c)
	}
	return out
}

func replayAll(t *testing.T, l *querytest.Lake, run string) []string {
	t.Helper()
	ctx := context.Background()
	snap, err := l.Catalog.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := replay.Open(ctx, snap, &querytest.LocalFetcher{Store: l.Store}, replay.Config{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	if err := r.Run(ctx, func(s *replay.Sample) error {
		out = append(out, s.String())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCatalog: every visible object exists, no two visible telemetry
// objects of a group overlap in offsets, and rows add up.
func checkCatalog(t *testing.T, l *querytest.Lake, wantRows int64) *catalog.Snapshot {
	t.Helper()
	ctx := context.Background()
	snap, err := l.Catalog.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	type span struct{ first, last int64 }
	seen := map[string][]span{}
	for _, o := range snap.Objects(catalog.Filter{Kind: lake.KindTelemetry}) {
		if _, err := l.Store.Stat(ctx, o.Key); err != nil {
			t.Errorf("visible object %s: %v", o.Key, err)
		}
		rows += o.Rows
		topic, p, f, last, err := compact.ParseName(o.Key)
		if err != nil {
			t.Fatal(err)
		}
		g := fmt.Sprint(o.Measurement, o.Run, o.Date, topic, p)
		for _, s := range seen[g] {
			if f <= s.last && s.first <= last {
				t.Errorf("object %s overlaps [%d,%d] of another object of its group", o.Key, s.first, s.last)
			}
		}
		seen[g] = append(seen[g], span{f, last})
	}
	if rows != wantRows {
		t.Errorf("catalog lists %d rows, want %d", rows, wantRows)
	}
	return snap
}

// TestCompactKeepsRowsAndOrder compacts objects as the sink writes them
// (querytest writes through lake/schema, as the sink does).
func TestCompactKeepsRowsAndOrder(t *testing.T) {
	ctx := context.Background()
	ss := querytest.GenSamples(7, []string{"r1", "r2"}, 400, 2)
	l := newLake(t, ss, 9)
	before := rowSet(t, l)
	replayBefore := replayAll(t, l, "r1")
	snap0 := checkCatalog(t, l, int64(len(ss)))
	n0 := len(snap0.Objects(catalog.Filter{Kind: lake.KindTelemetry}))

	// Only r1; groups of at most 6 objects (by size).
	var size int64
	for _, o := range snap0.Objects(catalog.Filter{Kind: lake.KindTelemetry, Run: "r1"}) {
		size = max(size, o.Bytes)
	}
	res, err := runCompact(ctx, l, compact.Config{Run: "r1", MinFiles: 3, TargetSize: 6 * size})
	if err != nil {
		t.Fatal(err)
	}
	if res.Groups == 0 || res.Replaced < 3*res.Groups {
		t.Fatalf("compaction did too little: %+v", res)
	}
	snap := checkCatalog(t, l, int64(len(ss)))
	if n := len(snap.Objects(catalog.Filter{Kind: lake.KindTelemetry})); n != n0-res.Replaced+res.Groups {
		t.Errorf("%d objects after compaction, want %d - %d + %d", n, n0, res.Replaced, res.Groups)
	}
	if n2, n20 := len(snap.Objects(catalog.Filter{Run: "r2"})), len(snap0.Objects(catalog.Filter{Run: "r2"})); n2 != n20 {
		t.Errorf("run r2 went from %d to %d objects; only r1 was to be compacted", n20, n2)
	}
	for _, cp := range snap.Compactions {
		for _, k := range cp.Replaced {
			if _, err := l.Store.Stat(ctx, k); err == nil {
				t.Errorf("replaced object %s still in the store", k)
			}
		}
	}
	if after := rowSet(t, l); !reflect.DeepEqual(before, after) {
		t.Errorf("rows changed by compaction: %d before, %d after", len(before), len(after))
	}
	// Tags stay tags and fields stay fields (the merged objects are written
	// by DuckDB, which chooses its own encodings).
	if got := replayAll(t, l, "r1"); !slices.Equal(got, replayBefore) {
		t.Errorf("replay changed by compaction: %d lines before, %d after", len(replayBefore), len(got))
		for i := range min(len(got), len(replayBefore)) {
			if got[i] != replayBefore[i] {
				t.Fatalf("first difference at %d:\n got %s\nwant %s", i, got[i], replayBefore[i])
			}
		}
	}

	// Everything compacts further with a bigger target, and a rerun
	// with nothing to do changes nothing.
	if _, err := runCompact(ctx, l, compact.Config{MinFiles: 2}); err != nil {
		t.Fatal(err)
	}
	checkCatalog(t, l, int64(len(ss)))
	res, err = runCompact(ctx, l, compact.Config{MinFiles: 2})
	if err != nil || res.Groups != 0 {
		t.Errorf("second full compaction: %+v, %v; want nothing to do", res, err)
	}
	if after := rowSet(t, l); !reflect.DeepEqual(before, after) {
		t.Errorf("rows changed by the second compaction")
	}
}

// A crash after writing the merged object but before the commit leaves the
// originals authoritative; a crash after the commit but before the deletes
// leaves garbage the next run removes.
func TestCompactCrashPoints(t *testing.T) {
	ctx := context.Background()
	ss := querytest.GenSamples(3, []string{"r1"}, 120, 1)
	l := newLake(t, ss, 10)
	before := rowSet(t, l)
	snap, _ := l.Catalog.Load(ctx)
	batches, err := compact.Plan(snap, compact.Config{MinFiles: 4, TargetSize: 1 << 30})
	if err != nil || len(batches) == 0 {
		t.Fatalf("plan: %v, %d batches", err, len(batches))
	}
	// Crash 1: an orphan with garbage under the merged key.
	if err := l.Store.Put(ctx, batches[0].Key(), strings.NewReader("partial"), 7); err != nil {
		t.Fatal(err)
	}
	if got := rowSet(t, l); !reflect.DeepEqual(got, before) {
		t.Fatal("an uncommitted merged object changed what readers see")
	}
	b := batches[1]
	var keys []string
	for _, o := range b.Objects {
		keys = append(keys, o.Key)
	}
	res0, err := runCompact(ctx, l, compact.Config{MinFiles: 4, TargetSize: 1 << 30, DryRun: true})
	if err != nil || res0.Groups != len(batches) {
		t.Fatalf("dry run: %+v %v", res0, err)
	}
	res, err := runCompact(ctx, l, compact.Config{MinFiles: 4, TargetSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if res.Groups != len(batches) {
		t.Errorf("merged %d groups, want %d", res.Groups, len(batches))
	}
	checkCatalog(t, l, int64(len(ss)))
	if got := rowSet(t, l); !reflect.DeepEqual(got, before) {
		t.Fatal("rows changed after compacting over an orphan")
	}
	// Put a replaced object back (as if its delete never happened): the
	// next run removes it, and readers never see it.
	if err := l.Store.Put(ctx, keys[0], strings.NewReader("old"), 3); err != nil {
		t.Fatal(err)
	}
	if got := rowSet(t, l); !reflect.DeepEqual(got, before) {
		t.Fatal("a replaced object is visible again")
	}
	res, err = runCompact(ctx, l, compact.Config{MinFiles: 4, TargetSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cleaned != 1 {
		t.Errorf("cleaned %d leftovers, want 1", res.Cleaned)
	}
	if _, err := l.Store.Stat(ctx, keys[0]); err == nil {
		t.Errorf("leftover %s not deleted", keys[0])
	}
}
