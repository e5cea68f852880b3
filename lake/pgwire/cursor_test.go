package pgwire_test

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/simtel/simtel/lake/pgwire"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/query/querytest"
)

// TestPsqlDescribeVersion: psql's \d <table> lists a measurement's columns
// with their types, version() is PostgreSQL 16's form naming simtel, and
// psql's FETCH_COUNT reads a result through a cursor.
func TestPsqlDescribeVersion(t *testing.T) {
	psql := needTool(t, "psql", "--version")
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	host, port := hostPort(addr)
	out, err := exec.Command(psql, "-X", "-v", "ON_ERROR_STOP=1", "host="+host+" port="+port+" user=researcher dbname=lake sslmode=disable",
		"-c", `\d cpu`, "-A", "-t", "-c", "SELECT version()", "-c", `\pset tuples_only off`, "-c", "SELECT version()").CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	e, err := query.Open(context.Background(), l.st, l.cat, &querytest.LocalFetcher{Store: l.st}, query.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var cols []query.Column
	for _, v := range e.Views() {
		if v.Name == "cpu" {
			cols = v.Columns
		}
	}
	if len(cols) == 0 {
		t.Fatal("lake query has no cpu table")
	}
	// -A -t: a line per column, name|type|collation|nullable|default.
	text := string(out)
	var described []string
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Split(line, "|"); len(f) == 5 {
			if f[1] == "" {
				t.Errorf("\\d cpu: column %s has no type", f[0])
			}
			described = append(described, f[0])
		}
	}
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	if !slices.Equal(described, names) {
		t.Errorf("\\d cpu lists the columns %v, lake query %v:\n%s", described, names, text)
	}
	// FETCH_COUNT: psql reads the result through a cursor, 7 rows a FETCH.
	out, err = exec.Command(psql, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-v", "FETCH_COUNT=7",
		"host="+host+" port="+port+" user=researcher dbname=lake sslmode=disable",
		"-c", `SELECT _offset FROM cpu WHERE run = 'r1' ORDER BY _partition, _offset`).CombinedOutput()
	if err != nil {
		t.Fatalf("psql with FETCH_COUNT: %v\n%s", err, out)
	}
	want := l.expect(t, query.Filter{Run: "r1"}, `SELECT _offset FROM cpu ORDER BY _partition, _offset`)
	if got := strings.Fields(string(out)); len(got) != len(want) || len(want) < 8 || got[7] != jsonNumber(want[7][0]) {
		t.Errorf("psql with FETCH_COUNT printed %d rows, lake query %d:\n%s", len(got), len(want), out)
	}
	if !regexp.MustCompile(`(?m)^version\nPostgreSQL 16\.`).MatchString(text) {
		t.Errorf("version()'s column is not named version:\n%s", text)
	}
	if !regexp.MustCompile(`(?m)^PostgreSQL 16\.\d+ on \S+, simtel lake over DuckDB v\S+$`).MatchString(text) {
		t.Errorf("version() printed:\n%s", text)
	}
}

