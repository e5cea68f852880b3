package sink

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/retention"
	"github.com/simtel/simtel/lake/store/storetest"
)

// Only the sink holding partition 0 of the first topic runs retention;
// its pass expires the old day, counts it in the metrics and deletes the
// object after the grace.
func TestRetainerPass(t *testing.T) {
	ctx := context.Background()
	st := storetest.Dir(t)
	cat := catalog.New(st)
	now := time.Date(2026, 3, 20, 12, 0, 0, 0, time.UTC)
	var keys []string
	for i, d := range []string{"2026-01-01", "2026-03-19"} {
		day, _ := time.Parse(time.DateOnly, d)
		key := lake.TelemetryKey("cpu", "r1", d, "telemetry", 0, int64(i*10), int64(i*10+9))
		if err := st.Put(ctx, key, strings.NewReader("PAR1"), 4); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		if err := cat.Commit(ctx, catalog.Entry{Topic: "telemetry", Partition: 0, FirstOffset: int64(i * 10), LastOffset: int64(i*10 + 9),
			Objects: []catalog.Object{{Key: key, Kind: lake.KindTelemetry, Measurement: "cpu", Run: "r1", Date: d,
				MinTime: day, MaxTime: day.Add(time.Hour), Rows: 10, Bytes: 4}}}); err != nil {
			t.Fatal(err)
		}
	}
	s := &sinker{cfg: Config{Topics: []string{"telemetry", "jobs"}}, log: slog.New(slog.DiscardHandler), store: st, cat: cat}
	s.mu.parts = map[tp]*partState{{"jobs", 0}: nil, {"telemetry", 1}: nil}
	cfg := RetentionConfig{Interval: time.Hour}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	clock := testutil.NewClock(now)
	r := newRetainer(s, cfg, reg)
	r.now = clock.Now
	if !s.elected() {
		t.Fatal("not elected holding jobs/0, the first topic's partition 0")
	}
	s.mu.parts = map[tp]*partState{{"telemetry", 0}: nil}
	if s.elected() {
		t.Fatal("elected without jobs/0")
	}

	r.pass(ctx)
	if got := promtest.ToFloat64(r.m.partitions); got != 1 {
		t.Errorf("partitions expired = %v, want 1", got)
	}
	if got := promtest.ToFloat64(r.m.rows); got != 10 {
		t.Errorf("rows expired = %v, want 10", got)
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if objs := snap.Objects(catalog.Filter{}); len(objs) != 1 || objs[0].Key != keys[1] {
		t.Errorf("visible after the pass: %v, want only %s", objs, keys[1])
	}
	clock.Advance(retention.DefaultGrace)
	r.pass(ctx)
	if got := promtest.ToFloat64(r.m.deleted); got != 1 {
		t.Errorf("objects deleted = %v, want 1", got)
	}
	if _, err := st.Stat(ctx, keys[0]); err == nil {
		t.Errorf("%s still in the store after the grace", keys[0])
	}
	if got := promtest.ToFloat64(r.m.errors); got != 0 {
		t.Errorf("errors = %v", got)
	}
	// A policy file that cannot be read fails the pass, counted.
	if err := st.Put(ctx, retention.Key(retention.ScopeLake, ""), strings.NewReader("{"), 1); err != nil {
		t.Fatal(err)
	}
	r.pass(ctx)
	if got := promtest.ToFloat64(r.m.errors); got != 1 {
		t.Errorf("errors after a corrupt policy = %v, want 1", got)
	}
}
