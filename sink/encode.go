package sink

import (
	"bytes"
	"fmt"
	"math"
	"time"

	pq "github.com/apache/arrow-go/v18/parquet"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/schema"
)

// encoded is one object of a flush, ready to upload.
type encoded struct {
	key  string
	data []byte
	obj  catalog.Object
}

// encodeScratch holds the buffers encoding reuses from flush to flush.
type encodeScratch struct {
	perm  []int32
	defs  []int16
	i64   []int64
	f64   []float64
	bools []bool
	bytes []pq.ByteArray
	i32   []int32
	dict  [][]byte
}

// columnType is the lake column type of a field kind.
func columnType(k fieldKind) schema.Type {
	switch k {
	case kindFloat:
		return schema.Float
	case kindInt:
		return schema.Int
	case kindUint:
		return schema.Uint
	case kindBool:
		return schema.Bool
	case kindString:
		return schema.String
	}
	return 0
}

// lakeLayout is the lake layout of t's object.
func (t *table) lakeLayout() (*schema.Layout, error) {
	cols := make([]schema.Column, len(t.cols))
	for i, c := range t.cols {
		cols[i] = schema.Column{Name: c.name, Role: schema.Field, Type: columnType(c.kind)}
		if c.tag {
			cols[i] = schema.Column{Name: c.name, Role: schema.Tag}
		}
	}
	return schema.Telemetry(t.measurement, cols)
}