// TestPsycopg2NamedCursor reads a result through psycopg2's named
// (server-side) cursors: DECLARE ... CURSOR, FETCH FORWARD n, CLOSE, in a
// transaction and WITH HOLD, and gets every row lake query gets.
func TestPsycopg2NamedCursor(t *testing.T) {
	py := needTool(t, "/usr/bin/python3", "-c", "import psycopg2")
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	host, port := hostPort(addr)
	script := `
import json, sys
import psycopg2
conn = psycopg2.connect(host=sys.argv[1], port=int(sys.argv[2]), user="analyst", dbname="lake")
cur = conn.cursor(name="big")
cur.itersize = 7
cur.execute("SELECT _partition, _offset FROM cpu WHERE run = %s ORDER BY _partition, _offset", ("r1",))
first = cur.fetchmany(5)
rest = [r for r in cur]
cur.close()
conn.commit()
held = conn.cursor(name="held", withhold=True)
held.execute("SELECT count(*) FROM cpu WHERE run = %s", ("r2",))
conn.commit()
n2 = held.fetchone()[0]
held.close()
plain = conn.cursor()
try:
    plain.execute("FETCH FORWARD 1 FROM big")
    gone = None
except psycopg2.Error as e:
    gone = e.pgcode
conn.rollback()
print(json.dumps({"first": first, "rest": rest, "n2": n2, "gone": gone}))
`
	out, err := exec.Command(py, "-c", script, host, port).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var got struct {
		First, Rest [][2]int64
		N2          int64
		Gone        string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := l.expect(t, query.Filter{Run: "r1"}, `SELECT _partition, _offset FROM cpu ORDER BY _partition, _offset`)
	rows := append(got.First, got.Rest...)
	if len(got.First) != 5 || len(rows) != len(want) {
		t.Fatalf("named cursor: %d then %d rows, lake query %d", len(got.First), len(got.Rest), len(want))
	}
	for i, w := range want {
		if int64(w[0].(int32)) != rows[i][0] || w[1].(int64) != rows[i][1] {
			t.Fatalf("row %d: %v, lake query %v", i, rows[i], w)
		}
	}
	if n := l.expect(t, query.Filter{Run: "r2"}, `SELECT count(*) FROM cpu`)[0][0].(int64); got.N2 != n {
		t.Errorf("WITH HOLD cursor after commit: count %d, lake query %d", got.N2, n)
	}
	if got.Gone != "34000" {
		t.Errorf("a closed cursor's FETCH: SQLSTATE %q, want 34000", got.Gone)
	}
}

// TestExecuteRowLimit drives the extended protocol with pgx's protocol
// package as JDBC's fetchSize does: Execute with a row limit suspends the
// portal (PortalSuspended), the next Execute goes on, within a transaction
// block across Syncs; outside one, Sync closes the portal.
func TestExecuteRowLimit(t *testing.T) {
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(time.Minute))
	fe := pgproto3.NewFrontend(nc, nc)
	// untilReady sends what is queued and returns the messages up to
	// ReadyForQuery, as text.
	untilReady := func() []string {
		t.Helper()
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			msg, err := fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			switch m := msg.(type) {
			case *pgproto3.ReadyForQuery:
				return got
			case *pgproto3.DataRow:
				got = append(got, "row "+string(m.Values[0]))
			case *pgproto3.CommandComplete:
				got = append(got, string(m.CommandTag))
			case *pgproto3.PortalSuspended:
				got = append(got, "suspended")
			case *pgproto3.ErrorResponse:
				got = append(got, "error "+m.Code)
			}
		}
	}
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "jdbc", "database": "lake"}})
	untilReady()

	want := l.expect(t, query.Filter{Run: "r1"}, `SELECT _offset FROM cpu ORDER BY _partition, _offset`)
	const q = `SELECT _offset FROM cpu WHERE run = 'r1' ORDER BY _partition, _offset`
	fe.Send(&pgproto3.Query{String: "BEGIN"})
	untilReady()
	fe.Send(&pgproto3.Parse{Name: "s", Query: q})
	fe.Send(&pgproto3.Bind{PreparedStatement: "s", DestinationPortal: "p"})
	fe.Send(&pgproto3.Execute{Portal: "p", MaxRows: 10})
	fe.Send(&pgproto3.Sync{})
	got := untilReady()
	var rows []string
	for {
		for _, m := range got {
			if strings.HasPrefix(m, "row ") {
				rows = append(rows, strings.TrimPrefix(m, "row "))
			}
		}
		last := got[len(got)-1]
		if last != "suspended" {
			if !strings.HasPrefix(last, "SELECT ") {
				t.Fatalf("an Execute ended with %q", last)
			}
			break
		}
		if n := len(got) - 1; n != 10 {
			t.Fatalf("a suspended Execute of 10 rows sent %d", n)
		}
		fe.Send(&pgproto3.Execute{Portal: "p", MaxRows: 10})
		fe.Send(&pgproto3.Sync{})
		got = untilReady()
	}
	if len(rows) != len(want) || len(want) <= 10 {
		t.Fatalf("%d rows through the suspended portal, lake query %d", len(rows), len(want))
	}
	for i, w := range want {
		if rows[i] != strings.TrimSpace(strings.Trim(jsonNumber(w[0]), `"`)) {
			t.Fatalf("row %d: %s, lake query %v", i, rows[i], w[0])
		}
	}
	fe.Send(&pgproto3.Query{String: "COMMIT"})
	untilReady()

	// Outside a transaction block, Sync ends the portal.
	fe.Send(&pgproto3.Bind{PreparedStatement: "s", DestinationPortal: "p"})
	fe.Send(&pgproto3.Execute{Portal: "p", MaxRows: 3})
	fe.Send(&pgproto3.Sync{})
	if got := untilReady(); got[len(got)-1] != "suspended" {
		t.Fatalf("Execute of 3 rows: %v", got)
	}
	fe.Send(&pgproto3.Execute{Portal: "p", MaxRows: 3})
	fe.Send(&pgproto3.Sync{})
	if got := untilReady(); len(got) != 1 || got[0] != "error 34000" {
		t.Fatalf("Execute of a portal after Sync: %v, want error 34000", got)
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
