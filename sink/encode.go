package sink

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
)

// rowGroupRows is the largest row group written. A flush of the default
// 64 MiB of input is about 500k rows: a few row groups per object, each big
// enough for readers to skip whole groups by time statistics.
const rowGroupRows = 128 << 10

var zstdCodec = zstd.Codec{Level: zstd.SpeedFastest}

func writerOptions() []parquet.WriterOption {
	return []parquet.WriterOption{
		parquet.Compression(&zstdCodec),
		parquet.CreatedBy("simtel-sink", "1", ""),
		parquet.MaxRowsPerRowGroup(rowGroupRows),
		parquet.PageBufferSize(256 << 10),
	}
}

// encoded is one object of a flush, ready to upload.
type encoded struct {
	key  string
	data []byte
	obj  catalog.Object
}

// encodeScratch holds the buffers encoding reuses from flush to flush.
type encodeScratch struct {
	perm []int32
	vals []parquet.Value
}

// encodeTable writes t as one Parquet object: time, the tags and fields,
// _partition, _offset and _time_ns, sorted by (time, offset).
func encodeTable(t *table, a *arena, topic string, partition int32, first, last int64, sc *encodeScratch) (encoded, error) {
	g := parquet.Group{
		colTime:      parquet.Timestamp(parquet.Microsecond),
		colPartition: parquet.Int(32),
		colOffset:    parquet.Encoded(parquet.Int(64), &parquet.DeltaBinaryPacked),
		colTimeNS:    parquet.Encoded(parquet.Int(64), &parquet.DeltaBinaryPacked),
	}
	for _, c := range t.cols {
		var n parquet.Node
		switch {
		case c.tag:
			n = parquet.Encoded(parquet.String(), &parquet.RLEDictionary)
		case c.kind == kindFloat:
			n = parquet.Leaf(parquet.DoubleType)
		case c.kind == kindInt:
			n = parquet.Int(64)
		case c.kind == kindUint:
			n = parquet.Uint(64)
		case c.kind == kindBool:
			n = parquet.Leaf(parquet.BooleanType)
		case c.kind == kindString:
			n = parquet.String()
		}
		g[c.name] = parquet.Optional(n)
	}
	schema := parquet.NewSchema(t.measurement, g)
	idx := map[string]int{}
	for i, path := range schema.Columns() {
		idx[path[0]] = i
	}

	var buf bytes.Buffer
	w := parquet.NewWriter(&buf, append(writerOptions(), schema)...)
	setObjectMetadata(w, topic, partition, first, last)
	cws := w.ColumnWriters()
	sc.perm = t.order(sc.perm)
	perm := sc.perm
	for lo := 0; lo < len(perm); lo += rowGroupRows {
		chunk := perm[lo:min(lo+rowGroupRows, len(perm))]
		write := func(name string, fill func(ci int, vals []parquet.Value)) error {
			ci := idx[name]
			vals := sc.values(len(chunk))
			fill(ci, vals)
			if _, err := cws[ci].WriteRowValues(vals); err != nil {
				return fmt.Errorf("write column %s: %w", name, err)
			}
			return nil
		}
		err := write(colTime, func(ci int, vals []parquet.Value) {
			for j, r := range chunk {
				vals[j] = parquet.Int64Value(floorDiv(t.tns[r], 1000)).Level(0, 0, ci)
			}
		})
		if err == nil {
			err = write(colTimeNS, func(ci int, vals []parquet.Value) {
				for j, r := range chunk {
					vals[j] = parquet.Int64Value(t.tns[r]).Level(0, 0, ci)
				}
			})
		}
		if err == nil {
			err = write(colOffset, func(ci int, vals []parquet.Value) {
				for j, r := range chunk {
					vals[j] = parquet.Int64Value(t.offs[r]).Level(0, 0, ci)
				}
			})
		}
		if err == nil {
			err = write(colPartition, func(ci int, vals []parquet.Value) {
				v := parquet.Int32Value(partition).Level(0, 0, ci)
				for j := range chunk {
					vals[j] = v
				}
			})
		}
		for _, c := range t.cols {
			if err != nil {
				break
			}
			err = write(c.name, func(ci int, vals []parquet.Value) {
				null := parquet.Value{}.Level(0, 0, ci)
				for j, r := range chunk {
					v, ok := c.get(r)
					if !ok {
						vals[j] = null
						continue
					}
					var pv parquet.Value
					switch {
					case c.tag || c.kind == kindString:
						pv = parquet.ByteArrayValue(a.get(v))
					case c.kind == kindFloat:
						pv = parquet.DoubleValue(math.Float64frombits(v))
					case c.kind == kindInt:
						pv = parquet.Int64Value(int64(v))
					case c.kind == kindUint:
						pv = parquet.Int64Value(int64(v))
					case c.kind == kindBool:
						pv = parquet.BooleanValue(v != 0)
					}
					vals[j] = pv.Level(0, 1, ci)
				}
			})
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			return encoded{}, fmt.Errorf("encode %s rows of partition %d: %w", t.measurement, partition, err)
		}
	}
	if err := w.Close(); err != nil {
		return encoded{}, fmt.Errorf("encode %s rows of partition %d: %w", t.measurement, partition, err)
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
		Columns:     t.columnNames(),
	}}, nil
}