// encodeTable writes t as one Parquet object (see lake/schema): time, the
// tags and fields, _partition, _offset and _time_ns, sorted by (time,
// offset). Tag columns go to the writer as the sink coded them (see
// column.intern): the column's dictionary and each row's index into it.
func encodeTable(t *table, a *arena, topic string, partition int32, first, last int64, sc *encodeScratch) (encoded, error) {
	fail := func(err error) (encoded, error) {
		return encoded{}, fmt.Errorf("encode %s rows of partition %d: %w", t.measurement, partition, err)
	}
	l, err := t.lakeLayout()
	if err != nil {
		return fail(err)
	}
	var buf bytes.Buffer
	w, err := schema.NewWriter(&buf, l, schema.Origin{Topic: topic, Partition: partition, First: first, Last: last})
	if err != nil {
		return fail(err)
	}
	sc.perm = t.order(sc.perm)
	perm := sc.perm
	for lo := 0; lo < len(perm); lo += schema.RowGroupRows {
		chunk := perm[lo:min(lo+schema.RowGroupRows, len(perm))]
		if err := w.RowGroup(); err != nil {
			return fail(err)
		}
		for _, fc := range l.Columns {
			if err := sc.writeColumn(w, fc, t, a, partition, chunk); err != nil {
				return fail(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		return fail(err)
	}
	minT, maxT := t.tns[perm[0]], t.tns[perm[len(perm)-1]]
	key := lake.TelemetryKey(t.measurement, t.run, t.date, topic, partition, first, last)
	return encoded{key: key, data: buf.Bytes(), obj: catalog.Object{
		Key:         key,
		Kind:        lake.KindTelemetry,
		Measurement: t.measurement,
		Run:         t.run,
		Date:        t.date,
		MinTime:     time.Unix(0, minT).UTC(),
		MaxTime:     time.Unix(0, maxT).UTC(),
		Rows:        int64(len(perm)),
		Bytes:       int64(buf.Len()),
		Columns:     l.Names(),
	}}, nil
}

// writeColumn writes the rows chunk (in file order) of one column.
func (sc *encodeScratch) writeColumn(w *schema.Writer, fc schema.Column, t *table, a *arena, partition int32, chunk []int32) error {
	if fc.Role == schema.Fixed {
		if fc.Name == schema.Partition {
			v := sc.i32[:0]
			for range chunk {
				v = append(v, partition)
			}
			sc.i32 = v
			return w.WritePartition(v)
		}
		v := sc.i64[:0]
		switch fc.Name {
		case schema.Time:
			for _, r := range chunk {
				v = append(v, schema.Micros(t.tns[r]))
			}
		case schema.TimeNS:
			for _, r := range chunk {
				v = append(v, t.tns[r])
			}
		case schema.Offset:
			for _, r := range chunk {
				v = append(v, t.offs[r])
			}
		}
		sc.i64 = v
		return w.WriteFixed(v)
	}
	c := t.cols[t.byName[fc.Name]]
	defs := sc.defs[:0]
	switch {
	case c.tag:
		return sc.writeTag(w, c, a, chunk)
	case c.kind == kindString:
		v, defs := gather(sc.bytes[:0], defs, c, chunk, func(x uint64) pq.ByteArray { return a.get(x) })
		sc.bytes, sc.defs = v, defs
		err := w.WriteString(v, defs)
		clear(v) // drop the references into the arena
		return err
	case c.kind == kindFloat:
		v, defs := gather(sc.f64[:0], defs, c, chunk, math.Float64frombits)
		sc.f64, sc.defs = v, defs
		return w.WriteFloat(v, defs)
	case c.kind == kindBool:
		v, defs := gather(sc.bools[:0], defs, c, chunk, func(x uint64) bool { return x != 0 })
		sc.bools, sc.defs = v, defs
		return w.WriteBool(v, defs)
	default: // integers, signed and unsigned (stored as INT64, the logical type tells)
		v, defs := gather(sc.i64[:0], defs, c, chunk, func(x uint64) int64 { return int64(x) })
		sc.i64, sc.defs = v, defs
		return w.WriteInt(columnType(c.kind), v, defs)
	}
}

// gather appends to v the values of column c at rows chunk, converted by
// conv, and to defs each row's definition level (1: value, 0: null).
func gather[T any](v []T, defs []int16, c *column, chunk []int32, conv func(uint64) T) ([]T, []int16) {
	for _, r := range chunk {
		if x, ok := c.get(r); ok {
			v = append(v, conv(x))
			defs = append(defs, 1)
		} else {
			defs = append(defs, 0)
		}
	}
	return v, defs
}

// writeTag writes a tag column as the sink coded it: the column's
// dictionary, and each row's index into it.
func (sc *encodeScratch) writeTag(w *schema.Writer, c *column, a *arena, chunk []int32) error {
	sc.dict = sc.dict[:0]
	for _, span := range c.dict {
		sc.dict = append(sc.dict, a.get(span))
	}
	idx := sc.i32[:0]
	defs := sc.defs[:0]
	for _, r := range chunk {
		x, ok := c.get(r)
		if ok {
			defs = append(defs, 1)
		} else {
			defs = append(defs, 0)
		}
		idx = append(idx, int32(x))
	}
	sc.i32, sc.defs = idx, defs
	err := w.WriteTag(sc.dict, idx, defs)
	clear(sc.dict) // drop the references into the arena
	return err
}

// encodeByDate writes rows of b (in offset order; what they are, for an
// error) as one object per UTC day of their record timestamps, each keyed
// by keyOf.
func encodeByDate[T schema.RawRow | schema.DeadLetterRow](b *buffer, rows []T, ts func(*T) time.Time, keyOf func(topic, date string, partition int32, first, last int64) string, kind string, columns []string, what string) ([]encoded, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	byDate := map[string][]T{}
	var dates []string
	for i := range rows {
		d := lake.Date(ts(&rows[i]))
		if _, ok := byDate[d]; !ok {
			dates = append(dates, d)
		}
		byDate[d] = append(byDate[d], rows[i])
	}
	var out []encoded
	for _, d := range dates {
		group := byDate[d]
		data, err := schema.EncodeRecords(group, schema.Origin{Topic: b.topic, Partition: b.partition, First: b.first, Last: b.last})
		if err != nil {
			return nil, fmt.Errorf("encode %s of %s/%d: %w", what, b.topic, b.partition, err)
		}
		minT, maxT := ts(&group[0]), ts(&group[0])
		for i := range group {
			t := ts(&group[i])
			if t.Before(minT) {
				minT = t
			}
			if t.After(maxT) {
				maxT = t
			}
		}
		key := keyOf(b.topic, d, b.partition, b.first, b.last)
		out = append(out, encoded{key: key, data: data, obj: catalog.Object{
			Key: key, Kind: kind, Date: d,
			MinTime: minT.UTC(), MaxTime: maxT.UTC(),
			Rows: int64(len(group)), Bytes: int64(len(data)), Columns: columns,
		}})
	}
	return out, nil
}
