package sink_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/sink"
)

// syntheticEntry is a flush of partition p at offset off with one object
// per measurement: what a commit costs does not depend on the objects'
// contents, which Commit does not read.
func syntheticEntry(p int32, off int64, measurements int, day time.Time) catalog.Entry {
	e := catalog.Entry{Topic: "telemetry", Partition: p, FirstOffset: off, LastOffset: off, Records: int64(measurements), Written: day}
	for m := range measurements {
		name := "m" + strconv.Itoa(m)
		e.Objects = append(e.Objects, catalog.Object{
			Key:  lake.TelemetryKey(name, "r1", lake.Date(day), "telemetry", p, off, off),
			Kind: lake.KindTelemetry, Measurement: name, Run: "r1", Date: lake.Date(day),
			MinTime: day, MaxTime: day, Rows: 100, Bytes: 4096, Columns: []string{"value"},
		})
	}
	return e
}

func floatTypes(string) map[string]string { return map[string]string{"value": catalog.TypeFloat} }

// BenchmarkIcebergCommit is one flush committed to one table (SQLite
// catalog, local directory): ns/op is the commit latency, commits/s its
// inverse. Each commit rewrites the table's metadata file, which lists
// every snapshot, so the latency grows with the table's history: -benchtime
// sets how long that history gets.
func BenchmarkIcebergCommit(b *testing.B) {
	dir := b.TempDir()
	e := benchLake(b, dir)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b.ResetTimer()
	for i := range b.N {
		if err := e.Commit(b.Context(), []catalog.Entry{syntheticEntry(0, int64(i), 1, day)}, floatTypes, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

func benchLake(tb testing.TB, dir string) *iceberg.Lake {
	tb.Helper()
	st, err := store.Open(tb.Context(), "file://"+filepath.Join(dir, "lake"), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	ice, err := iceberg.Open(tb.Context(), iceberg.Options{Catalog: "sqlite:" + filepath.Join(dir, "iceberg.db"), Store: st})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ice.Close() })
	return ice
}

// TestIcebergMetadataDay simulates a sink flushing every 10 s to
// SIMTEL_ICEBERG_DAY_TABLES measurements (default 10) from
// SIMTEL_ICEBERG_DAY_PARTITIONS partitions (default 1; their flushes of
// an interval are one commit per table, as the sink batches them) for
// SIMTEL_ICEBERG_DAY_COMMITS flushes (default 1080: three hours), expiring
// as the sink does by default: every SIMTEL_ICEBERG_DAY_EXPIRE_EVERY
// flushes (default 60: 10 minutes; 0: never) it keeps each table's
// SIMTEL_ICEBERG_DAY_RETAIN newest snapshots (default 360: an hour; the
// count stands for the age, as the simulation runs faster than its
// clock). It prints the catalog's and the tables' metadata bytes and the
// commit latency every SIMTEL_ICEBERG_DAY_REPORT_EVERY flushes (default 360), and the bytes after a final expiry
// that keeps the newest snapshot. Off unless SIMTEL_ICEBERG_DAY is set:
//
//	SIMTEL_ICEBERG_DAY=1 go test -count=1 -run TestIcebergMetadataDay -v -timeout 60m ./sink/
func TestIcebergMetadataDay(t *testing.T) {
	if os.Getenv("SIMTEL_ICEBERG_DAY") == "" {
		t.Skip("set SIMTEL_ICEBERG_DAY=1 to run the simulated day")
	}
	tables, commits := envInt(t, "SIMTEL_ICEBERG_DAY_TABLES", 10), envInt(t, "SIMTEL_ICEBERG_DAY_COMMITS", 1080)
	every, retain := envInt(t, "SIMTEL_ICEBERG_DAY_EXPIRE_EVERY", 60), envInt(t, "SIMTEL_ICEBERG_DAY_RETAIN", 360)
	parts := max(envInt(t, "SIMTEL_ICEBERG_DAY_PARTITIONS", 1), 1)
	report := max(envInt(t, "SIMTEL_ICEBERG_DAY_REPORT_EVERY", 360), 1)
	dir := t.TempDir()
	ice := benchLake(t, dir)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	protect := func(string) bool { return true } // the synthetic data files are not there
	start := time.Now()
	var window time.Duration // commit time since the last report
	for i := range commits {
		t0 := time.Now()
		var batch []catalog.Entry
		for p := range parts {
			batch = append(batch, syntheticEntry(int32(p), int64(i), tables, day.Add(time.Duration(i)*10*time.Second)))
		}
		if err := ice.Commit(t.Context(), batch, floatTypes, nil); err != nil {
			t.Fatal(err)
		}
		window += time.Since(t0)
		if every > 0 && (i+1)%every == 0 {
			if _, err := ice.Expire(t.Context(), iceberg.ExpireOptions{RetainLast: retain, Protected: protect}); err != nil {
				t.Fatal(err)
			}
		}
		if (i+1)%report == 0 || i+1 == commits {
			db, meta, files := dirBytes(t, dir)
			n := (i % report) + 1
			t.Logf("after %5d flushes (%5.1f h): catalog %d bytes, metadata %d bytes in %d files (%.0f bytes per table); commit latency %v per table (%.1f table commits/s)",
				i+1, float64(i+1)/360, db, meta, files, float64(meta)/float64(tables),
				(window / time.Duration(n*tables)).Round(time.Microsecond), float64(n*tables)/window.Seconds())
			window = 0
		}
	}
	t.Logf("%d tables × %d commits of %d partitions' flushes (expiry every %d keeping %d) in %v", tables, commits, parts, every, retain, time.Since(start).Round(time.Millisecond))
	res, err := ice.Expire(t.Context(), iceberg.ExpireOptions{RetainLast: 1, OrphanAge: time.Nanosecond, Protected: protect})
	if err != nil {
		t.Fatal(err)
	}
	db, meta, files := dirBytes(t, dir)
	t.Logf("final expire keeping 1: %d snapshots, %d files, %d bytes deleted", res.Snapshots, res.Files, res.Bytes)
	t.Logf("after it: catalog %d bytes, metadata %d bytes in %d files (%.0f bytes per table)", db, meta, files, float64(meta)/float64(tables))
}

func envInt(t *testing.T, name string, def int) int {
	if s := os.Getenv(name); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			t.Fatalf("%s=%q: want a number, 0 or more", name, s)
		}
		return n
	}
	return def
}

