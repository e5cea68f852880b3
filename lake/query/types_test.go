package query_test

import (
	"context"
	"database/sql"
	"math"
	"testing"
	"time"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/store"
)

// mixedLake writes a lake as sinks wrote it before field types were fixed:
// field usage of cpu is a float in the oldest flush, then an integer, then
// a string; temp is an integer throughout.
func mixedLake(t *testing.T) (store.Store, *catalog.Catalog) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat := catalog.New(st)
	l := &querytest.Lake{Store: st, Catalog: cat}
	flushes := [][]replay.Sample{
		{sample("cpu", "r1", 0, 0, 0, map[string]any{"usage": 1.5, "temp": int64(60)}),
			sample("cpu", "r1", 0, 1, time.Second, map[string]any{"usage": 2.5, "temp": int64(61)})},
		{sample("cpu", "r1", 0, 2, 2*time.Second, map[string]any{"usage": int64(100), "temp": int64(62)}),
			sample("cpu", "r1", 0, 3, 3*time.Second, map[string]any{"usage": int64(200)})},
		{sample("cpu", "r1", 0, 4, 4*time.Second, map[string]any{"usage": "high", "temp": int64(63)})},
		{sample("cpu", "r1", 0, 5, 5*time.Second, map[string]any{"usage": 4.0})},
	}
	for _, ss := range flushes {
		first, last := ss[0].Offset, ss[len(ss)-1].Offset
		if _, err := l.Flush(ctx, "telemetry", 0, first, last, ss); err != nil {
			t.Fatal(err)
		}
	}
	return st, cat
}

// A lake that already mixes a field's types reads it in the type of its
// oldest object, so avg() works; the objects holding it in other types
// show NULL there and are named in the view's Conflicts.
func TestQueryMixedTypesReadsFirstType(t *testing.T) {
	ctx := context.Background()
	st, cat := mixedLake(t)
	eng, err := query.Open(ctx, st, cat, &querytest.LocalFetcher{Store: st}, query.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var rows, n, temps int
	var avg float64
	if err := eng.DB().QueryRowContext(ctx, `SELECT count(*), count(usage), avg(usage), sum(temp) FROM cpu`).Scan(&rows, &n, &avg, &temps); err != nil {
		t.Fatalf("avg(usage) over a mixed lake: %v", err)
	}
	if rows != 6 || n != 3 || avg != (1.5+2.5+4.0)/3 || temps != 60+61+62+63 {
		t.Fatalf("got %d rows, %d usage values, avg %v, sum(temp) %d; want 6, 3, %v, %d", rows, n, avg, temps, (1.5+2.5+4.0)/3, 60+61+62+63)
	}
	var typ string
	if err := eng.DB().QueryRowContext(ctx, `SELECT typeof(usage) FROM cpu LIMIT 1`).Scan(&typ); err != nil || typ != "DOUBLE" {
		t.Fatalf("usage reads as %q (%v), want DOUBLE", typ, err)
	}
	v := eng.Views()[0]
	if len(v.Conflicts) != 1 || v.Conflicts[0].Column != "usage" || v.Conflicts[0].Type != catalog.TypeFloat || len(v.Conflicts[0].Hidden) != 2 {
		t.Fatalf("view conflicts = %+v, want usage read as float with 2 objects hidden", v.Conflicts)
	}
	t.Logf("mixed lake: avg(usage) = %v over %d rows; %d objects hold usage in other types", avg, rows, len(v.Conflicts[0].Hidden))
}

// A type fixed in the catalog wins over the oldest object's.
func TestQueryMixedTypesReadsFixedType(t *testing.T) {
	ctx := context.Background()
	st, cat := mixedLake(t)
	if _, err := cat.ClaimFieldType(ctx, catalog.FieldType{Measurement: "cpu", Field: "usage", Type: catalog.TypeInteger}); err != nil {
		t.Fatal(err)
	}
	eng, err := query.Open(ctx, st, cat, &querytest.LocalFetcher{Store: st}, query.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var n int
	var avg float64
	if err := eng.DB().QueryRowContext(ctx, `SELECT count(usage), avg(usage) FROM cpu`).Scan(&n, &avg); err != nil {
		t.Fatal(err)
	}
	if n != 2 || avg != 150 {
		t.Fatalf("got %d usage values, avg %v; want the 2 integers, avg 150", n, avg)
	}
}

// Without the engine's help, DuckDB cannot average the mixed column: what
// the test above guards against.
func TestQueryMixedTypesPlainDuckDBFails(t *testing.T) {
	ctx := context.Background()
	st, cat := mixedLake(t)
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := &querytest.LocalFetcher{Store: st}
	var paths []string
	for _, o := range snap.Objects(catalog.Filter{Measurement: "cpu"}) {
		p, err := f.Path(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var avg float64
	err = db.QueryRowContext(ctx, "SELECT avg(usage) FROM read_parquet("+query.ReadList(paths)+", union_by_name=true)").Scan(&avg)
	if err == nil || math.IsNaN(avg) {
		t.Fatalf("plain DuckDB averaged a float/integer/string column (%v, %v): the mixed lake is not mixed", avg, err)
	}
	t.Logf("plain DuckDB over the mixed objects: %v", err)
}
