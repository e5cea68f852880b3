package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"maps"
	"strconv"
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
	dir, l := emptyTestLake(t)
	ctx := context.Background()
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

// simtel lake query finds every value a legacy lake holds in another type
// than the one cpu.usage reads as in deadletter_telemetry, at its offset
// with its reason, and the warning says where they are.
func TestLakeQueryMixedTypesDeadLetters(t *testing.T) {
	dir, l := emptyTestLake(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// Flushes of float, integer, string, float and integer values; offsets
	// 2, 3, 5, 6 and 9 hold the values of other types than float.
	flushes := [][]any{{1.0, 2.0}, {int64(7), int64(8), nil}, {"busy", "idle"}, {3.0, nil}, {int64(9)}}
	want := map[string]string{}
	var off int64
	for _, vals := range flushes {
		var ss []replay.Sample
		for _, v := range vals {
			fields := map[string]any{"n": off}
			if v != nil {
				fields["usage"] = v
				if _, ok := v.(float64); !ok {
					want[fmt.Sprint(off)] = fmt.Sprint(v)
				}
			}
			ss = append(ss, replay.Sample{Measurement: "cpu", Tags: map[string]string{"host": "n1", "run": "r"}, Fields: fields,
				Time: t0.Add(time.Duration(off) * time.Second).UnixNano(), Partition: 0, Offset: off})
			off++
		}
		if _, err := l.Flush(ctx, "telemetry", 0, ss[0].Offset, ss[len(ss)-1].Offset, ss); err != nil {
			t.Fatal(err)
		}
	}
	lakeURL := "file://" + dir
	out, errOut, err := runLake(t, "query", "SELECT count(usage) AS n, avg(usage) AS a FROM cpu", "--lake", lakeURL, "--format", "csv")
	if err != nil {
		t.Fatalf("lake query: %v\n%s", err, errOut)
	}
	if got := strings.TrimSpace(out); got != "n,a\n3,2" {
		t.Fatalf("lake query printed %q, want n,a / 3,2", got)
	}
	if !strings.Contains(errOut, "warning: cpu.usage reads as float; 3 objects") || !strings.Contains(errOut, "those values are rows of deadletter_telemetry") {
		t.Fatalf("stderr lacks the type warning naming deadletter_telemetry:\n%s", errOut)
	}
	out, errOut, err = runLake(t, "query", "SELECT _partition, _offset, decode(value) AS v, reason FROM deadletter_telemetry ORDER BY _offset",
		"--lake", lakeURL, "--format", "csv")
	if err != nil {
		t.Fatalf("lake query of the dead letters: %v\n%s", err, errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("dead letters are not CSV (%v):\n%s", err, out)
	}
	got := map[string]string{}
	for _, r := range recs[1:] {
		kind := "integer"
		if _, err := strconv.Atoi(r[2]); err != nil {
			kind = "string"
		}
		if r[0] != "0" || !strings.HasPrefix(r[3], `field type conflict: field "usage" is `+kind+" in telemetry/cpu/run=r/") ||
			!strings.Contains(r[3], `but measurement "cpu" reads it as float`) {
			t.Errorf("dead letter %v", r)
		}
		got[r[1]] = r[2]
	}
	if !maps.Equal(got, want) {
		t.Fatalf("dead letters by offset %v, want %v:\n%s", got, want, out)
	}
	t.Logf("%d values of other types than float are dead letters; first: %v", len(got), recs[1])
}

// emptyTestLake is an empty lake in a temporary directory.
func emptyTestLake(t *testing.T) (string, *querytest.Lake) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return dir, &querytest.Lake{Store: st, Catalog: catalog.New(st)}
}
