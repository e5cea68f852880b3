package sink

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
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
	perm  []int32
	defs  []int16
	i64   []int64
	f64   []float64
	bools []bool
	bytes []pq.ByteArray
	i32   []int32
	// tag dictionaries
	dictOffs    []int32
	dictData    []byte
	rank, order []int32
	valid       []byte
}

// telemetryProps are the writer properties of telemetry objects: zstd at
// its fastest level, dictionary encoding only for tag columns (set per
// table), statistics on, and no wall-clock time anywhere in the file.
func telemetryProps(t *table) *pq.WriterProperties {
	opts := []pq.WriterProperty{
		pq.WithCompression(compress.Codecs.Zstd),
		pq.WithCompressionLevel(1),
		pq.WithCreatedBy("simtel-sink version 1"),
		pq.WithMaxRowGroupLength(rowGroupRows),
		pq.WithDataPageSize(256 << 10),
		pq.WithDictionaryDefault(false),
		pq.WithEncodingFor(colOffset, pq.Encodings.DeltaBinaryPacked),
		pq.WithEncodingFor(colTimeNS, pq.Encodings.DeltaBinaryPacked),
		pq.WithStats(true),
		pq.WithBatchSize(dictBatch),
	}
	for _, c := range t.cols {
		if c.tag {
			opts = append(opts, pq.WithDictionaryFor(c.name, true))
		}
	}
	return pq.NewWriterProperties(opts...)
}

// fileColumn is one column of a telemetry object in file order: one of the
// four fixed columns (col == nil) or a tag or field column.
type fileColumn struct {
	name string
	col  *column
}

// telemetrySchema is the Parquet schema of t, columns sorted by name.
func telemetrySchema(t *table) (*schema.GroupNode, []fileColumn, error) {
	cols := []fileColumn{{name: colTime}, {name: colPartition}, {name: colOffset}, {name: colTimeNS}}
	for _, c := range t.cols {
		cols = append(cols, fileColumn{name: c.name, col: c})
	}
	slices.SortFunc(cols, func(a, b fileColumn) int { return strings.Compare(a.name, b.name) })
	fields := make(schema.FieldList, len(cols))
	for i, fc := range cols {
		var n schema.Node
		var err error
		opt := pq.Repetitions.Optional
		switch c := fc.col; {
		case c == nil && fc.name == colTime:
			n, err = schema.NewPrimitiveNodeLogical(fc.name, pq.Repetitions.Required, schema.NewTimestampLogicalType(true, schema.TimeUnitMicros), pq.Types.Int64, 0, -1)
		case c == nil && fc.name == colPartition:
			n, err = schema.NewPrimitiveNodeLogical(fc.name, pq.Repetitions.Required, schema.NewIntLogicalType(32, true), pq.Types.Int32, 0, -1)
		case c == nil:
			n, err = schema.NewPrimitiveNodeLogical(fc.name, pq.Repetitions.Required, schema.NewIntLogicalType(64, true), pq.Types.Int64, 0, -1)
		case c.tag || c.kind == kindString:
			n, err = schema.NewPrimitiveNodeLogical(fc.name, opt, schema.StringLogicalType{}, pq.Types.ByteArray, 0, -1)
		case c.kind == kindFloat:
			n, err = schema.NewPrimitiveNode(fc.name, opt, pq.Types.Double, -1, 0)
		case c.kind == kindInt:
			n, err = schema.NewPrimitiveNodeLogical(fc.name, opt, schema.NewIntLogicalType(64, true), pq.Types.Int64, 0, -1)
		case c.kind == kindUint:
			n, err = schema.NewPrimitiveNodeLogical(fc.name, opt, schema.NewIntLogicalType(64, false), pq.Types.Int64, 0, -1)
		case c.kind == kindBool:
			n, err = schema.NewPrimitiveNode(fc.name, opt, pq.Types.Boolean, -1, 0)
		default:
			err = fmt.Errorf("column %s has no type", fc.name)
		}
		if err != nil {
			return nil, nil, err
		}
		fields[i] = n
	}
	g, err := schema.NewGroupNode(t.measurement, pq.Repetitions.Required, fields, -1)
	return g, cols, err
}

