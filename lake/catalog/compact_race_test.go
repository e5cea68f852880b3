package catalog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
)

// TestRacingCompactions: two compactors that merged overlapping sets of
// objects (each from its own snapshot) both committed. Whatever order the
// records carry, every row stays visible exactly once: the older record
// wins and the other is skipped whole.
func TestRacingCompactions(t *testing.T) {
	for _, olderFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("older_is_smaller=%v", olderFirst), func(t *testing.T) {
			ctx := context.Background()
			c, s := fileCatalog(t)
			var orig []catalog.Object
			for i := int64(0); i < 5; i++ {
				e := entry("telemetry", 0, i*10, i*10+9, "r1", "cpu")
				if err := c.Commit(ctx, e); err != nil {
					t.Fatal(err)
				}
				orig = append(orig, e.Objects[0])
			}
			merged := func(objs []catalog.Object) (catalog.Object, []string) {
				o := objs[0]
				o.Key = lake.TelemetryKey("cpu", "r1", o.Date, "telemetry", 0, 0, int64(len(objs))*10-1)
				o.Rows = 0
				var keys []string
				for _, x := range objs {
					o.Rows += x.Rows
					keys = append(keys, x.Key)
				}
				if err := s.Put(ctx, o.Key, strings.NewReader("PAR1"), 4); err != nil {
					t.Fatal(err)
				}
				return o, keys
			}
			small, smallKeys := merged(orig[:4]) // offsets 0-39
			big, bigKeys := merged(orig)         // offsets 0-49
			cpSmall := catalog.Compaction{ID: "00000000000000000002-a", Replaced: smallKeys, Objects: []catalog.Object{small}}
			cpBig := catalog.Compaction{ID: "00000000000000000001-b", Replaced: bigKeys, Objects: []catalog.Object{big}}
			winner, want := big, []string{big.Key}
			if olderFirst {
				cpSmall.ID, cpBig.ID = cpBig.ID, cpSmall.ID
				winner, want = small, []string{small.Key, orig[4].Key}
			}
			// Commit the loser first: the order of writing does not matter,
			// the order of the ids does.
			for _, cp := range []catalog.Compaction{cpBig, cpSmall} {
				if err := c.CommitCompaction(ctx, cp); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := c.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := keys(snap.Objects(catalog.Filter{}))
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("visible objects = %v, want %v", got, want)
			}
			var rows int64
			for _, o := range snap.Objects(catalog.Filter{}) {
				rows += o.Rows
			}
			if rows != 50 {
				t.Errorf("visible rows = %d, want 50 (each row once)", rows)
			}
			if len(snap.Compactions) != 1 || snap.Compactions[0].Objects[0].Key != winner.Key {
				t.Errorf("applied compactions = %+v, want only the one writing %s", snap.Compactions, winner.Key)
			}
			if len(snap.Skipped) != 1 {
				t.Errorf("skipped compactions = %d, want 1", len(snap.Skipped))
			}
		})
	}
}