// dirBytes sums the catalog database files (iceberg.db*) and the tables'
// metadata (lake/_iceberg) under dir.
func dirBytes(t *testing.T, dir string) (db, meta int64, files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case filepath.Dir(rel) == "." && len(rel) >= 10 && rel[:10] == "iceberg.db":
			db += fi.Size()
		case len(rel) > 13 && rel[:13] == "lake/_iceberg":
			meta += fi.Size()
			files++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return db, meta, files
}

// TestIcebergSinkCPU encodes SIMTEL_ICEBERG_CPU_SAMPLES samples (default
// 1M; 5 measurements, 4 runs) in flushes of 50k, writes them to a local
// lake and simtel's catalog as the sink does, and once more also commits
// every flush to the Iceberg tables: samples per CPU-second (getrusage)
// of each. Off unless SIMTEL_ICEBERG_CPU is set:
//
//	SIMTEL_ICEBERG_CPU=1 go test -count=1 -run TestIcebergSinkCPU -v ./sink/
func TestIcebergSinkCPU(t *testing.T) {
	if os.Getenv("SIMTEL_ICEBERG_CPU") == "" {
		t.Skip("set SIMTEL_ICEBERG_CPU=1 to measure")
	}
	n := envInt(t, "SIMTEL_ICEBERG_CPU_SAMPLES", 1_000_000)
	lines := make([][]byte, n)
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range lines {
		lines[i] = fmt.Appendf(nil, "m%d,host=n%d,run=r%d,job=j1 value=%d.5,count=%di,ok=true %d", i%5, i%32, i%4, i, i, t0+int64(i)*int64(time.Millisecond))
	}
	for _, withIceberg := range []bool{false, true, false, true} {
		e := newLakeEnv(t, false)
		const flush = 50_000
		cpu0 := cpuTime(t)
		for from := 0; from < n; from += flush {
			enc := sink.NewEncoder("telemetry", 0, true)
			to := min(from+flush, n)
			for i := from; i < to; i++ {
				enc.Add(&sink.Record{Offset: int64(i), Timestamp: time.Unix(0, t0), Value: lines[i]})
			}
			objs, err := enc.Encode()
			if err != nil {
				t.Fatal(err)
			}
			entry := e.store(catalog.Entry{Topic: "telemetry", Partition: 0, FirstOffset: int64(from), LastOffset: int64(to - 1), Records: int64(to - from)}, objs)
			if withIceberg {
				types := func(string) map[string]string {
					return map[string]string{"value": catalog.TypeFloat, "count": catalog.TypeInteger, "ok": catalog.TypeBoolean}
				}
				if err := e.ice.Commit(e.ctx, []catalog.Entry{entry}, types, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		cpu := cpuTime(t) - cpu0
		t.Logf("iceberg=%v: %d samples in %d flushes, %.2f CPU s, %.0f samples per CPU-second", withIceberg, n, (n+flush-1)/flush, cpu.Seconds(), float64(n)/cpu.Seconds())
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
