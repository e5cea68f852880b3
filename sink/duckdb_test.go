package sink

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
)

// DuckDB (the lake's query engine) must read telemetry objects with the
// intended types: time as TIMESTAMP WITH TIME ZONE in microseconds,
// unsigned fields as UBIGINT (the whole range), tags as VARCHAR.
func TestEncodeReadByDuckDB(t *testing.T) {
	b := newBuffer("telemetry", 0, true)
	b.add(rec(1, `cpu,host=n1,run=r1 f=1.5,i=-3i,u=18446744073709551615u,b=t,s="x" 1700000000123456789`), time.Now)
	b.add(rec(2, `cpu,host=n2,run=r1 f=2.5 1700000000223456789`), time.Now)
	objs, err := b.encode(&encodeScratch{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, o := range objs {
		p := filepath.Join(dir, filepath.FromSlash(o.key))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, o.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("SET TimeZone = 'UTC'"); err != nil {
		t.Fatal(err)
	}
	q := `SELECT typeof(time), typeof(u), typeof(i), typeof(host), typeof(b), typeof(_time_ns),
	             strftime(time, '%Y-%m-%d %H:%M:%S.%f'), u::VARCHAR, i, host, b, s, f, _time_ns, _offset, date::VARCHAR, run
	      FROM read_parquet('` + dir + `/telemetry/*/*/*/*.parquet', hive_partitioning = true) ORDER BY time LIMIT 1`
	var tt, tu, ti, th, tb, tns, ts, u, host, s, date, run string
	var i, ns, off int64
	var bv bool
	var f float64
	if err := db.QueryRow(q).Scan(&tt, &tu, &ti, &th, &tb, &tns, &ts, &u, &i, &host, &bv, &s, &f, &ns, &off, &date, &run); err != nil {
		t.Fatal(err)
	}
	got := []any{tt, tu, ti, th, tb, tns, ts, u, i, host, bv, s, f, ns, off, date, run}
	want := []any{"TIMESTAMP WITH TIME ZONE", "UBIGINT", "BIGINT", "VARCHAR", "BOOLEAN", "BIGINT",
		"2023-11-14 22:13:20.123456", "18446744073709551615", int64(-3), "n1", true, "x", 1.5, int64(1700000000123456789), int64(1), "2023-11-14", "r1"}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("column %d: got %v, want %v", k, got[k], want[k])
		}
	}
}
