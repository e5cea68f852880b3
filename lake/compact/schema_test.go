package compact_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/compact"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/schema"
	"github.com/simtel/simtel/lake/store"
)

// TestMergedObjectFollowsSchema: a merged object has the column order of
// lake/schema (as the catalog lists them) and the
// key-value metadata readers rely on (its tags and its offset range).
func TestMergedObjectFollowsSchema(t *testing.T) {
	ctx := context.Background()
	ss := querytest.GenSamples(3, []string{"r1"}, 120, 1)
	l := newLake(t, ss, 10)
	res, err := runCompact(ctx, l, compact.Config{MinFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Groups == 0 {
		t.Fatalf("nothing merged: %+v", res)
	}
	snap, err := l.Catalog.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	merged := map[string]bool{}
	for _, cp := range snap.Compactions {
		for _, o := range cp.Objects {
			merged[o.Key] = true
		}
	}
	checked := 0
	for _, o := range snap.Objects(catalog.Filter{Kind: lake.KindTelemetry}) {
		if !merged[o.Key] {
			continue
		}
		checked++
		p, _ := store.LocalPath(l.Store, o.Key)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := file.NewParquetReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		md := r.MetaData()
		var names []string
		for i := range md.Schema.NumColumns() {
			names = append(names, md.Schema.Column(i).Name())
		}
		r.Close()
		var cols []schema.Column
		for _, n := range names {
			switch {
			case schema.Reserved(n):
			case n == "host" || n == "run" || n == "job" || n == "step":
				cols = append(cols, schema.Column{Name: n, Role: schema.Tag})
			default:
				cols = append(cols, schema.Column{Name: n, Role: schema.Field, Type: schema.Float})
			}
		}
		lay, err := schema.Telemetry(o.Measurement, cols)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names, lay.Names()) || !slices.Equal(names, o.Columns) {
			t.Errorf("%s: columns %v, catalog %v, want lake/schema's order %v", o.Key, names, o.Columns, lay.Names())
		}
		topic, part, first, last, err := compact.ParseName(o.Key)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			schema.MetaTags: strings.Join(lay.Tags(), ","), schema.MetaTopic: topic, schema.MetaPartition: fmt.Sprint(part),
			schema.MetaFirstOffset: fmt.Sprint(first), schema.MetaLastOffset: fmt.Sprint(last),
		}
		kv := md.KeyValueMetadata()
		for k, v := range want {
			if got := kv.FindValue(k); got == nil || *got != v {
				t.Errorf("%s: metadata %s = %v, want %q", o.Key, k, got, v)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no merged object in the catalog")
	}
}
