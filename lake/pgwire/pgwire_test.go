package pgwire_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/pgwire"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/store"
)

// testLake is a local lake of two runs' cpu, mem and log samples.
type testLake struct {
	dir     string
	st      store.Store
	cat     *catalog.Catalog
	fetcher *querytest.LocalFetcher
}

func newTestLake(t testing.TB) *testLake {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat := catalog.New(st)
	l := &querytest.Lake{Store: st, Catalog: cat}
	if err := l.WriteSamples(ctx, "telemetry", querytest.GenSamples(7, []string{"r1", "r2"}, 400, 2), 100); err != nil {
		t.Fatal(err)
	}
	return &testLake{dir: dir, st: st, cat: cat, fetcher: &querytest.LocalFetcher{Store: st}}
}

// expect runs q with lake/query's engine (what simtel lake query runs).
func (l *testLake) expect(t *testing.T, f query.Filter, q string) [][]any {
	t.Helper()
	e, err := query.Open(context.Background(), l.st, l.cat, &querytest.LocalFetcher{Store: l.st}, f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	return querytest.QueryAll(t, e, q)
}

// serve starts a server over the lake on a loopback port.
func serve(t *testing.T, l *testLake, cfg pgwire.Config) string {
	t.Helper()
	cfg.Catalog, cfg.Cache = l.cat, l.fetcher
	srv := pgwire.New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func connect(t *testing.T, addr, user, password string) *pgx.Conn {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	dsn := fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=lake sslmode=disable", host, port, user, password)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// near compares sums of floats, whose last digits depend on the order
// DuckDB's threads add them in.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestPgxExtendedBinary queries with pgx's extended protocol: parameters
// bound in binary, results in binary for timestamptz, float8, int8, text and
// bool, the same numbers as lake/query's engine, and only the queried run's
// objects are fetched.
func TestPgxExtendedBinary(t *testing.T) {
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	c := connect(t, addr, "grafana", "")
	ctx := context.Background()

	want := l.expect(t, query.Filter{Run: "r1"}, `SELECT count(*), sum(usage), max(time) FROM cpu WHERE run = 'r1'`)
	var n int64
	var sum float64
	var last time.Time
	if err := c.QueryRow(ctx, `SELECT count(*), sum(usage), max(time) FROM cpu WHERE run = $1`, "r1").Scan(&n, &sum, &last); err != nil {
		t.Fatal(err)
	}
	if n != want[0][0].(int64) || !near(sum, want[0][1].(float64)) || !last.Equal(want[0][2].(time.Time)) {
		t.Errorf("count, sum, max = %d, %v, %v; lake query says %v", n, sum, last, want[0])
	}
	for _, k := range l.fetcher.Keys() {
		if !strings.Contains(k, "run=r1/") {
			t.Errorf("a query of run r1 fetched %s", k)
		}
	}

	// Every common type, binary, row by row.
	rows, err := c.Query(ctx, `SELECT time, usage, cores, host, usage > 50 AS hot FROM cpu WHERE run = $1 AND time >= $2 ORDER BY time, _offset LIMIT 5`,
		"r2", querytest.Start)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for rows.Next() {
		var ts time.Time
		var usage float64
		var cores int64
		var host string
		var hot bool
		if err := rows.Scan(&ts, &usage, &cores, &host, &hot); err != nil {
			t.Fatal(err)
		}
		if ts.Before(querytest.Start) || host == "" || hot != (usage > 50) {
			t.Errorf("row %v %v %v %q %v", ts, usage, cores, host, hot)
		}
		for _, fd := range rows.FieldDescriptions() {
			// pgx asks for text as text, whose binary form is the same.
			if fd.Format != pgx.BinaryFormatCode && fd.DataTypeOID != 25 {
				t.Errorf("column %s came in format %d, want binary", fd.Name, fd.Format)
			}
		}
		got++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got != 5 {
		t.Errorf("%d rows, want 5", got)
	}
}

// TestFileEscapes: statements that would read or write files outside the
// lake, or change DuckDB's settings, fail with an SQLSTATE and leave the
// connection usable.
func TestFileEscapes(t *testing.T) {
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	c := connect(t, addr, "u", "")
	ctx := context.Background()
	outside := filepath.Join(t.TempDir(), "x.parquet")
	os.WriteFile(outside, []byte("PAR1"), 0o644)
	written := filepath.Join(t.TempDir(), "out.csv")
	// An object inside the lake: reading it outside its view is allowed
	// only through the view.
	var someKey string
	for _, k := range allKeys(t, l) {
		someKey = k
	}
	inLake, _ := store.LocalPath(l.st, someKey)
	for _, q := range []string{
		`SELECT * FROM read_csv('/etc/passwd')`,
		`SELECT * FROM read_text('/etc/hostname')`,
		`SELECT * FROM read_parquet('` + outside + `')`,
		`SELECT count(*) FROM cpu, read_csv('/etc/passwd') WHERE run = 'r1'`,
		`COPY (SELECT 1) TO '` + written + `'`,
		`COPY (SELECT * FROM cpu WHERE run = 'r1') TO '` + filepath.Join(l.dir, "copy.csv") + `'`,
		`ATTACH '` + filepath.Join(t.TempDir(), "x.db") + `'`,
		`INSTALL httpfs`,
		`LOAD httpfs`,
		`PRAGMA enable_profiling`,
		`SET enable_external_access = true`,
		`SET lock_configuration = false`,
		`SET memory_limit = '100GB'`,
		`CREATE TABLE t AS SELECT 1`,
		`SELECT * FROM glob('/etc/*')`,
		`SELECT * FROM read_parquet('` + inLake + `')`,
		`EXPORT DATABASE '` + t.TempDir() + `'`,
	} {
		_, err := c.Exec(ctx, q)
		if err == nil {
			t.Errorf("%s: no error", q)
			continue
		}
		if sqlState(err) == "" {
			t.Errorf("%s: %v, not an error response", q, err)
		}
		var one int
		if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("after %s the connection is broken: %v", q, err)
		}
	}
	if _, err := os.Stat(written); err == nil {
		t.Errorf("COPY wrote %s", written)
	}
	if _, err := os.Stat(filepath.Join(l.dir, "copy.csv")); err == nil {
		t.Errorf("COPY wrote into the lake")
	}
}

func allKeys(t *testing.T, l *testLake) []string {
	snap, err := l.cat.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range snap.Objects(catalog.Filter{}) {
		keys = append(keys, o.Key)
	}
	return keys
}

// TestCancel: a PostgreSQL cancel request stops a long DuckDB query; the
// statement ends with the cancel error and the connection stays usable.
func TestCancel(t *testing.T) {
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	c := connect(t, addr, "u", "")
	ctx := context.Background()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		var n float64
		done <- c.QueryRow(ctx, `SELECT sum(a.usage * b.usage * c.usage * d.usage) FROM cpu a, cpu b, cpu c, cpu d WHERE a.run = 'r1'`).Scan(&n)
	}()
	time.Sleep(500 * time.Millisecond)
	if err := c.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	canceled := time.Now()
	select {
	case err := <-done:
		if sqlState(err) != "57014" {
			t.Fatalf("query ended with %v, want the cancel error 57014", err)
		}
		t.Logf("stopped %v after the cancel request (%v after it started)", time.Since(canceled), time.Since(start))
	case <-time.After(30 * time.Second):
		t.Fatal("the query did not stop within 30s of the cancel request")
	}
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}

// TestCatalogReload: a run written after a connection's first query shows
// up in its next one (the catalog's listing changed, so it is read again),
// and an unchanged catalog keeps serving the same rows.
func TestCatalogReload(t *testing.T) {
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{CatalogTTL: time.Millisecond})
	c := connect(t, addr, "grafana", "")
	ctx := context.Background()
	count := func() int64 {
		t.Helper()
		var n int64
		if err := c.QueryRow(ctx, `SELECT count(*) FROM cpu`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	time.Sleep(5 * time.Millisecond)
	if again := count(); again != before {
		t.Fatalf("count %d, then %d with no new objects", before, again)
	}
	lk := &querytest.Lake{Store: l.st, Catalog: l.cat}
	if err := lk.WriteSamples(ctx, "live", querytest.GenSamples(8, []string{"r3"}, 200, 1), 100); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	var after, r3 int64
	if err := c.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE run = 'r3') FROM cpu`).Scan(&after, &r3); err != nil {
		t.Fatal(err)
	}
	if after <= before || r3 == 0 || after-before != r3 {
		t.Errorf("after run r3 was written: %d rows (%d of r3), before %d", after, r3, before)
	}
}
