package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/store"
)

// Field types, as InfluxDB line protocol names them. Each is its own type:
// an integer field (1i) is not a float field (1.0), as in InfluxDB.
const (
	TypeFloat    = "float"
	TypeInteger  = "integer"
	TypeUnsigned = "unsigned"
	TypeBoolean  = "boolean"
	TypeString   = "string"
)

// FieldType is the lake-wide type of one field of a measurement. The first
// sink to see the field records it (ClaimFieldType) before any object
// holding the field is uploaded; it never changes afterwards, so every
// telemetry object of the measurement has the field in this type, and a
// sample with another type goes to the dead letters.
type FieldType struct {
	Measurement string    `json:"measurement"`
	Field       string    `json:"field"`
	Type        string    `json:"type"` // TypeFloat, TypeInteger, …
	Written     time.Time `json:"written"`
	Sink        string    `json:"sink,omitempty"`   // the sink that saw it first, for operators
	Origin      string    `json:"origin,omitempty"` // topic/partition/offset of the first sample
}

// FieldTypeKey is the catalog key of a field's type.
func FieldTypeKey(measurement, field string) string {
	return typesPrefix + lake.EscapeSegment(measurement) + "/" + lake.EscapeSegment(field) + ".json"
}

// ClaimFieldType fixes the type of a measurement's field unless it is
// fixed already, and returns the type that holds: ft's own when this call
// fixed it, else the one recorded earlier. The store's atomic create
// (store.Creator) decides races: when two sinks see a new field at the
// same time with different types, both try to create the same key, exactly
// one succeeds, and the other reads the winner's type here and sends its
// samples to the dead letters. The record is durable when this returns, so
// a sink that restarts and writes the same offset range again takes the
// same decisions.
//
// An error means the type could not be known (the store failed); the call
// may be repeated.
func (c *Catalog) ClaimFieldType(ctx context.Context, ft FieldType) (FieldType, error) {
	if ft.Field == "" || ft.Type == "" {
		return FieldType{}, fmt.Errorf("cannot fix the type of %q.%q: field or type missing", ft.Measurement, ft.Field)
	}
	cr, ok := c.s.(store.Creator)
	if !ok {
		return FieldType{}, fmt.Errorf("cannot fix the type of %s.%s: the store %s cannot create objects atomically", ft.Measurement, ft.Field, c.s)
	}
	key := FieldTypeKey(ft.Measurement, ft.Field)
	if ft.Written.IsZero() {
		ft.Written = time.Now().UTC()
	}
	b, err := json.MarshalIndent(ft, "", " ")
	if err != nil {
		return FieldType{}, fmt.Errorf("cannot encode %s: %w", key, err)
	}
	err = cr.Create(ctx, key, bytes.NewReader(append(b, '\n')))
	if err == nil {
		return ft, nil
	}
	if !errors.Is(err, store.ErrExists) {
		return FieldType{}, fmt.Errorf("cannot fix the type of %s.%s: %w", ft.Measurement, ft.Field, err)
	}
	var won FieldType
	if err := c.getJSON(ctx, key, &won); err != nil {
		return FieldType{}, fmt.Errorf("cannot read the type of %s.%s: %w", ft.Measurement, ft.Field, err)
	}
	if won.Type == "" {
		return FieldType{}, fmt.Errorf("catalog file %s in %s names no type", key, c.s)
	}
	return won, nil
}

// FieldTypes returns the fixed types of a measurement's fields, field name
// → type (TypeFloat, …). Fields not seen yet are absent. Compaction uses
// it to keep objects of one measurement in one type per field.
func (c *Catalog) FieldTypes(ctx context.Context, measurement string) (map[string]string, error) {
	prefix := typesPrefix + lake.EscapeSegment(measurement) + "/"
	objs, err := c.s.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("cannot list the field types of %s: %w", measurement, err)
	}
	out := make(map[string]string, len(objs))
	for _, o := range objs {
		if strings.Contains(strings.TrimPrefix(o.Key, prefix), "/") || !strings.HasSuffix(o.Key, ".json") {
			continue
		}
		var ft FieldType
		if err := c.getJSON(ctx, o.Key, &ft); err != nil {
			return nil, fmt.Errorf("cannot read the field types of %s: %w", measurement, err)
		}
		if ft.Measurement == measurement && ft.Field != "" && ft.Type != "" {
			out[ft.Field] = ft.Type
		}
	}
	return out, nil
}
