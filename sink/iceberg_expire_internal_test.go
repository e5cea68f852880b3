package sink

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/store"
)

// The sink's expiry pass drops every snapshot older than the retention but
// the newest, deletes their manifests and lists, never a data file the
// catalog names, and reports it in its metrics; the table keeps its rows.
func TestIcebergExpirerPass(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st, err := store.Open(ctx, "file://"+filepath.Join(dir, "lake"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ice, err := iceberg.Open(ctx, iceberg.Options{Catalog: "sqlite:" + filepath.Join(dir, "iceberg.db"), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer ice.Close()
	cat := catalog.New(st)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	const flushes = 5
	for i := range flushes {
		key := lake.TelemetryKey("cpu", "r1", lake.Date(day), "telemetry", 0, int64(i), int64(i))
		if err := st.Put(ctx, key, strings.NewReader("PAR1"), 4); err != nil {
			t.Fatal(err)
		}
		e := catalog.Entry{Topic: "telemetry", Partition: 0, FirstOffset: int64(i), LastOffset: int64(i), Records: 1, Written: day,
			Objects: []catalog.Object{{Key: key, Kind: lake.KindTelemetry, Measurement: "cpu", Run: "r1", Date: lake.Date(day),
				MinTime: day, MaxTime: day, Rows: 1, Bytes: 4, Columns: []string{"value"}}}}
		if err := cat.Commit(ctx, e); err != nil {
			t.Fatal(err)
		}
		types := func(string) map[string]string { return map[string]string{"value": catalog.TypeFloat} }
		if err := ice.Commit(ctx, []catalog.Entry{e}, types, nil); err != nil {
			t.Fatal(err)
		}
	}
	s := &sinker{cfg: Config{Topics: []string{"telemetry"}}, log: slog.New(slog.DiscardHandler), store: st, cat: cat, ice: ice}
	cfg := IcebergExpireConfig{Retention: time.Nanosecond}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Interval != DefaultIcebergExpireInterval || cfg.RetainLast != 1 {
		t.Fatalf("defaults: interval %v, retain last %d", cfg.Interval, cfg.RetainLast)
	}
	x := &icebergExpirer{s: s, cfg: cfg, m: newIcebergExpireMetrics(prometheus.NewRegistry())}
	x.pass(ctx)
	if got := promtest.ToFloat64(x.m.snapshots); got != flushes-1 {
		t.Errorf("snapshots expired = %v, want %d", got, flushes-1)
	}
	if promtest.ToFloat64(x.m.files) == 0 || promtest.ToFloat64(x.m.bytes) == 0 {
		t.Errorf("files deleted = %v, bytes = %v; want the expired manifests and lists", promtest.ToFloat64(x.m.files), promtest.ToFloat64(x.m.bytes))
	}
	if got := promtest.ToFloat64(x.m.errors); got != 0 {
		t.Errorf("errors = %v", got)
	}
	if promtest.ToFloat64(x.m.lastRun) < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last run = %v, want now", promtest.ToFloat64(x.m.lastRun))
	}
	tbl, err := ice.Load(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tbl.Metadata().Snapshots()); n != 1 {
		t.Errorf("%d snapshots left, want 1", n)
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != flushes {
		t.Errorf("current snapshot plans %d data files, want %d", len(tasks), flushes)
	}
	for i := range flushes {
		key := lake.TelemetryKey("cpu", "r1", lake.Date(day), "telemetry", 0, int64(i), int64(i))
		if _, err := st.Stat(ctx, key); err != nil {
			t.Errorf("data file %s: %v", key, err)
		}
	}
	// A bad retention is refused before the sink starts.
	if err := (&IcebergExpireConfig{Retention: -time.Second}).validate(); err == nil {
		t.Error("negative retention accepted")
	}
}
