package sink

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
)

func bookOn(t *testing.T, st store.Store, id string) *fieldTypeBook {
	t.Helper()
	return newFieldTypeBook(context.Background(), catalog.New(st), id, func(ctx context.Context, _, _ string, op func() error) error { return op() })
}

// Two sinks (two books, two buffers) write the same lake: the first to
// see field v fixes it as a float; the second sees v as an integer first
// in its own flush and must send those samples to the dead letters, not
// make its object's column an integer.
func TestFieldTypesTwoSinks(t *testing.T) {
	st := storetest.Dir(t)
	a := newBuffer("telemetry", 0, true)
	a.types = bookOn(t, st, "sink-a")
	b := newBuffer("telemetry", 1, true)
	b.types = bookOn(t, st, "sink-b")
	for i, l := range []string{`m,host=a v=1.5 1700000000000000000`, `m,host=a v=2i 1700000000000000001`} {
		if err := a.add(rec(int64(i), l), time.Now); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range []string{`m,host=b v=7i 1700000000000000002`, `m,host=b v=8.5 1700000000000000003`, `m,host=b w="s" 1700000000000000004`} {
		if err := b.add(rec(int64(i), l), time.Now); err != nil {
			t.Fatal(err)
		}
	}
	for name, buf := range map[string]*buffer{"a": a, "b": b} {
		if len(buf.dead) != 1 || !strings.Contains(buf.dead[0].Reason, `field type conflict: field "v" is integer, but "m" fixed it as float`) {
			t.Fatalf("sink %s dead letters %+v, want the one integer v", name, buf.dead)
		}
		for _, tb := range buf.tables {
			for _, c := range tb.cols {
				if c.name == "v" && c.kind != kindFloat {
					t.Fatalf("sink %s: column v is %s, want float", name, c.kind)
				}
			}
		}
	}
	if b.dead[0].Offset != 0 || a.dead[0].Offset != 1 {
		t.Fatalf("dead letters at offsets %d (a) and %d (b), want 1 and 0", a.dead[0].Offset, b.dead[0].Offset)
	}
	got, err := catalog.New(st).FieldTypes(context.Background(), "m")
	if err != nil || got["v"] != "float" || got["w"] != "string" || len(got) != 2 {
		t.Fatalf("catalog types %v, %v; want v float, w string", got, err)
	}
}

// A record whose field type cannot be learnt (the lake is unreachable)
// is not buffered at all: neither a row nor a dead letter, and the
// buffer's range does not include it, so it is read again.
func TestFieldTypesUnknownLeavesRecord(t *testing.T) {
	st := storetest.Dir(t)
	b := newBuffer("telemetry", 0, true)
	ctx, cancel := context.WithCancel(context.Background())
	b.types = newFieldTypeBook(ctx, catalog.New(st), "s", func(ctx context.Context, _, _ string, op func() error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return op()
	})
	if err := b.add(rec(5, `m v=1 1700000000000000000`), time.Now); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := b.add(rec(6, `m x=1 1700000000000000001`), time.Now)
	if !errors.Is(err, errFieldType) {
		t.Fatalf("add with the catalog out of reach: %v, want errFieldType", err)
	}
	if b.first != 5 || b.last != 5 || b.records != 1 || len(b.dead) != 0 || b.tables[0].rows() != 1 {
		t.Fatalf("buffer holds [%d, %d], %d records, %d dead; want only offset 5", b.first, b.last, b.records, len(b.dead))
	}
	// A known field still needs no catalog.
	if err := b.add(rec(6, `m v=2 1700000000000000001`), time.Now); err != nil || b.last != 6 {
		t.Fatalf("add of a known field: %v, last %d", err, b.last)
	}
}
