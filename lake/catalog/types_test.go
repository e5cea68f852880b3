package catalog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
)

func TestFieldTypesRaceFile(t *testing.T) { testFieldTypesRace(t, storetest.Dir(t)) }

func TestFieldTypesRaceS3(t *testing.T) {
	s, _ := storetest.S3(t)
	testFieldTypesRace(t, s)
}

// testFieldTypesRace: many sinks (each its own Catalog, as separate
// processes would have) see the same new fields at the same moment with
// different types. Each field must get exactly one winner, every claimer
// must be told the winner's type, and the catalog must hold that type
// afterwards, in FieldTypes and in a Load.
func testFieldTypesRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	types := []string{catalog.TypeFloat, catalog.TypeInteger, catalog.TypeString, catalog.TypeBoolean, catalog.TypeUnsigned}
	const claimers, fields = 10, 8
	got := make([][]catalog.FieldType, claimers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range claimers {
		cat := catalog.New(s)
		got[i] = make([]catalog.FieldType, fields)
		wg.Go(func() {
			<-start
			for f := range fields {
				ft, err := cat.ClaimFieldType(ctx, catalog.FieldType{
					Measurement: "cpu", Field: fmt.Sprintf("f%d", f), Type: types[(i+f)%len(types)], Sink: fmt.Sprintf("sink-%d", i),
				})
				if err != nil {
					t.Errorf("claimer %d field f%d: %v", i, f, err)
					return
				}
				got[i][f] = ft
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	cat := catalog.New(s)
	fixed, err := cat.FieldTypes(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for f := range fields {
		name := fmt.Sprintf("f%d", f)
		winner := got[0][f]
		wins := 0
		for i := range claimers {
			g := got[i][f]
			if g.Type != winner.Type || g.Sink != winner.Sink {
				t.Errorf("field %s: claimer %d was told %s by %s, claimer 0 %s by %s", name, i, g.Type, g.Sink, winner.Type, winner.Sink)
			}
			if g.Sink == fmt.Sprintf("sink-%d", i) {
				wins++
				if want := types[(i+f)%len(types)]; g.Type != want {
					t.Errorf("field %s: claimer %d won with type %s, but claimed %s", name, i, g.Type, want)
				}
			}
		}
		if wins != 1 {
			t.Errorf("field %s: %d claimers won, want exactly 1", name, wins)
		}
		if fixed[name] != winner.Type {
			t.Errorf("FieldTypes: %s is %q, want the winner's %q", name, fixed[name], winner.Type)
		}
		if snap.FieldTypes["cpu"][name] != winner.Type {
			t.Errorf("Load: %s is %q, want the winner's %q", name, snap.FieldTypes["cpu"][name], winner.Type)
		}
	}
	if len(fixed) != fields {
		t.Errorf("FieldTypes holds %d fields, want %d: %v", len(fixed), fields, fixed)
	}
	// A later claim with another type changes nothing.
	ft, err := cat.ClaimFieldType(ctx, catalog.FieldType{Measurement: "cpu", Field: "f0", Type: "string", Sink: "late"})
	if err != nil || ft.Sink != got[0][0].Sink || ft.Type != got[0][0].Type {
		t.Fatalf("late claim = %+v, %v; want the first winner %+v", ft, err, got[0][0])
	}
	if other, err := cat.FieldTypes(ctx, "mem"); err != nil || len(other) != 0 {
		t.Fatalf("FieldTypes of another measurement = %v, %v; want none", other, err)
	}
}
