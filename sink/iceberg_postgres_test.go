package sink_test

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/lake/catalog"
)

// startPostgres runs a throwaway PostgreSQL server (Debian's postgresql
// package) for the test and returns its URL. Without the server the test
// is skipped, or fails under CI=true.
func startPostgres(t *testing.T) string {
	t.Helper()
	bin := ""
	if p, err := exec.LookPath("initdb"); err == nil {
		bin = filepath.Dir(p)
	} else if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) > 0 {
		bin = filepath.Dir(m[len(m)-1])
	}
	if bin == "" {
		testutil.SkipOrFail(t, "PostgreSQL's initdb not found: install Debian's postgresql (scripts/install-deps.sh)", "")
	}
	dir, err := os.MkdirTemp("", "simtel-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// PostgreSQL refuses to run as root: run it as the postgres user.
	var asUser []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	run := func(name string, args ...string) *exec.Cmd {
		full := append(append(append([]string{}, asUser...), filepath.Join(bin, name)), args...)
		return exec.Command(full[0], full[1:]...)
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-U", "simtel", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := run("postgres", "-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	logf, err := os.Create(filepath.Join(t.TempDir(), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
		logf.Close()
	})
	url := fmt.Sprintf("postgres://simtel@127.0.0.1:%d/postgres?sslmode=disable", port)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err = db.Ping(); err == nil {
			return url
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("postgres did not answer: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPostgresCatalog: the exactly-once test with the catalog in
// PostgreSQL, as sites run it.
func TestIcebergPostgresCatalog(t *testing.T) {
	url := startPostgres(t)
	e := newLakeEnv(t, false)
	e.opts.Catalog = url
	e.reopen()
	first := e.flush(samples(30, 0, false)...)
	second := e.flush(samples(30, 30, true)...)
	if err := e.ice.Commit(e.ctx, []catalog.Entry{first}, typesOf, nil); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if err := e.ice.Commit(e.ctx, []catalog.Entry{first, second}, typesOf, nil); err != nil {
		t.Fatal(err)
	}
	at := e.scan("cpu")
	if at.NumRows() != 60 || len(e.offsets(at)) != 60 {
		t.Fatalf("the table has %d rows, want 60", at.NumRows())
	}
}