// encodeTable writes t as one Parquet object: time, the tags and fields,
// _partition, _offset and _time_ns, sorted by (time, offset).
//
// Telemetry objects are the sink's hot path and are written with arrow-go's
// low-level column writers rather than parquet-go (which writes the small
// raw and dead-letter objects below): they take each column as one typed
// batch with its definition levels, and a dictionary-encoded column as
// ready indexes plus the dictionary, which lets the sink's own per-column
// dictionary (see column.intern) stand, instead of hashing every tag value
// of every row again. parquet-go's writer takes only []parquet.Value and
// hashes every string into its own dictionary: with it, column writes took
// 40 % of the encoder's CPU, 19 % in that dictionary alone.
func encodeTable(t *table, a *arena, topic string, partition int32, first, last int64, sc *encodeScratch) (_ encoded, err error) {
	fail := func(err error) (encoded, error) {
		return encoded{}, fmt.Errorf("encode %s rows of partition %d: %w", t.measurement, partition, err)
	}
	defer func() {
		// The writer reports some failures by panicking; they must become
		// a failed flush, not a crashed sink.
		if r := recover(); r != nil {
			_, err = fail(fmt.Errorf("parquet writer: %v", r))
		}
	}()
	root, cols, err := telemetrySchema(t)
	if err != nil {
		return fail(err)
	}
	kv := metadata.NewKeyValueMetadata()
	objectMetadata(&kv, topic, partition, first, last)
	var tags []string
	for _, fc := range cols {
		if fc.col != nil && fc.col.tag {
			tags = append(tags, fc.name)
		}
	}
	if err := kv.Append(metaTags, strings.Join(tags, ",")); err != nil {
		return fail(err)
	}
	var buf bytes.Buffer
	w, err := file.NewParquetWriterWithError(&buf, root, file.WithWriterProps(telemetryProps(t)), file.WithWriteMetadata(kv))
	if err != nil {
		return fail(err)
	}
	sc.perm = t.order(sc.perm)
	perm := sc.perm
	for lo := 0; lo < len(perm); lo += rowGroupRows {
		chunk := perm[lo:min(lo+rowGroupRows, len(perm))]
		rg, err := w.AppendRowGroupChecked()
		if err != nil {
			return fail(err)
		}
		for _, fc := range cols {
			cw, err := rg.NextColumn()
			if err == nil {
				err = sc.writeColumn(cw, fc, t, a, partition, chunk)
			}
			if err == nil {
				err = cw.Close()
			}
			if err != nil {
				return fail(fmt.Errorf("write column %s: %w", fc.name, err))
			}
		}
		if err := rg.Close(); err != nil {
			return fail(err)
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
		Columns:     t.columnNames(),
	}}, nil
}

