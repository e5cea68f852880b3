package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/store/storetest"
)

func TestLakeIcebergCompactAsOfFile(t *testing.T) { testLakeIcebergCompactAsOf(t, false) }
func TestLakeIcebergCompactAsOfS3(t *testing.T)   { testLakeIcebergCompactAsOf(t, true) }

// testLakeIcebergCompactAsOf: a lake whose flushes are in Iceberg tables;
// lake compact refuses it without the catalog and rewrites the table with
// it; lake snapshots lists the appends and the replace; lake query --as-of
// reads the snapshot before the compaction, before the last flush and at
// the first flush's time as they were.
func testLakeIcebergCompactAsOf(t *testing.T, s3 bool) {
	ctx := context.Background()
	dir := t.TempDir()
	st, url, endpoint := storetest.Open(t, s3)
	args := []string{"--cache-dir", t.TempDir(), "--lake", url}
	if endpoint != "" {
		args = append(args, "--s3-endpoint", endpoint)
	}
	catURL := "sqlite:" + filepath.Join(dir, "iceberg.db")
	ice, err := iceberg.Open(ctx, iceberg.Options{Catalog: catURL, Store: st, S3Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	l := &querytest.Lake{Store: st, Catalog: catalog.New(st)}
	types := func(string) map[string]string { return map[string]string{"usage": catalog.TypeFloat} }
	const perFlush, flushes = 20, 6
	for f := range flushes {
		var ss []replay.Sample
		for i := f * perFlush; i < (f+1)*perFlush; i++ {
			ss = append(ss, replay.Sample{Measurement: "cpu", Tags: map[string]string{"host": "n" + strconv.Itoa(i%3), "run": "r1"},
				Fields: map[string]any{"usage": float64(i)}, Time: lakeT0.Add(time.Duration(i) * time.Second).UnixNano(), Offset: int64(i)})
		}
		e, err := l.Flush(ctx, "telemetry", 0, int64(f*perFlush), int64((f+1)*perFlush-1), ss)
		if err != nil {
			t.Fatal(err)
		}
		if err := ice.Commit(ctx, []catalog.Entry{e}, types, nil); err != nil {
			t.Fatal(err)
		}
	}
	ice.Close()
	lake := func(a ...string) (string, string, error) {
		t.Helper()
		return runLake(t, append(a, args...)...)
	}
	if _, _, err := lake("compact", "--min-files", "2"); err == nil || !strings.Contains(err.Error(), "has Iceberg tables") {
		t.Fatalf("lake compact without --iceberg-catalog on an Iceberg lake: %v", err)
	}
	snapshots := func() []iceberg.SnapshotInfo {
		t.Helper()
		out, _, err := lake("snapshots", "cpu", "--iceberg-catalog", catURL, "--format", "json")
		if err != nil {
			t.Fatal(err)
		}
		var s []iceberg.SnapshotInfo
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("lake snapshots: %v in %s", err, out)
		}
		return s
	}
	before := snapshots()
	if len(before) != flushes || !before[flushes-1].Current || before[0].Operation != "append" {
		t.Fatalf("before compaction, lake snapshots lists %+v", before)
	}
	if out, _, err := lake("compact", "--min-files", "2", "--iceberg-catalog", catURL); err != nil || !strings.Contains(out, "merged 6 objects into 1") {
		t.Fatalf("lake compact: %v: %s", err, out)
	}
	after := snapshots()
	if len(after) != flushes+1 || after[flushes].Operation != "replace" || !after[flushes].Current || after[flushes].Summary[iceberg.SummaryCompaction] == "" {
		t.Fatalf("after compaction, lake snapshots lists %+v", after)
	}
	count := func(asOf string) (rows, distinct int) {
		t.Helper()
		a := []string{"query", "SELECT count(*), count(DISTINCT _offset) FROM cpu", "--format", "csv"}
		if asOf != "" {
			a = append(a, "--as-of", asOf, "--iceberg-catalog", catURL)
		}
		out, stderr, err := lake(a...)
		if err != nil {
			t.Fatalf("lake query --as-of %q: %v (%s)", asOf, err, stderr)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		n, d, _ := strings.Cut(lines[len(lines)-1], ",")
		rows, _ = strconv.Atoi(n)
		distinct, _ = strconv.Atoi(d)
		return rows, distinct
	}
	id := func(s iceberg.SnapshotInfo) string { return strconv.FormatInt(s.ID, 10) }
	for _, c := range []struct {
		what, asOf string
		want       int
	}{
		{"now", "", flushes * perFlush},
		{"the current snapshot", id(after[flushes]), flushes * perFlush},
		{"the snapshot before the compaction", id(before[flushes-1]), flushes * perFlush},
		{"the snapshot before the last flush", id(before[flushes-2]), (flushes - 1) * perFlush},
		{"the first flush's time", before[0].Time.Format(time.RFC3339Nano), perFlush},
	} {
		if n, d := count(c.asOf); n != c.want || d != c.want {
			t.Errorf("as of %s: %d rows, %d distinct offsets, want %d", c.what, n, d, c.want)
		}
	}

	empty := "sqlite:" + filepath.Join(dir, "empty.db")
	other, err := iceberg.Open(ctx, iceberg.Options{Catalog: empty, Store: st, S3Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--as-of", id(before[0])}, "give --iceberg-catalog"},
		{[]string{"--as-of", id(before[0]), "--iceberg-catalog", empty}, "no telemetry tables"},
		{[]string{"--as-of", "12345", "--iceberg-catalog", catURL}, "no table of telemetry has snapshot 12345"},
		{[]string{"--as-of", "yesterday", "--iceberg-catalog", catURL}, "neither a snapshot id nor an RFC 3339 time"},
		{[]string{"--iceberg-catalog", catURL}, "--iceberg-catalog is for --as-of"},
	} {
		if _, _, err := lake(append([]string{"query", "SELECT count(*) FROM cpu"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lake query %v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}