func (sc *encodeScratch) values(n int) []parquet.Value {
	if cap(sc.vals) < n {
		sc.vals = make([]parquet.Value, n)
	}
	return sc.vals[:n]
}

func setObjectMetadata(w interface{ SetKeyValueMetadata(k, v string) }, topic string, partition int32, first, last int64) {
	w.SetKeyValueMetadata("simtel.topic", topic)
	w.SetKeyValueMetadata("simtel.partition", strconv.Itoa(int(partition)))
	w.SetKeyValueMetadata("simtel.first_offset", strconv.FormatInt(first, 10))
	w.SetKeyValueMetadata("simtel.last_offset", strconv.FormatInt(last, 10))
}

// Header is one Kafka record header of a raw object.
type Header struct {
	Key   string `parquet:"key"`
	Value []byte `parquet:"value"`
}

// RawRow is the schema of raw objects: records of topics that are not
// decoded, kept whole.
type RawRow struct {
	Partition int32     `parquet:"_partition"`
	Offset    int64     `parquet:"_offset,delta"`
	Timestamp time.Time `parquet:"timestamp,timestamp(microsecond:utc)"`
	Key       []byte    `parquet:"key,optional"`
	Value     []byte    `parquet:"value,optional"`
	Headers   []Header  `parquet:"headers,list"`
}

// DeadLetterRow is the schema of dead-letter objects: telemetry records the
// sink could not turn into a row, with the reason.
type DeadLetterRow struct {
	Partition int32     `parquet:"_partition"`
	Offset    int64     `parquet:"_offset,delta"`
	Timestamp time.Time `parquet:"timestamp,timestamp(microsecond:utc)"`
	Key       []byte    `parquet:"key,optional"`
	Value     []byte    `parquet:"value,optional"`
	Reason    string    `parquet:"reason"`
}

// encodeRows writes rows (already in offset order) as one object.
func encodeRows[T any](rows []T, topic string, partition int32, first, last int64) ([]byte, error) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf, writerOptions()...)
	setObjectMetadata(w, topic, partition, first, last)
	for lo := 0; lo < len(rows); lo += rowGroupRows {
		if _, err := w.Write(rows[lo:min(lo+rowGroupRows, len(rows))]); err != nil {
			return nil, err
		}
		if err := w.Flush(); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// encodeByDate writes rows (in offset order) as one object per UTC day of
// their record timestamps.
func encodeByDate[T any](rows []T, ts func(*T) time.Time, keyOf func(date string) string, kind, topic string, partition int32, first, last int64, columns []string) ([]encoded, error) {
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
		data, err := encodeRows(group, topic, partition, first, last)
		if err != nil {
			return nil, err
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
		key := keyOf(d)
		out = append(out, encoded{key: key, data: data, obj: catalog.Object{
			Key: key, Kind: kind, Date: d,
			MinTime: minT.UTC(), MaxTime: maxT.UTC(),
			Rows: int64(len(group)), Bytes: int64(len(data)), Columns: columns,
		}})
	}
	return out, nil
}
