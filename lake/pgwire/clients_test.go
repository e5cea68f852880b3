package pgwire_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/pgwire"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/query/querytest"
)

// needTool finds a client program; without it the test skips, except in
// CI, where scripts/install-deps.sh installs it.
func needTool(t *testing.T, path string, probe ...string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err == nil && len(probe) > 0 {
		err = exec.Command(p, probe...).Run()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not usable (%v): run scripts/install-deps.sh", path, err)
		}
		t.Skipf("%s is not usable (%v): run scripts/install-deps.sh", path, err)
	}
	return p
}

func hostPort(addr string) (string, string) {
	h, p, _ := net.SplitHostPort(addr)
	return h, p
}

// TestPsql runs Debian's psql: \dt lists the measurements as tables, and a
// count and a time-bucketed aggregate over a run give the numbers
// lake/query's engine (simtel lake query) gives.
func TestPsql(t *testing.T) {
	psql := needTool(t, "psql", "--version")
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	host, port := hostPort(addr)
	const count = `SELECT count(*) FROM cpu WHERE run = 'r1'`
	const bucketed = `SELECT date_trunc('minute', time) AS minute, count(*) AS n, avg(usage) AS avg_usage FROM cpu WHERE run = 'r1' GROUP BY 1 ORDER BY 1`
	cmd := exec.Command(psql, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"host="+host+" port="+port+" user=researcher dbname=lake sslmode=disable",
		"-c", `\dt`, "-c", count, "-c", bucketed)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var tables []string
	for len(lines) > 0 && strings.Count(lines[0], "|") == 3 {
		f := strings.Split(lines[0], "|")
		if f[2] != "table" {
			t.Errorf(`\dt line %q: not a table`, lines[0])
		}
		tables = append(tables, f[1])
		lines = lines[1:]
	}
	if want := []string{"cpu", "log", "mem"}; !slices.Equal(tables, want) {
		t.Errorf(`\dt lists %v, want %v`, tables, want)
	}
	wantCount := l.expect(t, query.Filter{Run: "r1"}, count)[0][0].(int64)
	if len(lines) == 0 || lines[0] != strconv.FormatInt(wantCount, 10) {
		t.Fatalf("count: psql printed %q, lake query %d", lines, wantCount)
	}
	lines = lines[1:]
	want := l.expect(t, query.Filter{Run: "r1"}, bucketed)
	if len(lines) != len(want) {
		t.Fatalf("bucketed: psql printed %d rows, lake query %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		f := strings.Split(lines[i], "|")
		avg, _ := strconv.ParseFloat(f[2], 64)
		wantMinute := w[0].(time.Time).UTC().Format("2006-01-02 15:04:05") + "+00"
		if f[0] != wantMinute || f[1] != strconv.FormatInt(w[1].(int64), 10) || !near(avg, w[2].(float64)) {
			t.Errorf("bucket %d: psql %q, lake query %v", i, lines[i], w)
		}
	}
}

// TestPsycopg2Pandas runs Debian's psycopg2 with a parameterised query (it
// sends the simple protocol inside a transaction) and pandas.read_sql.
func TestPsycopg2Pandas(t *testing.T) {
	py := needTool(t, "/usr/bin/python3", "-c", "import psycopg2, pandas")
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	host, port := hostPort(addr)
	from := querytest.Start.Add(30 * time.Second)
	script := `
import json, sys, datetime, warnings
import psycopg2, pandas as pd
warnings.simplefilter("ignore")
conn = psycopg2.connect(host=sys.argv[1], port=int(sys.argv[2]), user="analyst", dbname="lake")
cur = conn.cursor()
cur.execute("SELECT count(*), sum(cores) FROM cpu WHERE run = %s AND time >= %s",
            ("r2", datetime.datetime.fromisoformat(sys.argv[3])))
n, cores = cur.fetchone()
df = pd.read_sql("SELECT host, count(*) AS n, max(time) AS last FROM cpu WHERE run = %(run)s GROUP BY host ORDER BY host",
                 conn, params={"run": "r2"})
print(json.dumps({"n": n, "cores": int(cores), "hosts": df["host"].tolist(), "counts": [int(x) for x in df["n"]],
                  "last_tz": str(df["last"].dt.tz)}))
`
	out, err := exec.Command(py, "-c", script, host, port, from.Format(time.RFC3339)).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var got struct {
		N      int64    `json:"n"`
		Cores  int64    `json:"cores"`
		Hosts  []string `json:"hosts"`
		Counts []int64  `json:"counts"`
		LastTZ string   `json:"last_tz"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := l.expect(t, query.Filter{Run: "r2"}, `SELECT count(*), sum(cores) FROM cpu WHERE time >= TIMESTAMPTZ '`+from.Format(time.RFC3339)+`'`)[0]
	if got.N != want[0].(int64) || want[1] == nil || strconv.FormatInt(got.Cores, 10) != want[1].(interface{ String() string }).String() {
		t.Errorf("psycopg2: count %d, sum %d; lake query %v", got.N, got.Cores, want)
	}
	rows := l.expect(t, query.Filter{Run: "r2"}, `SELECT host, count(*) FROM cpu GROUP BY host ORDER BY host`)
	if len(rows) != len(got.Hosts) {
		t.Fatalf("pandas: %v %v; lake query %v", got.Hosts, got.Counts, rows)
	}
	for i, r := range rows {
		if got.Hosts[i] != r[0].(string) || got.Counts[i] != r[1].(int64) {
			t.Errorf("pandas row %d: %s %d; lake query %v", i, got.Hosts[i], got.Counts[i], r)
		}
	}
	if got.LastTZ != "UTC" && got.LastTZ != "UTC+00:00" {
		t.Errorf("pandas reads time with zone %q, want UTC", got.LastTZ)
	}
}

// grafanaInSearchPath is the condition Grafana's PostgreSQL data source
// puts in its table and column queries: the table's schema is on the
// search path.
const grafanaInSearchPath = `              quote_ident(table_schema) IN (
              SELECT
                CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
              FROM
                generate_series(
                  array_lower(string_to_array(current_setting('search_path'),','),1),
                  array_upper(string_to_array(current_setting('search_path'),','),1)
                ) as i,
                string_to_array(current_setting('search_path'),',') s
              )
`

// TestGrafanaQueries runs the SQL Grafana's PostgreSQL data source sends:
// its query builder's table and column lists, and a time series with
// $__timeFilter expanded, whose time range prunes objects in the catalog.
func TestGrafanaQueries(t *testing.T) {
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	c := connect(t, addr, "grafana", "")
	ctx := context.Background()
	const tables = `SELECT
        CASE WHEN
` + grafanaInSearchPath + `          THEN quote_ident(table_name)
          ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
        END AS "table"
        FROM information_schema.tables
        WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog', '_timescaledb_cache', '_timescaledb_catalog',
                                 '_timescaledb_internal', '_timescaledb_config', 'timescaledb_information', 'timescaledb_experimental')
        ORDER BY 1`
	var names []string
	rows, err := c.Query(ctx, tables)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"cpu", "log", "mem"}; !slices.Equal(names, want) {
		t.Errorf("tables %v, want %v", names, want)
	}
	const columns = `SELECT quote_ident(column_name) AS "column", data_type AS "type"
        FROM information_schema.columns
        WHERE
          CASE WHEN array_length(parse_ident('cpu'),1) = 2
            THEN quote_ident(table_schema) = (parse_ident('cpu'))[1]
              AND quote_ident(table_name) = (parse_ident('cpu'))[2]
            ELSE quote_ident(table_name) = 'cpu'
              AND
` + grafanaInSearchPath + `          END`
	cols := map[string]string{}
	rows, err = c.Query(ctx, columns)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n, typ string
		if err := rows.Scan(&n, &typ); err != nil {
			t.Fatal(err)
		}
		cols[n] = typ
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"time", "usage", "cores", "host", "run"} {
		if cols[want] == "" {
			t.Errorf("column %s missing from %v", want, cols)
		}
	}

	// A panel's time series over 20 seconds of run r1, as Grafana expands
	// $__timeFilter(time) and $__timeGroupAlias(time, 5s).
	from, to := querytest.Start.Add(100*time.Second), querytest.Start.Add(120*time.Second)
	snap, err := l.cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := snap.Objects(catalog.Filter{Run: "r1", Measurement: "cpu"})
	inRange := snap.Objects(catalog.Filter{Run: "r1", Measurement: "cpu", From: from, To: to.Add(time.Nanosecond)})
	if len(inRange) >= len(all) {
		t.Fatalf("test lake: %d of %d objects in the range, want fewer", len(inRange), len(all))
	}
	before := len(l.fetcher.Keys())
	series := `SELECT floor(extract(epoch from time)/5)*5 AS "time", avg(usage) AS "usage" FROM cpu
WHERE time BETWEEN '` + from.Format(time.RFC3339Nano) + `' AND '` + to.Format(time.RFC3339Nano) + `' AND run = 'r1'
GROUP BY 1 ORDER BY 1`
	rows, err = c.Query(ctx, series)
	if err != nil {
		t.Fatal(err)
	}
	points := 0
	for rows.Next() {
		points++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if points < 4 || points > 5 {
		t.Errorf("%d points in 20s at 5s, want 4 or 5", points)
	}
	fetched := l.fetcher.Keys()[before:]
	if len(fetched) != len(inRange) {
		t.Errorf("the time series fetched %d objects, the catalog has %d in its range (of %d)", len(fetched), len(inRange), len(all))
	}
}
