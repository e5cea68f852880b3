package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/lake/catalog"
)

// fieldKind is the type of a field value and of its column. Its names
// (String) are the ones the catalog records.
type fieldKind = lineproto.FieldType

const (
	kindFloat  = lineproto.Float
	kindInt    = lineproto.Integer
	kindUint   = lineproto.Unsigned
	kindBool   = lineproto.Boolean
	kindString = lineproto.String
)

// fieldTyper tells the lake-wide type of a measurement's field, fixing it
// at first sight (at is where that sample came from). An error means the
// type could not be learnt; the record must not be decoded now.
type fieldTyper interface {
	fieldType(measurement string, field []byte, kind fieldKind, at origin) (fieldKind, error)
}

// origin is a record's place in Kafka, recorded with a field type it fixed.
type origin struct {
	topic     string
	partition int32
	offset    int64
}

// errFieldType wraps the failure to learn a field's type: the record is
// not buffered, and the caller retries it or stops.
var errFieldType = errors.New("cannot learn a field's type from the lake's catalog")

// fieldTypeBook is the sink's copy of the lake's fixed field types (see
// catalog.FieldType). A type never changes once fixed, so a copy is never
// stale; only a field the book has not seen costs a catalog round trip:
// the first time a measurement is met its recorded types are read, and a
// field still unknown is claimed with the type of the sample at hand.
//
// Why the record, not the flush, decides: a flush's objects are named by
// its offset range, and a sink that dies mid-flush writes the range again
// after a restart. The type is durable in the catalog before the record
// joins a buffer, so every object built from the range later — the first
// attempt's or the redo's — sees the same fixed types and sends the same
// records to the dead letters.
type fieldTypeBook struct {
	ctx   context.Context
	cat   *catalog.Catalog
	sink  string
	retry func(ctx context.Context, what, key string, op func() error) error

	mu struct {
		sync.Mutex
		known  map[string]map[string]fieldKind // measurement → field → kind
		loaded map[string]bool                 // measurements whose recorded types were read
	}
}

func newFieldTypeBook(ctx context.Context, cat *catalog.Catalog, sink string, retry func(ctx context.Context, what, key string, op func() error) error) *fieldTypeBook {
	b := &fieldTypeBook{ctx: ctx, cat: cat, sink: sink, retry: retry}
	b.mu.known = map[string]map[string]fieldKind{}
	b.mu.loaded = map[string]bool{}
	return b
}

func (b *fieldTypeBook) fieldType(measurement string, field []byte, kind fieldKind, at origin) (fieldKind, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k, ok := b.mu.known[measurement][string(field)]; ok {
		return k, nil
	}
	m := b.mu.known[measurement]
	if m == nil {
		m = map[string]fieldKind{}
		b.mu.known[measurement] = m
	}
	if !b.mu.loaded[measurement] {
		var recorded map[string]string
		err := b.retry(b.ctx, "read field types", measurement, func() error {
			var err error
			recorded, err = b.cat.FieldTypes(b.ctx, measurement)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errFieldType, err)
		}
		for f, t := range recorded {
			m[f] = kindNamed(t)
		}
		b.mu.loaded[measurement] = true
		if k, ok := m[string(field)]; ok {
			return k, nil
		}
	}
	var won catalog.FieldType
	key := catalog.FieldTypeKey(measurement, string(field))
	err := b.retry(b.ctx, "fix field type", key, func() error {
		var err error
		won, err = b.cat.ClaimFieldType(b.ctx, catalog.FieldType{
			Measurement: measurement, Field: string(field), Type: kind.String(), Sink: b.sink,
			Origin: fmt.Sprintf("%s/%d/%d", at.topic, at.partition, at.offset),
		})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errFieldType, err)
	}
	k := kindNamed(won.Type)
	m[string(field)] = k
	return k, nil
}

// catalogTypes returns the types the book knows for a measurement's
// fields, by the catalog's names: every field of a flushed object passed
// through fieldType, so the book knows them all.
func (b *fieldTypeBook) catalogTypes(measurement string) map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]string, len(b.mu.known[measurement]))
	for f, k := range b.mu.known[measurement] {
		out[f] = k.String()
	}
	return out
}

// kindNamed is the kind of a catalog type name; an unknown name gives 0,
// which matches no sample, so the field's samples go to the dead letters
// rather than into a column of a type nobody fixed.
func kindNamed(t string) fieldKind {
	for _, k := range []fieldKind{kindFloat, kindInt, kindUint, kindBool, kindString} {
		if k.String() == t {
			return k
		}
	}
	return 0
}
