package compact_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/compact"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
)

// TestCompactNeverMixesTypes: a field written as an integer by some
// flushes and as a float by others is never merged into one object (DuckDB
// would cast the integers to DOUBLE); the runs of flushes that agree are.
func TestCompactNeverMixesTypes(t *testing.T) {
	ctx := context.Background()
	// Eight flushes of 10 samples: the first four hold "v" as int64, the
	// next four as float64.
	var ss []replay.Sample
	for i := range 80 {
		var v any = int64(i)
		if i >= 40 {
			v = float64(i) + 0.5
		}
		ss = append(ss, replay.Sample{Measurement: "m", Tags: map[string]string{"host": "a", "run": "r"},
			Fields: map[string]any{"v": v}, Time: querytest.Start.Add(-time.Hour + time.Duration(i)*time.Second).UnixNano(), Offset: int64(i)})
	}
	l := newLake(t, ss, 10)
	before := rowSet(t, l)
	res, err := runCompact(ctx, l, compact.Config{MinFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.TypeSplits != 1 || res.Groups != 2 || res.Replaced != 8 {
		t.Fatalf("compaction result %+v, want one split batch merged as two objects of four", res)
	}
	snap := checkCatalog(t, l, 80)
	if n := len(snap.Objects(catalog.Filter{Kind: lake.KindTelemetry})); n != 2 {
		t.Errorf("%d objects after compaction, want 2", n)
	}
	if after := rowSet(t, l); !reflect.DeepEqual(before, after) {
		t.Errorf("rows changed by compaction:\n before %v\n after  %v", before[:3], after[:3])
	}
}

// TestCompactSettleAndPartitions: objects committed less than Settle ago
// and partitions the caller does not own are left alone.
func TestCompactSettleAndPartitions(t *testing.T) {
	ctx := context.Background()
	ss := querytest.GenSamples(5, []string{"r1"}, 200, 2)
	l := newLake(t, ss, 10)
	snap0 := checkCatalog(t, l, int64(len(ss)))
	res, err := runCompact(ctx, l, compact.Config{MinFiles: 2, Settle: time.Hour})
	if err != nil || res.Groups != 0 {
		t.Fatalf("with every object fresh: %+v, %v; want nothing merged", res, err)
	}
	only1 := func(topic string, p int32) bool { return topic == "telemetry" && p == 1 }
	res, err = runCompact(ctx, l, compact.Config{MinFiles: 2, Partitions: only1})
	if err != nil || res.Groups == 0 {
		t.Fatalf("partition 1: %+v, %v; want merges", res, err)
	}
	snap := checkCatalog(t, l, int64(len(ss)))
	for _, cp := range snap.Compactions {
		for _, o := range cp.Objects {
			if _, p, _, _, _ := compact.ParseName(o.Key); p != 1 {
				t.Errorf("merged %s of partition %d; only partition 1 was to be compacted", o.Key, p)
			}
		}
	}
	count := func(s *catalog.Snapshot, part int32) int {
		n := 0
		for _, o := range s.Objects(catalog.Filter{Kind: lake.KindTelemetry}) {
			if _, p, _, _, _ := compact.ParseName(o.Key); p == part {
				n++
			}
		}
		return n
	}
	if count(snap, 0) != count(snap0, 0) {
		t.Errorf("partition 0 went from %d to %d objects", count(snap0, 0), count(snap, 0))
	}
}
