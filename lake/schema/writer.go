package schema

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// Writer writes a telemetry object column by column: for each row group
// (RowGroup), one call per column in layout order with that row group's
// values. Optional columns take a definition level per row (1: value, 0:
// null) and the values of the non-null rows only.
//
// It uses arrow-go's low-level column writers: they take each column as
// one typed batch with its definition levels, and a tag column as ready
// dictionary indexes plus the dictionary, so a writer that codes its tags
// itself (the sink does, as it buffers) does not have every tag value of
// every row hashed again.
//
// The column writers report some failures by panicking; the Writer turns
// them into errors. After an error the object is unusable.
type Writer struct {
	l   *Layout
	w   *file.Writer
	rg  file.SerialRowGroupWriter
	col int
	// scratch of WriteTag
	dictOffs    []int32
	dictData    []byte
	rank, order []int32
	valid       []byte
}

// NewWriter starts a telemetry object of layout l from flush o on out.
func NewWriter(out io.Writer, l *Layout, o Origin) (_ *Writer, err error) {
	defer catch(&err)
	root, err := l.Node()
	if err != nil {
		return nil, err
	}
	kv := metadata.NewKeyValueMetadata()
	for _, m := range l.Metadata(o) {
		if err := kv.Append(m[0], m[1]); err != nil {
			return nil, err
		}
	}
	w, err := file.NewParquetWriterWithError(out, root, file.WithWriterProps(l.Props()), file.WithWriteMetadata(kv))
	if err != nil {
		return nil, err
	}
	return &Writer{l: l, w: w}, nil
}

// catch turns a panic of the column writers into *err.
func catch(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("parquet writer: %v", r)
	}
}

// RowGroup starts the next row group (at most RowGroupRows rows), closing
// the previous one.
func (w *Writer) RowGroup() (err error) {
	defer catch(&err)
	if err := w.closeRowGroup(); err != nil {
		return err
	}
	w.rg, err = w.w.AppendRowGroupChecked()
	w.col = 0
	return err
}

func (w *Writer) closeRowGroup() error {
	if w.rg == nil {
		return nil
	}
	if w.col != len(w.l.Columns) {
		return fmt.Errorf("row group closed after %d of %d columns", w.col, len(w.l.Columns))
	}
	err := w.rg.Close()
	w.rg = nil
	return err
}

// next returns the writer of the next column, which must have role and
// (for fields) type t.
func (w *Writer) next(role Role, t Type) (file.ColumnChunkWriter, Column, error) {
	if w.rg == nil || w.col >= len(w.l.Columns) {
		return nil, Column{}, fmt.Errorf("column written outside a row group or past the last column")
	}
	c := w.l.Columns[w.col]
	if c.Role != role || role == Field && c.Type != t {
		return nil, c, fmt.Errorf("column %s is written with the wrong type", c.Name)
	}
	w.col++
	cw, err := w.rg.NextColumn()
	return cw, c, err
}

// done closes a column writer and names the column in an error.
func done(cw file.ColumnChunkWriter, c Column, err error) error {
	if err == nil {
		err = cw.Close()
	}
	if err != nil {
		return fmt.Errorf("write column %s: %w", c.Name, err)
	}
	return nil
}

// WriteFixed writes the next column, a fixed one of INT64: time (in
// microseconds, see Micros), _offset or _time_ns.
func (w *Writer) WriteFixed(v []int64) (err error) {
	defer catch(&err)
	cw, c, err := w.next(Fixed, 0)
	if err != nil {
		return err
	}
	if c.Name == Partition {
		return fmt.Errorf("column %s takes WritePartition", c.Name)
	}
	_, err = cw.(*file.Int64ColumnChunkWriter).WriteBatch(v, nil, nil)
	return done(cw, c, err)
}

// WritePartition writes the next column, _partition, with one value per row.
func (w *Writer) WritePartition(v []int32) (err error) {
	defer catch(&err)
	cw, c, err := w.next(Fixed, 0)
	if err != nil {
		return err
	}
	if c.Name != Partition {
		return fmt.Errorf("column %s is not %s", c.Name, Partition)
	}
	_, err = cw.(*file.Int32ColumnChunkWriter).WriteBatch(v, nil, nil)
	return done(cw, c, err)
}

// WriteInt writes the next column, a field of type Int or Uint (stored as
// INT64, the logical type tells; an unsigned value is its bits).
func (w *Writer) WriteInt(t Type, v []int64, defs []int16) error {
	return writeField[int64, *file.Int64ColumnChunkWriter](w, t, v, defs)
}

// WriteFloat writes the next column, a Float field.
func (w *Writer) WriteFloat(v []float64, defs []int16) error {
	return writeField[float64, *file.Float64ColumnChunkWriter](w, Float, v, defs)
}

