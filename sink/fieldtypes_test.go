package sink_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/store"
)

// typedLine is one produced sample of the field-type tests and whether the
// lake must refuse it for a type conflict.
type typedLine struct {
	line     string
	conflict bool
	v        float64 // the value of field v when kept
}

// produceLines writes lines to partition 0 of telemetry and records their
// offsets.
func (e *env) produceLines(lines []typedLine) map[int64]typedLine {
	e.t.Helper()
	cl := e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	var recs []*kgo.Record
	for _, l := range lines {
		recs = append(recs, &kgo.Record{Partition: 0, Key: []byte("r/n1"), Value: []byte(l.line)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		e.t.Fatalf("produce: %v", err)
	}
	out := map[int64]typedLine{}
	for i, r := range res {
		out[r.Record.Offset] = lines[i]
		e.produced[po{0, r.Record.Offset}] = sample{bad: lines[i].conflict}
	}
	return out
}

func TestSinkFieldTypesFile(t *testing.T) { testFieldTypes(t, false) }
func TestSinkFieldTypesS3(t *testing.T)   { testFieldTypes(t, true) }

// testFieldTypes: field v is first a float; later samples send it as an
// integer and as a string, in the same flush as the first sight and in
// later flushes, across a restart of the sink. Field w appears only after
// the restart, first as an integer. Every conflicting sample must be in
// the dead letters with its offset and a type-conflict reason, every other
// one a row, and avg(v) must work both through simtel's query engine and
// through plain DuckDB over the lake's files.
func testFieldTypes(t *testing.T, s3 bool) {
	e := newEnv(t, s3, 1)
	ts := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano()
	n := 0
	line := func(fields string) string {
		n++
		return fmt.Sprintf("gpu,host=n1,run=r %s %d", fields, ts+int64(n)*int64(time.Second))
	}
	all := map[int64]typedLine{}
	add := func(m map[int64]typedLine) {
		for o, l := range m {
			all[o] = l
		}
	}
	args := []string{"--flush-age", "500ms"}
	st := e.store()

	// Flush 1: v is seen first as a float; an integer v in the same flush
	// conflicts.
	p := e.startSink(args...)
	add(e.produceLines([]typedLine{
		{line: line("v=1.5"), v: 1.5},
		{line: line("v=2i"), conflict: true},
		{line: line("v=2.5,u=1i"), v: 2.5},
	}))
	e.waitCommitted(st, 60*time.Second, p)
	// Flush 2: a later flush of the same sink.
	add(e.produceLines([]typedLine{
		{line: line("v=3i"), conflict: true},
		{line: line(`v="three"`), conflict: true},
		{line: line("v=4"), v: 4},
		{line: line("u=2.5"), conflict: true},
	}))
	e.waitCommitted(st, 60*time.Second, p)
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v", err)
	}
	// Flush 3, by a new sink process: it must learn v's type from the lake.
	p = e.startSink(args...)
	add(e.produceLines([]typedLine{
		{line: line(`v="seven"`), conflict: true},
		{line: line("v=7i"), conflict: true},
		{line: line("v=8.25,w=1i"), v: 8.25},
		{line: line("v=9,w=2.5"), conflict: true},
		{line: line("w=3i"), v: math.NaN()},
	}))
	e.waitCommitted(st, 60*time.Second, p)
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v", err)
	}
	flushes, err := st.List(context.Background(), "_catalog/flush/")
	if err != nil || len(flushes) < 3 {
		t.Fatalf("catalog lists %d flushes (%v), want at least 3", len(flushes), err)
	}

	var wantSum float64
	var wantRows, wantV int
	var wantDead []int64
	for o, l := range all {
		switch {
		case l.conflict:
			wantDead = append(wantDead, o)
		case math.IsNaN(l.v):
			wantRows++
		default:
			wantRows++
			wantV++
			wantSum += l.v
		}
	}
	slices.Sort(wantDead)

	ctx := context.Background()
	cat := catalog.New(st)

	// Through simtel lake query's engine.
	cache := store.NewCache(st, t.TempDir(), 1<<30)
	eng, err := query.Open(ctx, st, cat, cache, query.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var rows, nv int
	var avg float64
	if err := eng.DB().QueryRowContext(ctx, `SELECT count(*), count(v), avg(v) FROM gpu`).Scan(&rows, &nv, &avg); err != nil {
		t.Fatalf("avg(v) through the query engine: %v", eng.Explain(err))
	}
	if rows != wantRows || nv != wantV || math.Abs(avg-wantSum/float64(wantV)) > 1e-9 {
		t.Fatalf("query engine: %d rows, %d values of v, avg %v; want %d, %d, %v", rows, nv, avg, wantRows, wantV, wantSum/float64(wantV))
	}
	dead := deadLetters(t, eng.DB(), "deadletter_telemetry")
	checkDead(t, "query engine", dead, wantDead)
	t.Logf("query engine: avg(v) = %v over %d rows; %d dead letters at the conflicting offsets", avg, rows, len(dead))

	// Plain DuckDB over the files, without the catalog or simtel's views.
	var tele, dl []string
	for _, prefix := range []string{"telemetry/gpu/", "deadletter/"} {
		objs, err := st.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			path, err := cache.Path(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			if prefix == "deadletter/" {
				dl = append(dl, path)
			} else {
				tele = append(tele, path)
			}
		}
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := "SELECT count(*), count(v), avg(v) FROM read_parquet(" + query.ReadList(tele) + ", union_by_name=true)"
	if err := db.QueryRowContext(ctx, q).Scan(&rows, &nv, &avg); err != nil {
		t.Fatalf("plain DuckDB avg(v) over %d files: %v", len(tele), err)
	}
	if rows != wantRows || nv != wantV || math.Abs(avg-wantSum/float64(wantV)) > 1e-9 {
		t.Fatalf("plain DuckDB: %d rows, %d values of v, avg %v; want %d, %d, %v", rows, nv, avg, wantRows, wantV, wantSum/float64(wantV))
	}
	var wsum float64
	if err := db.QueryRowContext(ctx, "SELECT sum(w) FROM read_parquet("+query.ReadList(tele)+", union_by_name=true)").Scan(&wsum); err != nil || wsum != 4 {
		t.Fatalf("plain DuckDB sum(w) = %v, %v; want 4 (1i + 3i)", wsum, err)
	}
	if _, err := db.ExecContext(ctx, "CREATE VIEW dl AS SELECT * FROM read_parquet("+query.ReadList(dl)+")"); err != nil {
		t.Fatal(err)
	}
	checkDead(t, "plain DuckDB", deadLetters(t, db, "dl"), wantDead)
	types, err := cat.FieldTypes(ctx, "gpu")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"v": "float", "u": "integer", "w": "integer"}; fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("catalog field types of gpu = %v, want %v", types, want)
	}
}

type deadLetter struct {
	partition int32
	offset    int64
	reason    string
	line      string
}

func deadLetters(t *testing.T, db *sql.DB, view string) []deadLetter {
	t.Helper()
	rows, err := db.Query(`SELECT _partition, _offset, reason, decode(value) AS line FROM ` + query.Ident(view) + ` ORDER BY _offset`)
	if err != nil {
		t.Fatalf("dead letters from %s: %v", view, err)
	}
	defer rows.Close()
	var out []deadLetter
	for rows.Next() {
		var d deadLetter
		if err := rows.Scan(&d.partition, &d.offset, &d.reason, &d.line); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func checkDead(t *testing.T, via string, got []deadLetter, want []int64) {
	t.Helper()
	var offs []int64
	for _, d := range got {
		offs = append(offs, d.offset)
		if d.partition != 0 || !strings.Contains(d.reason, "field type conflict") || !strings.HasPrefix(d.line, "gpu,host=n1,run=r ") {
			t.Errorf("%s: dead letter %+v: want partition 0 and a field type conflict", via, d)
		}
	}
	if !slices.Equal(offs, want) {
		t.Fatalf("%s: dead letters at offsets %v, want %v", via, offs, want)
	}
}
