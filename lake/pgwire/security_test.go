package pgwire_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/tlsfiles"
	"github.com/simtel/simtel/lake/pgwire"
)

func usersFile(t *testing.T, lines ...string) *pgwire.Users {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(path, []byte("# lake readers\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := pgwire.LoadUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestScramTLS: users authenticate with SCRAM-SHA-256 over TLS from the
// broker's kind of PEM files; a wrong password, an unknown user and a
// client without a password are refused with 28P01.
func TestScramTLS(t *testing.T) {
	l := newTestLake(t)
	v, err := pgwire.HashPassword("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	ca := testutil.NewCA(t)
	cert := ca.Server(t, "127.0.0.1")
	tlsSrv, err := tlsfiles.NewServer(tlsfiles.Files{Cert: cert.CertFile, Key: cert.KeyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, l, pgwire.Config{Users: usersFile(t, "grafana:"+v), TLS: tlsSrv.Config(tlsfiles.ClientAuthNone)})
	host, port := hostPort(addr)
	ctx := context.Background()
	dsn := func(user, pw string) string {
		return fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=lake sslmode=verify-full sslrootcert=%s", host, port, user, pw, ca.CAFile)
	}
	c, err := pgx.Connect(ctx, dsn("grafana", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int64
	if err := c.QueryRow(ctx, "SELECT count(*) FROM mem WHERE run = 'r1'").Scan(&n); err != nil || n == 0 {
		t.Fatalf("count %d, %v", n, err)
	}
	if !c.PgConn().Conn().RemoteAddr().(*net.TCPAddr).IP.IsLoopback() {
		t.Fatal("not loopback")
	}
	for _, bad := range []struct{ user, pw string }{{"grafana", "wrong"}, {"nobody", "s3cret"}, {"grafana", ""}} {
		_, err := pgx.Connect(ctx, dsn(bad.user, bad.pw))
		if err == nil || (sqlState(err) != "28P01" && !strings.Contains(err.Error(), "password")) {
			t.Errorf("user %q password %q: %v, want refused (28P01)", bad.user, bad.pw, err)
		}
	}
	// Without TLS the password exchange works too (SCRAM never sends it).
	c2, err := pgx.Connect(ctx, strings.Replace(dsn("grafana", "s3cret"), "sslmode=verify-full", "sslmode=disable", 1))
	if err != nil {
		t.Fatal(err)
	}
	c2.Close(ctx)
}

func TestUsersFileErrors(t *testing.T) {
	for _, bad := range []string{"grafana", "grafana:md5abc", "grafana:SCRAM-SHA-256$4096:c2FsdA==$eA==:eA=="} {
		path := filepath.Join(t.TempDir(), "users")
		os.WriteFile(path, []byte(bad+"\n"), 0o600)
		if _, err := pgwire.LoadUsers(path); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v, want an error naming line 1", bad, err)
		}
	}
}

// TestLimits: a client's statement_timeout stops a query with 57014, the
// row cap is an error, unknown and DuckDB settings cannot be SET, and SHOW
// answers what clients ask.
func TestLimits(t *testing.T) {
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{MaxRows: 50, StatementTimeout: time.Minute})
	c := connect(t, addr, "u", "")
	ctx := context.Background()
	if _, err := c.Exec(ctx, "SET statement_timeout = '300ms'"); err != nil {
		t.Fatal(err)
	}
	var f float64
	err := c.QueryRow(ctx, `SELECT sum(a.usage * b.usage * c.usage * d.usage) FROM cpu a, cpu b, cpu c, cpu d WHERE a.run = 'r1'`).Scan(&f)
	if sqlState(err) != "57014" || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("long query: %v, want the statement timeout", err)
	}
	if _, err := c.Exec(ctx, "RESET statement_timeout"); err != nil {
		t.Fatal(err)
	}
	rows, _ := c.Query(ctx, "SELECT * FROM cpu")
	for rows.Next() {
	}
	if err := rows.Err(); sqlState(err) != "54000" {
		t.Errorf("a result over the row cap: %v, want 54000", err)
	}
	var s string
	for q, want := range map[string]string{"SHOW TimeZone": "UTC", "SHOW server_version": "16.0 (simtel lake, DuckDB)",
		"SHOW transaction_read_only": "on", "SELECT current_setting('TimeZone')": ""} {
		if err := c.QueryRow(ctx, q).Scan(&s); err != nil || want != "" && s != want {
			t.Errorf("%s: %q, %v; want %q", q, s, err, want)
		}
	}
	for _, q := range []string{"SET nonsense = 1", "SET threads = 64", "SET TimeZone = 'Europe/Paris'", "SET transaction_read_only = off"} {
		if _, err := c.Exec(ctx, q); err == nil {
			t.Errorf("%s: no error", q)
		}
	}
	if _, err := c.Exec(ctx, "SET application_name = 'dash'; BEGIN; SELECT 1; COMMIT"); err != nil {
		t.Errorf("session statements: %v", err)
	}
}

// TestBadInput: malformed startup packets and messages get an error
// response or a closed connection, never a crash, and the server keeps
// serving.
func TestBadInput(t *testing.T) {
	l := newTestLake(t)
	addr := serve(t, l, pgwire.Config{})
	startup := func(params ...string) []byte {
		b := binary.BigEndian.AppendUint32(make([]byte, 4), 196608)
		for _, p := range params {
			b = append(append(b, p...), 0)
		}
		b = append(b, 0)
		binary.BigEndian.PutUint32(b, uint32(len(b)))
		return b
	}
	msg := func(typ byte, body []byte) []byte {
		b := append([]byte{typ}, binary.BigEndian.AppendUint32(nil, uint32(len(body)+4))...)
		return append(b, body...)
	}
	cases := map[string][]byte{
		"huge startup length":  {0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0},
		"short startup":        {0, 0, 0, 2},
		"bad protocol":         {0, 0, 0, 8, 0, 9, 0, 0},
		"garbage":              []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"huge message":         append(startup("user", "u"), 'Q', 0x7f, 0xff, 0xff, 0xff),
		"negative length":      append(startup("user", "u"), 'Q', 0xff, 0xff, 0xff, 0xff),
		"unknown message":      append(startup("user", "u"), msg('z', []byte("hello"))...),
		"truncated bind":       append(startup("user", "u"), msg('B', []byte{0, 0, 0, 5})...),
		"bind without parse":   append(startup("user", "u"), append(msg('B', []byte{0, 'x', 0, 0, 0, 0, 0, 0, 0}), append(msg('S', nil), msg('X', nil)...)...)...),
		"execute without bind": append(startup("user", "u"), append(msg('E', []byte{'p', 0, 0, 0, 0, 0}), append(msg('S', nil), msg('X', nil)...)...)...),
		"query not terminated": append(startup("user", "u"), msg('Q', []byte("SELECT 1"))...),
	}
	for name, b := range cases {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write(b)
		all, _ := io.ReadAll(nc)
		nc.Close()
		if !strings.Contains(string(all), "SERROR\x00") && !strings.Contains(string(all), "SFATAL\x00") {
			t.Errorf("%s: answer %q has no error response", name, all)
		}
	}
	c := connect(t, addr, "u", "")
	var one int
	if err := c.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the server stopped serving: %v", err)
	}
}

// FuzzProtocol feeds arbitrary bytes after a valid startup packet: the
// server answers or closes, and keeps serving the next client.
func FuzzProtocol(f *testing.F) {
	var seed []byte
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Query{String: "SELECT 1"},
		&pgproto3.Parse{Name: "s", Query: "SELECT $1::int8"},
		&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("7")}},
		&pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{},
		&pgproto3.Sync{},
	} {
		seed, _ = m.Encode(seed)
	}
	f.Add(seed)
	seed = nil
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Query{String: "BEGIN; DECLARE c CURSOR FOR SELECT * FROM cpu; FETCH 2 FROM c; CLOSE c"},
		&pgproto3.Parse{Name: "s", Query: "SELECT host FROM cpu"},
		&pgproto3.Bind{PreparedStatement: "s", DestinationPortal: "p"},
		&pgproto3.Execute{Portal: "p", MaxRows: 1},
		&pgproto3.Execute{Portal: "p", MaxRows: 1},
		&pgproto3.Sync{},
	} {
		seed, _ = m.Encode(seed)
	}
	f.Add(seed)
	f.Add([]byte{'Q', 0, 0, 0, 4})
	f.Add([]byte{'P', 0, 0, 0, 9, 's', 0, 'x', 0, 0, 1})
	l := newTestLake(f)
	srv := pgwire.New(pgwire.Config{Catalog: l.cat, Cache: l.fetcher})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Serve(ctx, ln)
	f.Cleanup(cancel)
	start := binary.BigEndian.AppendUint32(make([]byte, 4), 196608)
	start = append(start, "user\x00fuzz\x00\x00"...)
	binary.BigEndian.PutUint32(start, uint32(len(start)))
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Write(append(append([]byte{}, start...), data...))
		term, _ := (&pgproto3.Terminate{}).Encode(nil)
		nc.Write(term)
		// The end of input: a message cut short ends the connection
		// instead of waiting for the rest.
		nc.(*net.TCPConn).CloseWrite()
		buf := make([]byte, 1<<16)
		for {
			if _, err := nc.Read(buf); err != nil {
				break
			}
		}
	})
}
