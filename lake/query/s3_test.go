package query_test

import (
	"context"
	"math"
	"testing"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
)

// Against a real S3 server: objects are downloaded into the cache once, and
// only those of the queried run.
func TestQueryS3DownloadsOnlyTheRun(t *testing.T) {
	st, _ := storetest.S3(t)
	ctx := context.Background()
	cat := catalog.New(st)
	l := &querytest.Lake{Store: st, Catalog: cat}
	ss := querytest.GenSamples(11, []string{"r1", "r2", "r3"}, 100, 2)
	if err := l.WriteSamples(ctx, "telemetry", ss, 30); err != nil {
		t.Fatal(err)
	}
	var n int64
	var maxUsage float64
	for _, s := range ss {
		if s.Tags["run"] == "r2" && s.Measurement == "cpu" {
			n++
			maxUsage = math.Max(maxUsage, s.Fields["usage"].(float64))
		}
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2Objects := int64(len(snap.Objects(catalog.Filter{Run: "r2"})))

	cache := store.NewCache(st, t.TempDir(), 0)
	for round := range 2 {
		e, err := query.Open(ctx, st, cat, cache, query.Filter{Run: "r2"})
		if err != nil {
			t.Fatal(err)
		}
		var gotN int64
		var gotMax float64
		if err := e.DB().QueryRowContext(ctx, "SELECT count(*), max(usage) FROM cpu").Scan(&gotN, &gotMax); err != nil {
			t.Fatal(err)
		}
		e.Close()
		if gotN != n || gotMax != maxUsage {
			t.Errorf("round %d: count %d max %v, want %d %v", round, gotN, gotMax, n, maxUsage)
		}
		if st := cache.Stats(); st.Downloads != r2Objects {
			t.Errorf("round %d: %d downloads, want %d (the objects of r2, once)", round, st.Downloads, r2Objects)
		}
	}
}
