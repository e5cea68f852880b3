package catalog_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/simtel/simtel/lake/catalog"
)

// An expiration hides exactly its keys, also from a snapshot loaded after
// it was marked deleted; bad records are refused.
func TestExpirationHidesKeys(t *testing.T) {
	ctx := context.Background()
	c, _ := fileCatalog(t)
	e1 := entry("telemetry", 0, 0, 9, "r1", "cpu", "mem")
	e2 := entry("telemetry", 0, 10, 19, "r2", "cpu")
	for _, e := range []catalog.Entry{e1, e2} {
		if err := c.Commit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	gone := []string{e1.Objects[0].Key, e2.Objects[0].Key}
	ex, err := c.CommitExpiration(ctx, catalog.Expiration{Keys: gone, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		snap, err := c.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := keys(snap.Objects(catalog.Filter{})), []string{e1.Objects[1].Key}; !slices.Equal(got, want) {
			t.Errorf("round %d: visible %v, want %v", round, got, want)
		}
		if len(snap.Expirations) != 1 || !slices.Equal(snap.Expirations[0].Hidden, gone) {
			t.Fatalf("round %d: expirations %+v, want one hiding %v", round, snap.Expirations, gone)
		}
		if got := snap.Runs(); len(got) != 1 || got[0].Run != "r1" || got[0].Rows != 10 {
			t.Errorf("round %d: runs %+v, want r1 with mem's 10 rows only", round, got)
		}
		if round == 0 {
			if err := c.MarkExpirationDeleted(ctx, ex, t0); err != nil {
				t.Fatal(err)
			}
		} else if !snap.Expirations[0].Deleted.Equal(t0) {
			t.Errorf("deleted at %v, want %v", snap.Expirations[0].Deleted, t0)
		}
	}
	for _, bad := range []catalog.Expiration{{}, {Keys: []string{""}}, {Keys: []string{"_catalog/runs/r1.json"}}, {ID: "a/b", Keys: gone}} {
		if _, err := c.CommitExpiration(ctx, bad); err == nil {
			t.Errorf("CommitExpiration(%+v) accepted", bad)
		}
	}
}

// A retention pass that loaded the catalog before a compaction names the
// originals: the merged object is hidden too. A compaction recorded after
// the expiration that replaces an expired object is not applied, so its
// merged object never shows the expired rows again.
func TestExpirationAndCompactionRaces(t *testing.T) {
	ctx := context.Background()
	c, s := fileCatalog(t)
	var es []catalog.Entry
	for i := range int64(4) {
		e := entry("telemetry", 0, i*10, i*10+9, "r1", "cpu")
		if err := c.Commit(ctx, e); err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	merged := func(name string, from ...catalog.Entry) catalog.Object {
		o := from[0].Objects[0]
		o.Key = strings.TrimSuffix(o.Key, ".parquet") + "-" + name + ".parquet"
		if err := s.Put(ctx, o.Key, strings.NewReader("x"), 1); err != nil {
			t.Fatal(err)
		}
		return o
	}
	// es[0] and es[1] merged before the expiration (older id), which
	// names them.
	early := merged("early", es[0], es[1])
	if err := c.CommitCompaction(ctx, catalog.Compaction{ID: "00000000000000000001-aa",
		Replaced: []string{es[0].Objects[0].Key, es[1].Objects[0].Key}, Objects: []catalog.Object{early}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CommitExpiration(ctx, catalog.Expiration{ID: "00000000000000000002-bb",
		Keys: []string{es[0].Objects[0].Key, es[1].Objects[0].Key, es[2].Objects[0].Key}}); err != nil {
		t.Fatal(err)
	}
	// es[2] (expired) and es[3] (not) merged after it: refused whole.
	late := merged("late", es[2], es[3])
	if err := c.CommitCompaction(ctx, catalog.Compaction{ID: "00000000000000000003-cc",
		Replaced: []string{es[2].Objects[0].Key, es[3].Objects[0].Key}, Objects: []catalog.Object{late}}); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(snap.Objects(catalog.Filter{})), []string{es[3].Objects[0].Key}; !slices.Equal(got, want) {
		t.Errorf("visible %v, want %v", got, want)
	}
	if len(snap.Skipped) != 1 || snap.Skipped[0].ID != "00000000000000000003-cc" {
		t.Errorf("skipped %+v, want the late compaction", snap.Skipped)
	}
	hidden := slices.Sorted(slices.Values(snap.Expirations[0].Hidden))
	if want := slices.Sorted(slices.Values([]string{early.Key, es[2].Objects[0].Key})); !slices.Equal(hidden, want) {
		t.Errorf("hidden %v, want %v (the merged object and the one still visible)", hidden, want)
	}
}
