package bench

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/store"
)

// With --lake and --iceberg-catalog every flush lands in simtel's catalog
// and in the Iceberg tables: the current snapshot of each measurement's
// table holds its share of the samples.
func TestRunSinkBenchIceberg(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := SinkBenchConfig{Samples: 10_000, Flushes: 4, Lake: dir, IcebergCatalog: "sqlite:" + filepath.Join(dir, "iceberg.db")}
	r, err := RunSinkBench(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Flushes != 4 || r.IcebergCommits != 4 || r.IcebergCommitMillis <= 0 || r.Objects != 4*5*4 {
		t.Fatalf("result %+v: want 4 flushes and Iceberg commits, 80 objects", r)
	}
	st, err := store.Open(ctx, "file://"+dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := catalog.New(st).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Entries) != 4 {
		t.Fatalf("%d catalog entries, want 4", len(snap.Entries))
	}
	ice, err := iceberg.Open(ctx, iceberg.Options{Catalog: cfg.IcebergCatalog, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer ice.Close()
	var rows int64
	for _, m := range []string{"reward", "cpu", "mem", "gpu", "loss"} {
		tbl, err := ice.Load(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := tbl.Scan().PlanFiles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			rows += task.File.Count()
		}
	}
	if rows != 10_000 {
		t.Fatalf("the tables' current snapshots hold %d rows, want 10000", rows)
	}
	if _, err := RunSinkBench(ctx, SinkBenchConfig{Samples: 10, IcebergCatalog: cfg.IcebergCatalog}); err == nil {
		t.Fatal("--iceberg-catalog without --lake accepted")
	}
}
