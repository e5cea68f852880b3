package query_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	st, cat, l := localLake(t)
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
	eng := openLocal(t, st, cat, query.Filter{})
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
	eng := openLocal(t, st, cat, query.Filter{})
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

// legacyLake writes field value of measurement sensor as a float, then an
// integer, then a string, then a float again, as sinks did before field
// types were fixed, with one real dead letter; it returns the values of
// other types than float that it wrote, by offset, as text.
func legacyLake(t *testing.T) (store.Store, *catalog.Catalog, map[int64]string) {
	t.Helper()
	ctx := context.Background()
	st, cat, l := localLake(t)
	others := map[int64]string{}
	var off int64
	flush := func(values ...any) {
		var ss []replay.Sample
		for _, v := range values {
			fields := map[string]any{"count": off}
			if v != nil {
				fields["value"] = v
				switch v := v.(type) {
				case int64:
					others[off] = fmt.Sprint(v)
				case string:
					others[off] = v
				}
			}
			ss = append(ss, sample("sensor", "r1", 0, off, time.Duration(off)*time.Second, fields))
			off++
		}
		if _, err := l.Flush(ctx, "telemetry", 0, ss[0].Offset, ss[len(ss)-1].Offset, ss); err != nil {
			t.Fatal(err)
		}
	}
	flush(1.5, 2.5, nil)
	flush(int64(10), nil, int64(-20), int64(30))
	flush("warm", "it's \\x41 hot")
	flush(4.0)
	flush(int64(50))
	bad := &kgo.Record{Value: []byte("sensor value=?"), Partition: 0, Offset: off, Timestamp: t0.Add(time.Hour)}
	if _, err := l.DeadLetterFlush(ctx, "telemetry", 0, off, off, []*kgo.Record{bad}, []string{"line protocol: bad value"}); err != nil {
		t.Fatal(err)
	}
	return st, cat, others
}

// The values a legacy lake holds in another type than the one its view
// reads are not lost: each is a row of the topic's dead-letter view, with
// its partition, offset, value and a reason naming the object, next to the
// sink's own dead letters; also when the query names only that view.
func TestQueryMixedTypesDeadLetters(t *testing.T) {
	ctx := context.Background()
	st, cat, others := legacyLake(t)
	for _, f := range []query.Filter{{}, {SQL: "SELECT * FROM deadletter_telemetry"}} {
		eng := openLocal(t, st, cat, f)
		defer eng.Close()
		var n int
		var avg float64
		if err := eng.DB().QueryRowContext(ctx, `SELECT count(value), avg(value) FROM sensor`).Scan(&n, &avg); err != nil {
			t.Fatalf("avg(value) over a legacy lake: %v", err)
		}
		if n != 3 || avg != (1.5+2.5+4.0)/3 {
			t.Fatalf("got %d values, avg %v; want the 3 floats, avg %v", n, avg, (1.5+2.5+4.0)/3)
		}
		rows, err := eng.Query(ctx, `SELECT _partition, _offset, decode(value), reason, measurement, field, timestamp FROM deadletter_telemetry ORDER BY _offset`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64]string{}
		real := 0
		for rows.Next() {
			var p int32
			var off int64
			var val, reason string
			var m, field sql.NullString
			var ts time.Time
			if err := rows.Scan(&p, &off, &val, &reason, &m, &field, &ts); err != nil {
				t.Fatal(err)
			}
			if !m.Valid {
				if reason != "line protocol: bad value" || val != "sensor value=?" {
					t.Errorf("the sink's dead letter reads %q, %q", reason, val)
				}
				real++
				continue
			}
			kind := catalog.TypeInteger
			if _, err := strconv.ParseInt(others[off], 10, 64); err != nil {
				kind = catalog.TypeString
			}
			want := fmt.Sprintf(`field type conflict: field "value" is %s in telemetry/sensor/run=r1/`, kind)
			if p != 0 || m.String != "sensor" || field.String != "value" || !strings.HasPrefix(reason, want) ||
				!strings.Contains(reason, `but measurement "sensor" reads it as float`) || !ts.Equal(t0.Add(time.Duration(off)*time.Second)) {
				t.Errorf("dead letter at offset %d: partition %d, %s.%s, %q at %v", off, p, m.String, field.String, reason, ts)
			}
			if _, dup := got[off]; dup {
				t.Errorf("offset %d is a dead letter twice", off)
			}
			got[off] = val
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if real != 1 || !maps.Equal(got, others) {
			t.Fatalf("filter %+v: dead letters %v and %d of the sink's; want %v and 1", f, got, real, others)
		}
		t.Logf("filter %+v: avg(value) = %v over %d floats; %d values of other types are dead letters, with the sink's 1", f, avg, n, len(got))
	}
}

// A run's query has no dead-letter views, and engines that read files as
// written (replay, compaction) hide nothing, so neither adds them.
func TestQueryMixedTypesDeadLettersOnlyInUnifiedViews(t *testing.T) {
	st, cat, _ := legacyLake(t)
	for _, tc := range []struct {
		f query.Filter
		o query.Options
	}{{query.Filter{Run: "r1"}, query.Options{}}, {query.Filter{NoRaw: true}, query.Options{}}, {query.Filter{}, query.Options{NoHivePartitioning: true}}} {
		eng := openLocal(t, st, cat, tc.f, tc.o)
		deadLetters := tc.f.Run == "" && !tc.f.NoRaw // the sink's own
		for _, v := range eng.Views() {
			if v.TypeConflictLetters > 0 || v.Kind == "deadletter" && !deadLetters {
				t.Errorf("filter %+v options %+v: view %s with %d conflict letters", tc.f, tc.o, v.Name, v.TypeConflictLetters)
			}
		}
		eng.Close()
	}
}
