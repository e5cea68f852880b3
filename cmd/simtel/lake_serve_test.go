package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/simtel/simtel/internal/testutil"
)

// TestLakeServe: lake serve refuses a non-loopback address without users,
// --pg-hash-password makes a users file line, and a client with that
// password queries the lake while /metrics counts the statements.
func TestLakeServe(t *testing.T) {
	lakeURL := testFileLake(t)

	_, _, err := runLake(t, "serve", "--lake", lakeURL, "--pg-listen", "0.0.0.0:0")
	if err == nil || !strings.Contains(err.Error(), "--pg-users") {
		t.Fatalf("non-loopback without users: %v, want a refusal naming --pg-users", err)
	}

	root := &cobra.Command{Use: "simtel", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newLakeCmd(&globalFlags{logLevel: "info", logFormat: "text"}))
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetIn(strings.NewReader("hunter2\n"))
	root.SetArgs([]string{"lake", "serve", "--pg-hash-password"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("dash:"+strings.TrimSpace(out.String())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	pgAddr, metricsAddr := testutil.FreePort(t), testutil.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	root = &cobra.Command{Use: "simtel", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newLakeCmd(&globalFlags{logLevel: "info", logFormat: "text"}))
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"lake", "serve", "--lake", lakeURL, "--cache-dir", t.TempDir(), "--pg-listen", pgAddr,
		"--pg-users", users, "--metrics-listen", metricsAddr})
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("lake serve: %v", err)
		}
	}()
	host, port, _ := net.SplitHostPort(pgAddr)
	var c *pgx.Conn
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err = pgx.Connect(ctx, fmt.Sprintf("host=%s port=%s user=dash password=hunter2 dbname=lake sslmode=disable", host, port))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var v string
	if err := c.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil || !strings.HasPrefix(v, "16") {
		t.Fatalf("server_version %q, %v", v, err)
	}
	if _, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%s user=dash password=wrong dbname=lake sslmode=disable", host, port)); err == nil {
		t.Error("a wrong password connected")
	}
	wantMetrics(t, metricsAddr, `simtel_lake_pg_queries_total{kind="session"} 1`, "simtel_lake_pg_connections 1", "simtel_lake_pg_auth_failures_total 1")
}

// wantMetrics reads the /metrics of lake serve at addr and reports each of
// wants it lacks.
func wantMetrics(t *testing.T, addr string, wants ...string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range wants {
		if !strings.Contains(string(body), m) {
			t.Errorf("lake serve's metrics lack %s", m)
		}
	}
}