// writeColumn writes the rows chunk (in file order) of one column.
func (sc *encodeScratch) writeColumn(cw file.ColumnChunkWriter, fc fileColumn, t *table, a *arena, partition int32, chunk []int32) error {
	if fc.col == nil {
		switch fc.name {
		case colPartition:
			v := sc.i32[:0]
			for range chunk {
				v = append(v, partition)
			}
			sc.i32 = v
			_, err := cw.(*file.Int32ColumnChunkWriter).WriteBatch(v, nil, nil)
			return err
		default:
			v := sc.i64[:0]
			switch fc.name {
			case colTime:
				for _, r := range chunk {
					v = append(v, floorDiv(t.tns[r], 1000))
				}
			case colTimeNS:
				for _, r := range chunk {
					v = append(v, t.tns[r])
				}
			case colOffset:
				for _, r := range chunk {
					v = append(v, t.offs[r])
				}
			}
			sc.i64 = v
			_, err := cw.(*file.Int64ColumnChunkWriter).WriteBatch(v, nil, nil)
			return err
		}
	}
	c := fc.col
	defs := sc.defs[:0]
	switch {
	case c.tag:
		return sc.writeTag(cw, c, a, chunk)
	case c.kind == kindString:
		v, defs := gather(sc.bytes[:0], defs, c, chunk, func(x uint64) pq.ByteArray { return a.get(x) })
		sc.bytes, sc.defs = v, defs
		_, err := cw.(*file.ByteArrayColumnChunkWriter).WriteBatch(v, defs, nil)
		clear(v) // drop the references into the arena
		return err
	case c.kind == kindFloat:
		v, defs := gather(sc.f64[:0], defs, c, chunk, math.Float64frombits)
		sc.f64, sc.defs = v, defs
		_, err := cw.(*file.Float64ColumnChunkWriter).WriteBatch(v, defs, nil)
		return err
	case c.kind == kindBool:
		v, defs := gather(sc.bools[:0], defs, c, chunk, func(x uint64) bool { return x != 0 })
		sc.bools, sc.defs = v, defs
		_, err := cw.(*file.BooleanColumnChunkWriter).WriteBatch(v, defs, nil)
		return err
	default: // integers, signed and unsigned (stored as INT64, the logical type tells)
		v, defs := gather(sc.i64[:0], defs, c, chunk, func(x uint64) int64 { return int64(x) })
		sc.i64, sc.defs = v, defs
		_, err := cw.(*file.Int64ColumnChunkWriter).WriteBatch(v, defs, nil)
		return err
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

// dictBatch is how many rows of a tag column go to the column writer at a
// time: its batch size, so that the statistics given for a call cover
// exactly the rows of the data page they end up in.
const dictBatch = 1024

// dictEncoder is the part of the column writer's dictionary encoder that
// takes a ready dictionary.
type dictEncoder interface {
	PutDictionary(arrow.Array) error
	NumEntries() int
}

// writeTag writes a tag column as the sink coded it: the column's
// dictionary goes to the dictionary page as is, and the rows as indexes
// into it. Statistics (min, max, nulls) are computed from the indexes.
func (sc *encodeScratch) writeTag(cw file.ColumnChunkWriter, c *column, a *arena, chunk []int32) error {
	bw := cw.(*file.ByteArrayColumnChunkWriter)
	enc, ok := cw.CurrentEncoder().(dictEncoder)
	if !ok {
		return fmt.Errorf("tag column %s is not dictionary-encoded", c.name)
	}
	// The dictionary as an arrow binary array, and each entry's rank in
	// byte order for the statistics.
	var off int32
	sc.dictOffs = append(sc.dictOffs[:0], 0)
	sc.dictData = sc.dictData[:0]
	sc.bytes = sc.bytes[:0]
	for _, span := range c.dict {
		v := a.get(span)
		sc.dictData = append(sc.dictData, v...)
		off += int32(len(v))
		sc.dictOffs = append(sc.dictOffs, off)
		sc.bytes = append(sc.bytes, v)
	}
	dict := array.NewBinaryData(array.NewData(arrow.BinaryTypes.Binary, len(c.dict),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(sc.dictOffs)), memory.NewBufferBytes(sc.dictData)}, nil, 0, 0))
	defer dict.Release()
	if err := enc.PutDictionary(dict); err != nil {
		return err
	}
	if enc.NumEntries() != len(c.dict) {
		return fmt.Errorf("tag column %s: dictionary of %d values took %d entries", c.name, len(c.dict), enc.NumEntries())
	}
	sc.rank = slices.Grow(sc.rank[:0], len(c.dict))[:len(c.dict)]
	sc.order = sc.order[:0]
	for i := range c.dict {
		sc.order = append(sc.order, int32(i))
	}
	slices.SortFunc(sc.order, func(x, y int32) int { return bytes.Compare(sc.bytes[x], sc.bytes[y]) })
	for r, id := range sc.order {
		sc.rank[id] = int32(r)
	}
	stats, _ := cw.PageStatistics().(*metadata.ByteArrayStatistics)

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
	for lo := 0; lo < len(idx); lo += dictBatch {
		hi := min(lo+dictBatch, len(idx))
		if stats != nil {
			minR, maxR, nulls := int32(math.MaxInt32), int32(-1), 0
			for j := lo; j < hi; j++ {
				if defs[j] == 0 {
					nulls++
					continue
				}
				rk := sc.rank[idx[j]]
				minR, maxR = min(minR, rk), max(maxR, rk)
			}
			stats.IncNulls(int64(nulls))
			stats.IncNumValues(int64(hi - lo - nulls))
			if maxR >= 0 {
				stats.SetMinMax(sc.bytes[sc.order[minR]], sc.bytes[sc.order[maxR]])
			}
		}
		// The indexes are spaced (one per row); the validity bitmap tells
		// the null rows, whose index is not written.
		valid := sc.valid[:0]
		nulls := 0
		for j := lo; j < hi; j += 8 {
			var bits byte
			for k := j; k < min(j+8, hi); k++ {
				if defs[k] != 0 {
					bits |= 1 << (k - j)
				} else {
					nulls++
				}
			}
			valid = append(valid, bits)
		}
		sc.valid = valid
		batch := array.NewInt32Data(array.NewData(arrow.PrimitiveTypes.Int32, hi-lo,
			[]*memory.Buffer{memory.NewBufferBytes(valid), memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(idx[lo:hi]))}, nil, nulls, 0))
		err := bw.WriteDictIndices(batch, defs[lo:hi], nil)
		batch.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// metaTags is the key-value metadata key listing the tag columns of a
// telemetry object, comma-separated (lake/query.TagColumns reads it).
const metaTags = "simtel.tags"

func objectMetadata(kv *metadata.KeyValueMetadata, topic string, partition int32, first, last int64) {
	_ = kv.Append("simtel.topic", topic)
	_ = kv.Append("simtel.partition", strconv.Itoa(int(partition)))
	_ = kv.Append("simtel.first_offset", strconv.FormatInt(first, 10))
	_ = kv.Append("simtel.last_offset", strconv.FormatInt(last, 10))
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
