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

// BenchmarkSinkLake runs `simtel bench sink --flushes 10 --lake` on
// 200,000 samples per op, with and without --iceberg-catalog, for
// profiles of the commit path:
//
//	go test -run X -bench SinkLake/iceberg -cpuprofile cpu.out ./bench/
func BenchmarkSinkLake(b *testing.B) {
	for _, withIceberg := range []bool{false, true} {
		name := "plain"
		if withIceberg {
			name = "iceberg"
		}
		b.Run(name, func(b *testing.B) {
			var cpu float64
			for range b.N {
				dir := b.TempDir()
				cfg := SinkBenchConfig{Samples: 200_000, Flushes: 10, Lake: dir}
				if withIceberg {
					cfg.IcebergCatalog = "sqlite:" + filepath.Join(dir, "iceberg.db")
				}
				r, err := RunSinkBench(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				cpu += r.CPUSeconds
			}
			b.ReportMetric(float64(b.N)*200_000/cpu, "samples/CPU-s")
		})
	}
}
