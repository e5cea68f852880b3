package schema

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"

	pq "github.com/apache/arrow-go/v18/parquet"
)

// Micros is the time column's value of a time in nanoseconds: whole
// microseconds, rounded down.
func Micros(ns int64) int64 {
	q := ns / 1000
	if ns%1000 < 0 {
		q--
	}
	return q
}

// Row is one row of a telemetry object.
type Row struct {
	TimeNS    int64
	Partition int32
	Offset    int64
	Tags      map[string]string
	// Fields holds float64, int64, uint64, bool or string values.
	Fields map[string]any
}

// TypeOf is the column type of a field value, or 0 for a type the lake
// does not store.
func TypeOf(v any) Type {
	switch v.(type) {
	case float64:
		return Float
	case int64:
		return Int
	case uint64:
		return Uint
	case bool:
		return Bool
	case string:
		return String
	}
	return 0
}

// Encode writes rows (all of one measurement, in any order) as one
// telemetry object of flush o, rows sorted by (time, offset), exactly as
// the sink writes the same rows: tag dictionaries in offset order of first
// sight. It returns the object's layout.
func Encode(out io.Writer, measurement string, o Origin, rows []Row) (*Layout, error) {
	kinds := map[string]Column{}
	for i := range rows {
		for k := range rows[i].Tags {
			if c, ok := kinds[k]; ok && c.Role != Tag {
				return nil, fmt.Errorf("%q is a tag and a field", k)
			}
			kinds[k] = Column{Name: k, Role: Tag}
		}
		for k, v := range rows[i].Fields {
			t := TypeOf(v)
			if t == 0 {
				return nil, fmt.Errorf("field %q: unsupported type %T", k, v)
			}
			if c, ok := kinds[k]; ok && (c.Role != Field || c.Type != t) {
				return nil, fmt.Errorf("field %q has two types or is also a tag in one object", k)
			}
			kinds[k] = Column{Name: k, Role: Field, Type: t}
		}
	}
	l, err := Telemetry(measurement, slices.Collect(maps.Values(kinds)))
	if err != nil {
		return nil, err
	}
	byOffset := make([]int, len(rows))
	for i := range byOffset {
		byOffset[i] = i
	}
	slices.SortStableFunc(byOffset, func(a, b int) int { return cmp.Compare(rows[a].Offset, rows[b].Offset) })
	order := slices.Clone(byOffset)
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(rows[a].TimeNS, rows[b].TimeNS), cmp.Compare(rows[a].Offset, rows[b].Offset))
	})
	w, err := NewWriter(out, l, o)
	if err != nil {
		return nil, err
	}
	dicts := map[string]*tagDict{}
	for _, c := range l.Columns {
		if c.Role == Tag {
			d := &tagDict{ids: map[string]int32{}}
			for _, i := range byOffset {
				if v, ok := rows[i].Tags[c.Name]; ok {
					d.id(v)
				}
			}
			dicts[c.Name] = d
		}
	}
	for lo := 0; lo < len(order); lo += RowGroupRows {
		chunk := order[lo:min(lo+RowGroupRows, len(order))]
		if err := w.RowGroup(); err != nil {
			return nil, err
		}
		for _, c := range l.Columns {
			if err := writeRows(w, c, rows, chunk, dicts[c.Name]); err != nil {
				return nil, err
			}
		}
	}
	return l, w.Close()
}

// tagDict codes the values of a tag column.
type tagDict struct {
	vals [][]byte
	ids  map[string]int32
}

func (d *tagDict) id(v string) int32 {
	id, ok := d.ids[v]
	if !ok {
		id = int32(len(d.vals))
		d.ids[v] = id
		d.vals = append(d.vals, []byte(v))
	}
	return id
}

// writeRows writes column c of rows chunk (in file order).
func writeRows(w *Writer, c Column, rows []Row, chunk []int, dict *tagDict) error {
	switch {
	case c.Role == Fixed && c.Name == Partition:
		v := make([]int32, len(chunk))
		for j, i := range chunk {
			v[j] = rows[i].Partition
		}
		return w.WritePartition(v)
	case c.Role == Fixed:
		v := make([]int64, len(chunk))
		for j, i := range chunk {
			switch c.Name {
			case Time:
				v[j] = Micros(rows[i].TimeNS)
			case TimeNS:
				v[j] = rows[i].TimeNS
			case Offset:
				v[j] = rows[i].Offset
			}
		}
		return w.WriteFixed(v)
	case c.Role == Tag:
		idx := make([]int32, len(chunk))
		defs := make([]int16, len(chunk))
		for j, i := range chunk {
			if t, ok := rows[i].Tags[c.Name]; ok {
				idx[j], defs[j] = dict.id(t), 1
			}
		}
		return w.WriteTag(dict.vals, idx, defs)
	case c.Type == Float:
		return w.WriteFloat(fieldValues(rows, chunk, c.Name, func(x any) float64 { return x.(float64) }))
	case c.Type == Int || c.Type == Uint:
		v, defs := fieldValues(rows, chunk, c.Name, func(x any) int64 {
			if u, ok := x.(uint64); ok {
				return int64(u)
			}
			return x.(int64)
		})
		return w.WriteInt(c.Type, v, defs)
	case c.Type == Bool:
		return w.WriteBool(fieldValues(rows, chunk, c.Name, func(x any) bool { return x.(bool) }))
	default:
		return w.WriteString(fieldValues(rows, chunk, c.Name, func(x any) pq.ByteArray { return pq.ByteArray(x.(string)) }))
	}
}

// fieldValues gathers field name of rows chunk: the values of the rows
// that have it, converted by conv, and each row's definition level.
func fieldValues[T any](rows []Row, chunk []int, name string, conv func(any) T) ([]T, []int16) {
	var v []T
	defs := make([]int16, len(chunk))
	for j, i := range chunk {
		if x, ok := rows[i].Fields[name]; ok {
			v = append(v, conv(x))
			defs[j] = 1
		}
	}
	return v, defs
}
