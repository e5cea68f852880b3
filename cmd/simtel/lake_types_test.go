package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/store"
)

// simtel lake query over a lake whose objects hold a field as a float, an
// integer and a string (written before field types were fixed): avg()
// works over the oldest type, and stderr names the objects read as NULL.
func TestLakeQueryMixedTypes(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := &querytest.Lake{Store: st, Catalog: catalog.New(st)}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := func(off int64, v any) replay.Sample {
		return replay.Sample{Measurement: "cpu", Tags: map[string]string{"host": "n1", "run": "r"}, Fields: map[string]any{"usage": v},
			Time: t0.Add(time.Duration(off) * time.Second).UnixNano(), Partition: 0, Offset: off}
	}
	for _, smp := range []replay.Sample{s(0, 1.0), s(1, int64(7)), s(2, "busy"), s(3, 3.0)} {
		if _, err := l.Flush(ctx, "telemetry", 0, smp.Offset, smp.Offset, []replay.Sample{smp}); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, err := runLake(t, "query", "SELECT count(*) AS n, avg(usage) AS a FROM cpu", "--lake", "file://"+dir, "--format", "csv")
	if err != nil {
		t.Fatalf("lake query: %v\n%s", err, errOut)
	}
	if got := strings.TrimSpace(out); got != "n,a\n4,2" {
		t.Fatalf("lake query printed %q, want n,a / 4,2", got)
	}
	if !strings.Contains(errOut, "warning: cpu.usage reads as float; 2 objects") {
		t.Fatalf("stderr lacks the type warning:\n%s", errOut)
	}
	t.Logf("stderr: %s", strings.TrimSpace(errOut))
}
