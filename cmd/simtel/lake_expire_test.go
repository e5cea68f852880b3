package main

import (
	"context"
	"encoding/csv"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/simtel/simtel/lake/catalog"
	lakeiceberg "github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/store"
)

// lake expire and lake retention apply on a lake whose flushes are also
// in Iceberg tables (telemetry.cpu, telemetry.reward, raw.jobs).
func TestLakeExpireAndIcebergRetention(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(ctx, "file://"+dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeTestLake(t, s)
	iceURL := "sqlite:" + filepath.Join(dir, "iceberg.db")
	ice, err := lakeiceberg.Open(ctx, lakeiceberg.Options{Catalog: iceURL, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := catalog.New(s).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Entries { // a snapshot per flush: cpu gets two
		if err := ice.Commit(ctx, []catalog.Entry{e}, func(string) map[string]string { return nil }, nil); err != nil {
			t.Fatal(err)
		}
	}
	ice.Close()
	lakeURL := "file://" + dir

	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--older-than", "7d"}, "give --iceberg-catalog"},
		{[]string{"--iceberg-catalog", iceURL}, "give --older-than"},
		{[]string{"--iceberg-catalog", iceURL, "--older-than", "7x"}, `"7x" is not an age`},
		{[]string{"--iceberg-catalog", iceURL, "--older-than", "0s", "--retain-last", "0"}, "at least 1"},
	} {
		if _, _, err := runLake(t, append([]string{"expire", "--lake", lakeURL}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("expire %v: %v, want an error saying %q", c.args, err, c.err)
		}
	}

	args := []string{"expire", "--lake", lakeURL, "--iceberg-catalog", iceURL, "--older-than", "0s", "--orphan-age", "1ns", "--metadata-keep", "0"}
	out, errOut, err := runLake(t, append(args, "--dry-run", "--format", "csv")...)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("dry run listed %q (%v)", out, err)
	}
	kinds := map[string]int{}
	for _, r := range rows[1:] {
		if r[0] != "telemetry.cpu" {
			t.Errorf("dry run would delete %s of %s; only telemetry.cpu has an old snapshot", r[2], r[0])
		}
		kinds[r[1]]++
	}
	if kinds["manifest-list"] != 1 || kinds["data"] != 0 {
		t.Errorf("dry run would delete %v; want one manifest list and no data file", kinds)
	}
	if !strings.Contains(errOut, "would expire 1 snapshots of 3 tables") || !strings.Contains(errOut, "expire: 1/3 raw.jobs") {
		t.Errorf("dry run said %q", errOut)
	}
	if _, errOut, err = runLake(t, args...); err != nil || !strings.Contains(errOut, "expired 1 snapshots of 3 tables, deleting "+strconv.Itoa(len(rows)-1)+" files") {
		t.Fatalf("expire: %v; said %q", err, errOut)
	}
	if _, errOut, err = runLake(t, append(args, "--dry-run")...); err != nil || !strings.Contains(errOut, "would expire 0 snapshots of 3 tables, deleting 0 files") {
		t.Errorf("dry run after expire: %v; said %q", err, errOut)
	}

	// Retention: refused without the Iceberg catalog, and with it the
	// expired days leave the tables.
	if _, _, err := runLake(t, "retention", "set", "--lake", lakeURL, "--raw", "1d"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runLake(t, "retention", "apply", "--lake", lakeURL, "--grace", "0s"); err == nil || !strings.Contains(err.Error(), "--iceberg-catalog") {
		t.Fatalf("apply without --iceberg-catalog: %v", err)
	}
	_, errOut, err = runLake(t, "retention", "apply", "--lake", lakeURL, "--grace", "0s", "--iceberg-catalog", iceURL)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "expired 4 partitions") || !strings.Contains(errOut, "removed 4 data files from the Iceberg tables") {
		t.Errorf("apply said %q", errOut)
	}
	ice, err = lakeiceberg.Open(ctx, lakeiceberg.Options{Catalog: iceURL, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	defer ice.Close()
	for _, name := range []string{"cpu", "reward"} {
		tbl, err := ice.Load(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if sum := tbl.CurrentSnapshot().Summary.Properties; sum["total-data-files"] != "0" || sum[lakeiceberg.SummaryExpired] == "" {
			t.Errorf("telemetry.%s after retention: summary %v, want no data files and the reason", name, sum)
		}
	}
	tbl, err := ice.LoadRaw(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if n := tbl.CurrentSnapshot().Summary.Properties["total-data-files"]; n != "0" {
		t.Errorf("raw.jobs holds %s data files after retention, want 0", n)
	}
}
