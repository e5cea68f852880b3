package query

import (
	"bytes"
	"database/sql"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/duckdb/duckdb-go/v2"
)

// Formats are the output formats of Write.
var Formats = []string{"table", "csv", "json", "arrow"}

// Write prints rows to w in format (table, csv, json or arrow) and returns
// how many rows it wrote. The table format is aligned and therefore holds
// the whole result in memory; the others stream.
func Write(w io.Writer, rows *sql.Rows, format string) (int64, error) {
	types, err := rows.ColumnTypes()
	if err != nil {
		return 0, fmt.Errorf("cannot read the result's columns: %w", err)
	}
	switch format {
	case "table", "":
		return writeTable(w, rows, types)
	case "csv":
		return writeCSV(w, rows, types)
	case "json":
		return writeJSON(w, rows, types)
	case "arrow":
		return writeArrow(w, rows, types)
	}
	return 0, fmt.Errorf("output format %q is not one of %s", format, strings.Join(Formats, ", "))
}

// eachRow scans the rows of a result of ncols columns one by one into a
// reused slice and calls f with the row's number (from 1) and its values,
// stopping at f's first error. It returns how many rows f took.
func eachRow(rows *sql.Rows, ncols int, f func(row int64, vals []any) error) (int64, error) {
	vals, ptrs := make([]any, ncols), make([]any, ncols)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var n int64
	for rows.Next() {
		clear(vals)
		if err := rows.Scan(ptrs...); err != nil {
			return n, fmt.Errorf("cannot read row %d: %w", n+1, err)
		}
		if err := f(n+1, vals); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// text formats a value for table and CSV output.
func text(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return `\x` + hex.EncodeToString(x)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case bool:
		return strconv.FormatBool(x)
	case duckdb.Decimal:
		return x.String()
	case *big.Int:
		return x.String()
	case duckdb.UUID:
		return x.String()
	case fmt.Stringer:
		return x.String()
	case []any, map[string]any:
		b, err := json.Marshal(jsonValue(x))
		if err != nil {
			return fmt.Sprint(x)
		}
		return string(b)
	}
	return fmt.Sprint(v)
}

// jsonValue makes a value encode well as JSON: times as RFC 3339, decimals
// as numbers, big integers as numbers, binary as a UTF-8 string when it is
// one (base64 otherwise).
func jsonValue(v any) any {
	switch x := v.(type) {
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case duckdb.Decimal:
		return json.Number(x.String())
	case *big.Int:
		return json.Number(x.String())
	case duckdb.UUID:
		return x.String()
	case duckdb.Interval:
		return map[string]any{"months": x.Months, "days": x.Days, "micros": x.Micros}
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = jsonValue(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case float64:
		if x != x || x > 1.7976931348623157e308 || x < -1.7976931348623157e308 {
			return strconv.FormatFloat(x, 'g', -1, 64) // NaN and ±Inf are not JSON numbers
		}
	}
	return v
}

func writeTable(w io.Writer, rows *sql.Rows, types []*sql.ColumnType) (int64, error) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var line bytes.Buffer
	for i, t := range types {
		if i > 0 {
			line.WriteByte('\t')
		}
		line.WriteString(cell(t.Name()))
	}
	line.WriteByte('\n')
	if _, err := tw.Write(line.Bytes()); err != nil {
		return 0, err
	}
	n, err := eachRow(rows, len(types), func(_ int64, vals []any) error {
		line.Reset()
		for i, v := range vals {
			if i > 0 {
				line.WriteByte('\t')
			}
			if v == nil {
				line.WriteString("NULL")
			} else {
				line.WriteString(cell(text(v)))
			}
		}
		line.WriteByte('\n')
		_, err := tw.Write(line.Bytes())
		return err
	})
	if err != nil {
		return n, err
	}
	if err := tw.Flush(); err != nil {
		return n, err
	}
	_, err = fmt.Fprintf(w, "(%d row%s)\n", n, plural(n))
	return n, err
}

// cell keeps a value on one line and out of the column separators.
func cell(s string) string {
	return strings.NewReplacer("\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(s)
}

func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func writeCSV(w io.Writer, rows *sql.Rows, types []*sql.ColumnType) (int64, error) {
	cw := csv.NewWriter(w)
	rec := make([]string, len(types))
	for i, t := range types {
		rec[i] = t.Name()
	}
	if err := cw.Write(rec); err != nil {
		return 0, err
	}
	n, err := eachRow(rows, len(types), func(_ int64, vals []any) error {
		for i, v := range vals {
			rec[i] = text(v)
		}
		return cw.Write(rec)
	})
	if err != nil {
		return n, err
	}
	cw.Flush()
	return n, cw.Error()
}

func writeJSON(w io.Writer, rows *sql.Rows, types []*sql.ColumnType) (int64, error) {
	// Keys are written in column order, so build each object by hand.
	keys := make([][]byte, len(types))
	for i, t := range types {
		k, _ := json.Marshal(t.Name())
		keys[i] = k
	}
	var line bytes.Buffer
	return eachRow(rows, len(types), func(row int64, vals []any) error {
		line.Reset()
		line.WriteByte('{')
		for i, v := range vals {
			if i > 0 {
				line.WriteByte(',')
			}
			line.Write(keys[i])
			line.WriteByte(':')
			b, err := json.Marshal(jsonValue(v))
			if err != nil {
				return fmt.Errorf("cannot encode column %s of row %d as JSON: %w", types[i].Name(), row, err)
			}
			line.Write(b)
		}
		line.WriteString("}\n")
		_, err := w.Write(line.Bytes())
		return err
	})
}
