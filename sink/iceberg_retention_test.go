package sink_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/retention"
	"github.com/simtel/simtel/lake/store"
)

// icebergDays counts the rows of a scan per UTC day of its time column.
func icebergDays(t *testing.T, at arrow.Table) map[string]int64 {
	t.Helper()
	idx := at.Schema().FieldIndices("time")
	if len(idx) != 1 {
		t.Fatalf("no time column in %v", at.Schema())
	}
	unit := at.Schema().Field(idx[0]).Type.(*arrow.TimestampType).Unit
	out := map[string]int64{}
	for _, ch := range at.Column(idx[0]).Data().Chunks() {
		for _, v := range ch.(*array.Timestamp).Values() {
			out[v.ToTime(unit).UTC().Format(time.DateOnly)]++
		}
	}
	return out
}

// queryDays counts the rows of a measurement per day with simtel lake
// query's engine (DuckDB over simtel's catalog).
func queryDays(t *testing.T, e *lakeEnv, measurement string) map[string]int64 {
	t.Helper()
	eng, err := query.Open(e.ctx, e.st, e.cat, store.NewCache(e.st, t.TempDir(), 0), query.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	out := map[string]int64{}
	rows, err := eng.Query(e.ctx, "SELECT strftime(make_timestamp(_time_ns // 1000), '%Y-%m-%d') AS d, count(*) FROM "+query.Ident(measurement)+" GROUP BY d")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var d string
		var n int64
		if err := rows.Scan(&d, &n); err != nil {
			t.Fatal(err)
		}
		out[d] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func snapshotCount(t *testing.T, e *lakeEnv, name string) int {
	t.Helper()
	tbl, err := e.ice.Load(e.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return len(tbl.Metadata().Snapshots())
}

// Retention on a lake with Iceberg tables removes the expired days from
// the table in one snapshot, in the pass that records the expiration;
// iceberg-go's scan and lake query then agree on the rows per day. lake
// expire then drops the old snapshots and their files, and the flushes
// they carried are not added again by a reconcile. On a local directory
// and on a real S3 server.
func TestIcebergRetentionAndExpire(t *testing.T)   { testIcebergRetentionAndExpire(t, false) }
func TestIcebergRetentionAndExpireS3(t *testing.T) { testIcebergRetentionAndExpire(t, true) }

func testIcebergRetentionAndExpire(t *testing.T, s3 bool) {
	e := newLakeEnv(t, s3)
	ctx := e.ctx
	// 100 samples on 2026-11-30 and 100 on 2026-12-01, two runs.
	var entries []catalog.Entry
	for i := range 4 {
		entries = append(entries, e.flush(samples(50, 50*i, false)...))
	}
	if err := e.ice.Commit(ctx, entries, typesOf, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"2026-11-30": 100, "2026-12-01": 100}
	if got := icebergDays(t, e.scan("cpu")); !equalDays(got, want) {
		t.Fatalf("iceberg rows per day before retention: %v, want %v", got, want)
	}
	if got := queryDays(t, e, "cpu"); !equalDays(got, want) {
		t.Fatalf("lake query rows per day before retention: %v, want %v", got, want)
	}

	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	if _, err := retention.Set(ctx, e.st, retention.ScopeLake, "", map[retention.Tier]string{retention.TierRaw: "1d"}, now); err != nil {
		t.Fatal(err)
	}
	cfg := retention.Config{Now: func() time.Time { return now }}
	if _, err := retention.Apply(ctx, e.cat, cfg); err == nil || !strings.Contains(err.Error(), "--iceberg-catalog") {
		t.Fatalf("apply without the Iceberg catalog: %v, want a refusal naming --iceberg-catalog", err)
	}
	before := snapshotCount(t, e, "cpu")
	cfg.Iceberg = e.ice
	res, err := retention.Apply(ctx, e.cat, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 100 || res.IcebergFiles == 0 {
		t.Fatalf("apply expired %d rows, removed %d Iceberg files; want 100 rows and some files", res.Rows, res.IcebergFiles)
	}
	if n := snapshotCount(t, e, "cpu"); n != before+1 {
		t.Errorf("retention made %d snapshots of telemetry.cpu, want 1", n-before)
	}
	want = map[string]int64{"2026-12-01": 100}
	if got := icebergDays(t, e.scan("cpu")); !equalDays(got, want) {
		t.Errorf("iceberg rows per day after retention: %v, want %v", got, want)
	}
	if got := queryDays(t, e, "cpu"); !equalDays(got, want) {
		t.Errorf("lake query rows per day after retention: %v, want %v", got, want)
	}

	// The grace passes: the pass that deletes the objects finds nothing
	// left in the tables, and the current snapshot reads without them.
	cfg.Grace = -1
	res, err = retention.Apply(ctx, e.cat, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted == 0 || res.IcebergFiles != 0 {
		t.Errorf("second apply deleted %d objects and removed %d Iceberg files; want some objects, no files", res.Deleted, res.IcebergFiles)
	}
	if got := icebergDays(t, e.scan("cpu")); !equalDays(got, want) {
		t.Errorf("iceberg rows per day after the objects were deleted: %v, want %v", got, want)
	}

	// lake expire: a dry run changes nothing, the real one keeps one
	// snapshot and the rows.
	snap, err := e.cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta := func() int {
		objs, err := e.st.List(ctx, "_iceberg/telemetry/cpu/metadata/")
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}
	opts := iceberg.ExpireOptions{RetainLast: 1, MetadataKeep: -1, OrphanAge: time.Nanosecond, Protected: iceberg.CatalogKeys(snap), DryRun: true}
	files := meta()
	dry, err := e.ice.Expire(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if dry.Snapshots == 0 || dry.Files == 0 || dry.Bytes == 0 || meta() != files || snapshotCount(t, e, "cpu") == 1 {
		t.Fatalf("dry run: %d snapshots, %d files, %d bytes; %d metadata files left of %d", dry.Snapshots, dry.Files, dry.Bytes, meta(), files)
	}
	opts.DryRun = false
	res2, err := e.ice.Expire(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Files != dry.Files || res2.Snapshots != dry.Snapshots {
		t.Errorf("expire removed %d snapshots and %d files, the dry run said %d and %d", res2.Snapshots, res2.Files, dry.Snapshots, dry.Files)
	}
	for _, te := range res2.Tables {
		for _, f := range te.Files {
			if f.Kind == "data" {
				t.Errorf("expire deleted data file %s, which simtel's catalog names", f.Path)
			}
		}
	}
	e.reopen()
	if n := snapshotCount(t, e, "cpu"); n != 1 {
		t.Errorf("%d snapshots after expire, want 1", n)
	}
	if got := meta(); got >= files {
		t.Errorf("%d metadata files after expire, %d before", got, files)
	}
	if got := icebergDays(t, e.scan("cpu")); !equalDays(got, want) {
		t.Errorf("iceberg rows per day after expire: %v, want %v", got, want)
	}
	// The expired snapshots carried the ranges of every flush: a
	// reconcile adds none of them again.
	if err := e.reconcile(); err != nil {
		t.Fatal(err)
	}
	if n := snapshotCount(t, e, "cpu"); n != 1 {
		t.Errorf("reconcile after expire committed %d snapshots, want none", n-1)
	}
	e.offsets(e.scan("cpu"))
}

func equalDays(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
