package query

import (
	"database/sql"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/duckdb/duckdb-go/v2"
)

// arrowBatchRows is how many rows go into one record batch of the stream.
const arrowBatchRows = 64 * 1024

// arrowColumn converts one result column into an Arrow builder's values.
type arrowColumn struct {
	typ    arrow.DataType
	append func(b array.Builder, v any) error
}

// arrowColumnFor maps DuckDB's type name to an Arrow type. Types with no
// direct counterpart here (decimals, nested types, intervals, big
// integers) become their text form, so every result can be streamed.
func arrowColumnFor(dbType string) arrowColumn {
	num := func(t arrow.DataType, f func(b array.Builder, v any) bool) arrowColumn {
		return arrowColumn{typ: t, append: func(b array.Builder, v any) error {
			if !f(b, v) {
				return fmt.Errorf("value %v (%T) does not fit %s", v, v, t)
			}
			return nil
		}}
	}
	switch dbType {
	case "BOOLEAN":
		return num(arrow.FixedWidthTypes.Boolean, func(b array.Builder, v any) bool {
			x, ok := v.(bool)
			b.(*array.BooleanBuilder).Append(x)
			return ok
		})
	case "TINYINT":
		return num(arrow.PrimitiveTypes.Int8, func(b array.Builder, v any) bool {
			x, ok := v.(int8)
			b.(*array.Int8Builder).Append(x)
			return ok
		})
	case "SMALLINT":
		return num(arrow.PrimitiveTypes.Int16, func(b array.Builder, v any) bool {
			x, ok := v.(int16)
			b.(*array.Int16Builder).Append(x)
			return ok
		})
	case "INTEGER":
		return num(arrow.PrimitiveTypes.Int32, func(b array.Builder, v any) bool {
			x, ok := v.(int32)
			b.(*array.Int32Builder).Append(x)
			return ok
		})
	case "BIGINT":
		return num(arrow.PrimitiveTypes.Int64, func(b array.Builder, v any) bool {
			x, ok := v.(int64)
			b.(*array.Int64Builder).Append(x)
			return ok
		})
	case "UTINYINT":
		return num(arrow.PrimitiveTypes.Uint8, func(b array.Builder, v any) bool {
			x, ok := v.(uint8)
			b.(*array.Uint8Builder).Append(x)
			return ok
		})
	case "USMALLINT":
		return num(arrow.PrimitiveTypes.Uint16, func(b array.Builder, v any) bool {
			x, ok := v.(uint16)
			b.(*array.Uint16Builder).Append(x)
			return ok
		})
	case "UINTEGER":
		return num(arrow.PrimitiveTypes.Uint32, func(b array.Builder, v any) bool {
			x, ok := v.(uint32)
			b.(*array.Uint32Builder).Append(x)
			return ok
		})
	case "UBIGINT":
		return num(arrow.PrimitiveTypes.Uint64, func(b array.Builder, v any) bool {
			x, ok := v.(uint64)
			b.(*array.Uint64Builder).Append(x)
			return ok
		})
	case "FLOAT":
		return num(arrow.PrimitiveTypes.Float32, func(b array.Builder, v any) bool {
			x, ok := v.(float32)
			b.(*array.Float32Builder).Append(x)
			return ok
		})
	case "DOUBLE":
		return num(arrow.PrimitiveTypes.Float64, func(b array.Builder, v any) bool {
			x, ok := v.(float64)
			b.(*array.Float64Builder).Append(x)
			return ok
		})
	case "VARCHAR":
		return num(arrow.BinaryTypes.String, func(b array.Builder, v any) bool {
			x, ok := v.(string)
			b.(*array.StringBuilder).Append(x)
			return ok
		})
	case "BLOB":
		return num(arrow.BinaryTypes.Binary, func(b array.Builder, v any) bool {
			x, ok := v.([]byte)
			b.(*array.BinaryBuilder).Append(x)
			return ok
		})
	case "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ":
		t := &arrow.TimestampType{Unit: arrow.Microsecond}
		if dbType != "TIMESTAMP" {
			t.TimeZone = "UTC"
		}
		return num(t, func(b array.Builder, v any) bool {
			x, ok := v.(time.Time)
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(x.UnixMicro()))
			return ok
		})
	case "DATE":
		return num(arrow.FixedWidthTypes.Date32, func(b array.Builder, v any) bool {
			x, ok := v.(time.Time)
			b.(*array.Date32Builder).Append(arrow.Date32FromTime(x))
			return ok
		})
	}
	if strings.HasPrefix(dbType, "DECIMAL") {
		return num(arrow.PrimitiveTypes.Float64, func(b array.Builder, v any) bool {
			x, ok := v.(duckdb.Decimal)
			b.(*array.Float64Builder).Append(x.Float64())
			return ok
		})
	}
	return arrowColumn{typ: arrow.BinaryTypes.String, append: func(b array.Builder, v any) error {
		b.(*array.StringBuilder).Append(text(v))
		return nil
	}}
}

// writeArrow streams the result as an Arrow IPC stream (the format
// pyarrow.ipc.open_stream and Polars read), in batches of arrowBatchRows.
func writeArrow(w io.Writer, rows *sql.Rows, types []*sql.ColumnType) (int64, error) {
	cols := make([]arrowColumn, len(types))
	fields := make([]arrow.Field, len(types))
	for i, t := range types {
		cols[i] = arrowColumnFor(t.DatabaseTypeName())
		fields[i] = arrow.Field{Name: t.Name(), Type: cols[i].typ, Nullable: true}
	}
	schema := arrow.NewSchema(fields, nil)
	mem := memory.NewGoAllocator()
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	iw := ipc.NewWriter(w, ipc.WithSchema(schema), ipc.WithAllocator(mem))
	flush := func() error {
		rec := rb.NewRecordBatch()
		defer rec.Release()
		if err := iw.Write(rec); err != nil {
			return fmt.Errorf("cannot write an Arrow record batch: %w", err)
		}
		return nil
	}
	inBatch := 0
	n, err := eachRow(rows, len(types), func(row int64, vals []any) error {
		for i, v := range vals {
			b := rb.Field(i)
			if v == nil {
				b.AppendNull()
				continue
			}
			if err := cols[i].append(b, v); err != nil {
				return fmt.Errorf("column %s of row %d: %w", types[i].Name(), row, err)
			}
		}
		if inBatch++; inBatch == arrowBatchRows {
			inBatch = 0
			return flush()
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if inBatch > 0 || n == 0 {
		if err := flush(); err != nil {
			return n, err
		}
	}
	if err := iw.Close(); err != nil {
		return n, fmt.Errorf("cannot finish the Arrow stream: %w", err)
	}
	return n, nil
}
