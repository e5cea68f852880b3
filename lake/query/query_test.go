package query_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sample(m, run string, p int32, off int64, at time.Duration, fields map[string]any) replay.Sample {
	return replay.Sample{Measurement: m, Tags: map[string]string{"host": "n1", "run": run, "job": "j" + run},
		Fields: fields, Time: t0.Add(at).UnixNano(), Partition: p, Offset: off}
}

// localLake makes an empty lake in a temporary directory.
func localLake(t *testing.T) (store.Store, *catalog.Catalog, *querytest.Lake) {
	t.Helper()
	st := storetest.Dir(t)
	cat := catalog.New(st)
	return st, cat, &querytest.Lake{Store: st, Catalog: cat}
}

// openLocal opens an engine over the local lake st with its catalog cat.
func openLocal(t *testing.T, st store.Store, cat *catalog.Catalog, f query.Filter, o ...query.Options) *query.Engine {
	t.Helper()
	e, err := query.Open(context.Background(), st, cat, &querytest.LocalFetcher{Store: st}, f, o...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// buildLake writes three flushes: cpu of run r1 with one field, then cpu of
// r1 with a new field (schema evolution) plus mem, and cpu of run r2.
func buildLake(t *testing.T) (store.Store, *catalog.Catalog) {
	t.Helper()
	ctx := context.Background()
	st, cat, l := localLake(t)
	if _, err := l.Flush(ctx, "telemetry", 0, 0, 2, []replay.Sample{
		sample("cpu", "r1", 0, 0, 0, map[string]any{"usage": 1.5}),
		sample("cpu", "r1", 0, 1, time.Second, map[string]any{"usage": 2.5}),
		sample("cpu", "r1", 0, 2, 2*time.Second, map[string]any{"usage": 3.0}),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Flush(ctx, "telemetry", 0, 3, 5, []replay.Sample{
		sample("cpu", "r1", 0, 3, 3*time.Second, map[string]any{"usage": 4.0, "temp": int64(70)}),
		sample("mem", "r1", 0, 4, 3*time.Second, map[string]any{"used": uint64(1 << 40), "ok": true, "note": `say "hi"`}),
		sample("cpu", "r1", 0, 5, 4*time.Second, map[string]any{"usage": 5.0, "temp": int64(71)}),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Flush(ctx, "telemetry", 1, 0, 1, []replay.Sample{
		sample("cpu", "r2", 1, 0, 0, map[string]any{"usage": 100.0}),
		sample("cpu", "r2", 1, 1, time.Second, map[string]any{"usage": 200.0}),
	}); err != nil {
		t.Fatal(err)
	}
	return st, cat
}

func queryAll(t *testing.T, e *query.Engine, q string) [][]any {
	t.Helper()
	return querytest.QueryAll(t, e, q)
}

func TestQuerySchemaEvolutionAndRunPruning(t *testing.T) {
	ctx := context.Background()
	st, cat := buildLake(t)
	f := &querytest.LocalFetcher{Store: st}
	e, err := query.Open(ctx, st, cat, f, query.Filter{Run: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, k := range f.Keys() {
		if strings.Contains(k, "run=r2") {
			t.Errorf("fetched %s of run r2 for a query of run r1", k)
		}
	}
	if got := len(f.Keys()); got != 3 {
		t.Errorf("fetched %d objects, want 3 (cpu twice, mem once): %v", got, f.Keys())
	}
	// With the statement known, only the tables it names are fetched.
	f2 := &querytest.LocalFetcher{Store: st}
	e3, err := query.Open(ctx, st, cat, f2, query.Filter{Run: "r1", SQL: "SELECT count(*) FROM mem"})
	if err != nil {
		t.Fatal(err)
	}
	e3.Close()
	if keys := f2.Keys(); len(keys) != 1 || !strings.HasPrefix(keys[0], "telemetry/mem/run=r1/") {
		t.Errorf("a query of mem fetched %v, want r1's one mem object", keys)
	}
	var names []string
	for _, v := range e.Views() {
		names = append(names, v.Name)
	}
	if want := []string{"cpu", "mem"}; !slices.Equal(names, want) {
		t.Errorf("views %v, want %v", names, want)
	}

	got := queryAll(t, e, `SELECT count(*), sum(usage), count(temp), max(temp), min(run), max(run) FROM cpu`)
	want := []any{int64(5), 16.0, int64(2), int64(71), "r1", "r1"}
	if !slices.Equal(got[0], want) {
		t.Errorf("cpu aggregate: got %v, want %v", got[0], want)
	}
	got = queryAll(t, e, `SELECT used, ok, note, host, _offset, _time_ns FROM mem`)
	want = []any{uint64(1 << 40), true, `say "hi"`, "n1", int64(4), t0.Add(3 * time.Second).UnixNano()}
	if len(got) != 1 || !slices.Equal(got[0], want) {
		t.Errorf("mem: got %v, want %v", got, want)
	}

	// A time range applies to the rows, not only to which objects are read.
	e2 := openLocal(t, st, cat, query.Filter{From: t0.Add(time.Second), To: t0.Add(3 * time.Second)})
	defer e2.Close()
	got = queryAll(t, e2, `SELECT run, count(*) FROM cpu GROUP BY run ORDER BY run`)
	if len(got) != 2 || got[0][1] != int64(2) || got[1][1] != int64(1) {
		t.Errorf("cpu rows in [1s,3s) by run: got %v, want r1:2 r2:1", got)
	}
}

func TestQueryOutputFormats(t *testing.T) {
	ctx := context.Background()
	st, cat := buildLake(t)
	e := openLocal(t, st, cat, query.Filter{})
	defer e.Close()
	const q = `SELECT run, time, usage, temp FROM cpu ORDER BY run, time`
	out := map[string]*bytes.Buffer{}
	for _, format := range query.Formats {
		rows, err := e.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		n, err := query.Write(&b, rows, format)
		rows.Close()
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if n != 7 {
			t.Errorf("%s: wrote %d rows, want 7", format, n)
		}
		out[format] = &b
	}

	recs, err := csv.NewReader(out["csv"]).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 8 || !slices.Equal(recs[0], []string{"run", "time", "usage", "temp"}) {
		t.Fatalf("csv: got %v", recs)
	}
	if want := []string{"r1", "2026-03-01T12:00:03Z", "4", "70"}; !slices.Equal(recs[4], want) {
		t.Errorf("csv row 4: got %v, want %v", recs[4], want)
	}
	if recs[1][3] != "" {
		t.Errorf("csv: a NULL should be an empty field, got %q", recs[1][3])
	}

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out["json"].String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("json line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 7 || lines[3]["temp"] != 70.0 || lines[3]["time"] != "2026-03-01T12:00:03Z" || lines[0]["temp"] != nil || lines[6]["usage"] != 200.0 {
		t.Errorf("json: got %v", lines)
	}

	table := strings.Split(out["table"].String(), "\n")
	if !strings.HasPrefix(table[0], "run ") || !strings.Contains(table[1], "NULL") || table[len(table)-2] != "(7 rows)" {
		t.Errorf("table: got\n%s", out["table"])
	}
	if i, j := strings.Index(table[0], "usage"), strings.Index(table[4], "4"); i != j {
		t.Errorf("table columns not aligned (usage at %d, its value at %d):\n%s", i, j, out["table"])
	}

	r, err := ipc.NewReader(out["arrow"])
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var rows int
	var sum float64
	var temps []int64
	for r.Next() {
		rec := r.RecordBatch()
		if got := rec.Schema().Field(1).Type.String(); got != "timestamp[us, tz=UTC]" {
			t.Errorf("arrow time type %s, want timestamp[us, tz=UTC]", got)
		}
		u := rec.Column(2).(*array.Float64)
		tc := rec.Column(3).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			sum += u.Value(i)
			if tc.IsValid(i) {
				temps = append(temps, tc.Value(i))
			}
		}
		rows += int(rec.NumRows())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if rows != 7 || sum != 316 || !slices.Equal(temps, []int64{70, 71}) {
		t.Errorf("arrow: %d rows, usage sum %v, temps %v; want 7, 316, [70 71]", rows, sum, temps)
	}
}

func TestQueryErrors(t *testing.T) {
	ctx := context.Background()
	st, cat := buildLake(t)
	e := openLocal(t, st, cat, query.Filter{})
	_, err := e.Query(ctx, "SELEC * FROM cpu")
	if err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Errorf("bad SQL: got %v, want DuckDB's syntax error", err)
	}
	_, err = e.Query(ctx, "SELECT nope FROM cpu")
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown column: got %v, want DuckDB's message naming it", err)
	}
	e.Close()

	// Truncate one object: the error names its key.
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := snap.Objects(catalog.Filter{Measurement: "mem"})[0].Key
	p, _ := store.LocalPath(st, bad)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = query.Open(ctx, st, cat, &querytest.LocalFetcher{Store: st}, query.Filter{})
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("truncated object: got %v, want an error naming %s", err, bad)
	}

	// A missing object is named too.
	t.Log(err)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	_, err = query.Open(ctx, st, cat, &querytest.LocalFetcher{Store: st}, query.Filter{})
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing object: got %v, want an error naming %s as missing", err, bad)
	}
	t.Log(err)
}

type slowFetcher struct {
	query.Fetcher
	delay time.Duration
}

func (f slowFetcher) Path(ctx context.Context, key string) (string, error) {
	time.Sleep(f.delay)
	return f.Fetcher.Path(ctx, key)
}

// Fetching that takes over a second shows a progress line; a fast one does
// not.
func TestQueryFetchProgress(t *testing.T) {
	ctx := context.Background()
	st, cat := buildLake(t)
	for _, tc := range []struct {
		delay time.Duration
		want  bool
	}{{0, false}, {350 * time.Millisecond, true}} {
		var progress bytes.Buffer
		e, err := query.Open(ctx, st, cat, slowFetcher{&querytest.LocalFetcher{Store: st}, tc.delay}, query.Filter{},
			query.Options{Progress: &progress, Fetchers: 1})
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
		got := progress.String()
		if shown := strings.Contains(got, "fetching objects into the cache") && strings.Contains(got, "fetched 4/4 objects"); shown != tc.want {
			t.Errorf("fetch delay %v: progress %q, want shown=%v", tc.delay, got, tc.want)
		}
	}
}

func TestQueryRawAndDeadLetterViews(t *testing.T) {
	ctx := context.Background()
	st, cat := buildLake(t)
	l := &querytest.Lake{Store: st, Catalog: cat}
	ts := t0.Add(time.Minute)
	recs := []*kgo.Record{
		{Key: []byte("a"), Value: []byte{0xff, 0}, Partition: 0, Offset: 0, Timestamp: ts, Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}},
		{Value: []byte("x"), Partition: 0, Offset: 1, Timestamp: ts.Add(time.Second)},
	}
	if _, err := l.RawFlush(ctx, "job events", 0, 0, 1, recs); err != nil {
		t.Fatal(err)
	}
	bad := &kgo.Record{Key: []byte("r1/n1"), Value: []byte("garbage"), Partition: 5, Offset: 0, Timestamp: ts}
	if _, err := l.DeadLetterFlush(ctx, "telemetry", 5, 0, 0, []*kgo.Record{bad}, []string{"not line protocol"}); err != nil {
		t.Fatal(err)
	}
	e := openLocal(t, st, cat, query.Filter{})
	defer e.Close()
	got := queryAll(t, e, `SELECT _offset, key, value, len(headers), headers[1].key, timestamp FROM "raw_job events" ORDER BY _offset`)
	if len(got) != 2 || string(got[0][1].([]byte)) != "a" || got[0][3] != int64(1) || got[0][4] != "h" || got[1][1] != nil || !got[0][5].(time.Time).Equal(ts) {
		t.Errorf("raw view: %v", got)
	}
	got = queryAll(t, e, `SELECT reason, _partition FROM deadletter_telemetry`)
	if len(got) != 1 || got[0][0] != "not line protocol" || got[0][1] != int32(5) {
		t.Errorf("dead-letter view: %v", got)
	}
	// A run's query leaves them out.
	e2 := openLocal(t, st, cat, query.Filter{Run: "r1"})
	defer e2.Close()
	for _, v := range e2.Views() {
		if v.Kind != "telemetry" {
			t.Errorf("query of a run has view %s", v.Name)
		}
	}
}

func TestMentions(t *testing.T) {
	for _, tc := range []struct {
		sql, table string
		want       bool
	}{
		{"SELECT * FROM cpu", "cpu", true},
		{`select * from "CPU" join mem using (time)`, "mem", true},
		{`select * from "CPU"`, "cpu", true},
		{"SELECT * FROM cpu2", "cpu", false},
		{"SELECT * FROM my_cpu", "cpu", false},
		{`SELECT * FROM "gpu.util"`, "gpu.util", true},
		{"SELECT 1", "cpu", false},
		{"SELECT * FROM raw_jobs, cpu_x, cpu", "cpu", true},
	} {
		if got := query.Mentions(tc.sql, tc.table); got != tc.want {
			t.Errorf("Mentions(%q, %q) = %v, want %v", tc.sql, tc.table, got, tc.want)
		}
	}
}
