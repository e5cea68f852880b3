package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
)

var lakeT0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// testFileLake writes the test lake (writeTestLake) into a new directory
// and returns its URL.
func testFileLake(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := store.Open(context.Background(), "file://"+dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeTestLake(t, s)
	return "file://" + dir
}

// writeTestLake commits flushes of two runs and a raw topic through the
// catalog API, as the sink does, and marks run r1 completed.
func writeTestLake(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	c := catalog.New(s)
	obj := func(m, run string, p int32, first, last int64) catalog.Object {
		min, max := lakeT0.Add(time.Duration(first)*time.Second), lakeT0.Add(time.Duration(last)*time.Second)
		key := lake.TelemetryKey(m, run, lake.Date(min), "telemetry", p, first, last)
		data := []byte("PAR1 not really parquet PAR1")
		if err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		return catalog.Object{Key: key, Kind: lake.KindTelemetry, Measurement: m, Run: run, Date: lake.Date(min),
			MinTime: min, MaxTime: max, Rows: last - first + 1, Bytes: int64(len(data))}
	}
	entries := []catalog.Entry{
		{Topic: "telemetry", Partition: 0, FirstOffset: 0, LastOffset: 9, Objects: []catalog.Object{obj("cpu", "r1", 0, 0, 9), obj("reward", "r1", 0, 0, 9)}},
		{Topic: "telemetry", Partition: 1, FirstOffset: 0, LastOffset: 99, Objects: []catalog.Object{obj("cpu", "r2", 1, 0, 99)}},
		{Topic: "jobs", Partition: 0, FirstOffset: 0, LastOffset: 1, Objects: []catalog.Object{{
			Key: lake.RawKey("jobs", "2026-11-29", 0, 0, 1), Kind: lake.KindRaw, Date: "2026-11-29", MinTime: lakeT0, MaxTime: lakeT0, Rows: 2, Bytes: 10}}},
	}
	for _, e := range entries {
		if err := c.Commit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.MarkRun(ctx, catalog.RunState{Run: "r1", State: "completed", Ended: lakeT0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
}

// runLake runs `simtel lake args...` in process under a root that applies
// SIMTEL_* like the real one.
func runLake(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := &cobra.Command{Use: "simtel", SilenceUsage: true, SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) }}
	root.AddCommand(newLakeCmd(&globalFlags{logLevel: "info", logFormat: "text"}))
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"lake"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestLakeRunsAndLs(t *testing.T) {
	lakeURL := testFileLake(t)

	out, _, err := runLake(t, "runs", "--lake", lakeURL, "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("runs --format csv is not CSV: %v\n%s", err, out)
	}
	want := [][]string{
		{"run", "state", "from", "to", "measurements", "rows", "objects", "bytes"},
		{"r1", "completed", "2026-11-29T12:00:00.000Z", "2026-11-29T12:00:09.000Z", "cpu,reward", "20", "2", "56"},
		{"r2", "open", "2026-11-29T12:00:00.000Z", "2026-11-29T12:01:39.000Z", "cpu", "100", "1", "28"},
	}
	if got, w := jsonString(rows), jsonString(want); got != w {
		t.Errorf("lake runs --format csv:\n got %s\nwant %s", got, w)
	}

	out, _, err = runLake(t, "runs", "--lake", lakeURL)
	if err != nil || !strings.HasPrefix(out, "RUN ") || !strings.Contains(out, "56 B") {
		t.Errorf("lake runs (table) = %q, %v", out, err)
	}

	t.Setenv("SIMTEL_LAKE", lakeURL) // every flag reads SIMTEL_<FLAG>
	out, _, err = runLake(t, "ls", "--run", "r1", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var objs []catalog.Object
	if err := json.Unmarshal([]byte(out), &objs); err != nil || len(objs) != 2 || objs[0].Measurement != "cpu" {
		t.Errorf("lake ls --run r1 --format json = %s (%v), want 2 objects", out, err)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"ls", "--kind", "raw"}, 1},
		{[]string{"ls", "--topic", "telemetry"}, 3},
		{[]string{"ls", "--measurement", "cpu"}, 2},
		{[]string{"ls", "--measurement", "cpu", "--from", "2026-11-29T12:00:10Z"}, 1},
		{[]string{"ls", "--run", "nope"}, 0},
	} {
		out, _, err := runLake(t, append(tc.args, "--format", "json")...)
		var objs []catalog.Object
		if err == nil {
			err = json.Unmarshal([]byte(out), &objs)
		}
		if err != nil || len(objs) != tc.want {
			t.Errorf("lake %v: %d objects (%v), want %d", tc.args, len(objs), err, tc.want)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", "--kind", "bogus"}, `--kind "bogus" is not telemetry, raw or deadletter`},
		{[]string{"runs", "--format", "xml"}, `--format "xml" is not table, csv or json`},
		{[]string{"ls", "--from", "yesterday"}, `--from "yesterday" is not a time`},
		{[]string{"runs", "--lake", "ftp://x/y"}, `scheme "ftp" is not supported`},
	} {
		_, _, err := runLake(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lake %v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}

	// A lake directory that does not exist is an error, not an empty lake.
	if _, _, err := runLake(t, "runs", "--lake", lakeURL+"/nope"); err == nil || !strings.Contains(err.Error(), "no lake at "+lakeURL+"/nope") {
		t.Errorf("runs of a missing directory: %v, want 'no lake at'", err)
	}
	// An empty lake lists nothing rather than failing.
	out, _, err = runLake(t, "runs", "--lake", "file://"+t.TempDir(), "--format", "json")
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("runs of an empty lake = %q, %v; want []", out, err)
	}
}

func TestLakeRunsS3(t *testing.T) {
	s, srv := storetest.S3(t)
	writeTestLake(t, s)
	args := []string{"--lake", srv.URL, "--s3-endpoint", srv.Endpoint, "--cache-dir", t.TempDir(), "--format", "json"}
	out, _, err := runLake(t, append([]string{"runs"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var runs []catalog.RunInfo
	if err := json.Unmarshal([]byte(out), &runs); err != nil || len(runs) != 2 || runs[0].Run != "r1" || runs[0].State != "completed" {
		t.Errorf("lake runs on S3 = %s (%v)", out, err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	if _, _, err := runLake(t, append([]string{"runs"}, args...)...); err == nil || !strings.Contains(err.Error(), "access denied by "+srv.Endpoint) {
		t.Errorf("wrong secret: %v, want access denied", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.Secret)
	srv.Stop()
	if _, _, err := runLake(t, append([]string{"ls"}, args...)...); err == nil || !strings.Contains(err.Error(), "cannot reach S3 endpoint "+srv.Endpoint) {
		t.Errorf("stopped server: %v, want cannot reach", err)
	}
}

// TestLakeBinary runs the real binary, as a user would.
func TestLakeBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the simtel binary")
	}
	cmd := exec.Command(testutil.Binary(t), "lake", "runs", "--lake", testFileLake(t), "--format", "csv")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "r1,completed,") {
		t.Errorf("simtel lake runs: %v\n%s", err, out)
	}
	cmd = exec.Command(testutil.Binary(t), "lake", "ls", "--lake", "s3://b/p", "--s3-endpoint", "http://"+testutil.FreePort(t))
	cmd.Env = append(cmd.Environ(), "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y", "AWS_EC2_METADATA_DISABLED=true")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot reach S3 endpoint") {
		t.Errorf("simtel lake ls against nothing: %v\n%s", err, out)
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