// WriteBool writes the next column, a Bool field.
func (w *Writer) WriteBool(v []bool, defs []int16) error {
	return writeField[bool, *file.BooleanColumnChunkWriter](w, Bool, v, defs)
}

// WriteString writes the next column, a String field.
func (w *Writer) WriteString(v []pq.ByteArray, defs []int16) error {
	return writeField[pq.ByteArray, *file.ByteArrayColumnChunkWriter](w, String, v, defs)
}

// batchWriter is the column chunk writer of a physical type whose values
// are T.
type batchWriter[T any] interface {
	file.ColumnChunkWriter
	WriteBatch(values []T, defLevels, repLevels []int16) (int64, error)
}

// writeField writes the next column, a field of type t, whose chunk writer
// is a W.
func writeField[T any, W batchWriter[T]](w *Writer, t Type, v []T, defs []int16) (err error) {
	defer catch(&err)
	cw, c, err := w.next(Field, t)
	if err != nil {
		return err
	}
	_, err = cw.(W).WriteBatch(v, defs, nil)
	return done(cw, c, err)
}

// dictEncoder is the part of the column writer's dictionary encoder that
// takes a ready dictionary.
type dictEncoder interface {
	PutDictionary(arrow.Array) error
	NumEntries() int
}

// WriteTag writes the next column, a tag, as its writer coded it: dict
// (each distinct value once) goes to the dictionary page as is, and each
// row as its index into dict (idx has one entry per row; a null row's
// index is ignored). Statistics (min, max, nulls) are computed from the
// indexes.
func (w *Writer) WriteTag(dict [][]byte, idx []int32, defs []int16) (err error) {
	defer catch(&err)
	cw, c, err := w.next(Tag, 0)
	if err != nil {
		return err
	}
	return done(cw, c, w.writeTag(cw, c, dict, idx, defs))
}

func (w *Writer) writeTag(cw file.ColumnChunkWriter, c Column, dict [][]byte, idx []int32, defs []int16) error {
	bw := cw.(*file.ByteArrayColumnChunkWriter)
	enc, ok := cw.CurrentEncoder().(dictEncoder)
	if !ok {
		return fmt.Errorf("tag column %s is not dictionary-encoded", c.Name)
	}
	// The dictionary as an arrow binary array, and each entry's rank in
	// byte order for the statistics.
	var off int32
	w.dictOffs = append(w.dictOffs[:0], 0)
	w.dictData = w.dictData[:0]
	for _, v := range dict {
		w.dictData = append(w.dictData, v...)
		off += int32(len(v))
		w.dictOffs = append(w.dictOffs, off)
	}
	d := array.NewBinaryData(array.NewData(arrow.BinaryTypes.Binary, len(dict),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(w.dictOffs)), memory.NewBufferBytes(w.dictData)}, nil, 0, 0))
	defer d.Release()
	if err := enc.PutDictionary(d); err != nil {
		return err
	}
	if enc.NumEntries() != len(dict) {
		return fmt.Errorf("tag column %s: dictionary of %d values took %d entries", c.Name, len(dict), enc.NumEntries())
	}
	w.rank = slices.Grow(w.rank[:0], len(dict))[:len(dict)]
	w.order = w.order[:0]
	for i := range dict {
		w.order = append(w.order, int32(i))
	}
	slices.SortFunc(w.order, func(x, y int32) int { return bytes.Compare(dict[x], dict[y]) })
	for r, id := range w.order {
		w.rank[id] = int32(r)
	}
	stats, _ := cw.PageStatistics().(*metadata.ByteArrayStatistics)
	for lo := 0; lo < len(idx); lo += dictBatch {
		hi := min(lo+dictBatch, len(idx))
		if stats != nil {
			minR, maxR, nulls := int32(math.MaxInt32), int32(-1), 0
			for j := lo; j < hi; j++ {
				if defs[j] == 0 {
					nulls++
					continue
				}
				rk := w.rank[idx[j]]
				minR, maxR = min(minR, rk), max(maxR, rk)
			}
			stats.IncNulls(int64(nulls))
			stats.IncNumValues(int64(hi - lo - nulls))
			if maxR >= 0 {
				stats.SetMinMax(dict[w.order[minR]], dict[w.order[maxR]])
			}
		}
		// The indexes are spaced (one per row); the validity bitmap tells
		// the null rows, whose index is not written.
		valid := w.valid[:0]
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
		w.valid = valid
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

// Close finishes the last row group and the object.
func (w *Writer) Close() (err error) {
	defer catch(&err)
	if err := w.closeRowGroup(); err != nil {
		return err
	}
	return w.w.Close()
}
