package pgwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/duckdb/duckdb-go/v2"
	"github.com/jackc/pgx/v5/pgtype"
)

// The PostgreSQL type OIDs results and parameters use.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidFloat4      = 700
	oidFloat8      = 701
	oidUnknown     = 705
	oidVarchar     = 1043
	oidDate        = 1082
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
)

// pgEpoch is where PostgreSQL's binary timestamps and dates count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// oidOf maps DuckDB's type name to the PostgreSQL type a column is sent
// as. Types without a counterpart here (lists, structs, intervals, UUIDs...)
// are sent as text in DuckDB's own text form.
func oidOf(duckType string) uint32 {
	switch duckType {
	case "BOOLEAN":
		return oidBool
	case "TINYINT", "SMALLINT", "UTINYINT":
		return oidInt2
	case "INTEGER", "USMALLINT":
		return oidInt4
	case "BIGINT", "UINTEGER":
		return oidInt8
	case "UBIGINT", "HUGEINT", "UHUGEINT":
		return oidNumeric
	case "FLOAT":
		return oidFloat4
	case "DOUBLE":
		return oidFloat8
	case "VARCHAR":
		return oidText
	case "BLOB":
		return oidBytea
	case "DATE":
		return oidDate
	case "TIMESTAMP", "TIMESTAMP_NS", "TIMESTAMP_MS", "TIMESTAMP_S":
		return oidTimestamp
	case "TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ":
		return oidTimestamptz
	}
	if strings.HasPrefix(duckType, "DECIMAL") {
		return oidNumeric
	}
	return oidText
}

// typeSize is the fixed width PostgreSQL reports for a type, -1 for
// variable-length ones.
func typeSize(oid uint32) int16 {
	switch oid {
	case oidBool:
		return 1
	case oidInt2:
		return 2
	case oidInt4, oidFloat4, oidDate:
		return 4
	case oidInt8, oidFloat8, oidTimestamp, oidTimestamptz:
		return 8
	}
	return -1
}

// encode appends the value in the wire format of the type oid, text
// (format 0) or binary (1). v is what the DuckDB driver returns; numbers
// convert between widths so a column keeps the type its statement was
// described with.
func encode(buf []byte, oid uint32, format int16, v any) ([]byte, error) {
	if format == 0 {
		return append(buf, textOf(oid, v)...), nil
	}
	switch oid {
	case oidBool:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("%v (%T) is not a boolean", v, v)
		}
		if b {
			return append(buf, 1), nil
		}
		return append(buf, 0), nil
	case oidInt2, oidInt4, oidInt8:
		n, ok := asInt(v)
		if !ok {
			return nil, fmt.Errorf("%v (%T) is not an integer", v, v)
		}
		switch oid {
		case oidInt2:
			if n < math.MinInt16 || n > math.MaxInt16 {
				return nil, fmt.Errorf("%d does not fit int2", n)
			}
			return binary.BigEndian.AppendUint16(buf, uint16(n)), nil
		case oidInt4:
			if n < math.MinInt32 || n > math.MaxInt32 {
				return nil, fmt.Errorf("%d does not fit int4", n)
			}
			return binary.BigEndian.AppendUint32(buf, uint32(n)), nil
		}
		return binary.BigEndian.AppendUint64(buf, uint64(n)), nil
	case oidFloat4, oidFloat8:
		f, ok := asFloat(v)
		if !ok {
			return nil, fmt.Errorf("%v (%T) is not a number", v, v)
		}
		if oid == oidFloat4 {
			return binary.BigEndian.AppendUint32(buf, math.Float32bits(float32(f))), nil
		}
		return binary.BigEndian.AppendUint64(buf, math.Float64bits(f)), nil
	case oidTimestamp, oidTimestamptz:
		t, ok := v.(time.Time)
		if !ok {
			return nil, fmt.Errorf("%v (%T) is not a time", v, v)
		}
		return binary.BigEndian.AppendUint64(buf, uint64(t.Sub(pgEpoch).Microseconds())), nil
	case oidDate:
		t, ok := v.(time.Time)
		if !ok {
			return nil, fmt.Errorf("%v (%T) is not a date", v, v)
		}
		days := int32(math.Floor(t.Sub(pgEpoch).Hours() / 24))
		return binary.BigEndian.AppendUint32(buf, uint32(days)), nil
	case oidNumeric:
		n, err := numericOf(v)
		if err != nil {
			return nil, err
		}
		return pgtype.NumericCodec{}.PlanEncode(nil, oidNumeric, 1, n).Encode(n, buf)
	case oidBytea:
		if b, ok := v.([]byte); ok {
			return append(buf, b...), nil
		}
	}
	// text, varchar and everything sent as text: the binary form of text
	// is its bytes.
	return append(buf, textOf(oid, v)...), nil
}

// textOf is a value in PostgreSQL's text output format for oid.
func textOf(oid uint32, v any) string {
	switch x := v.(type) {
	case bool:
		if x {
			return "t"
		}
		return "f"
	case float64:
		return floatText(x, 64)
	case float32:
		return floatText(float64(x), 32)
	case time.Time:
		switch oid {
		case oidDate:
			return x.UTC().Format("2006-01-02")
		case oidTimestamp:
			return x.UTC().Format("2006-01-02 15:04:05.999999")
		}
		return x.UTC().Format("2006-01-02 15:04:05.999999") + "+00"
	case []byte:
		if oid == oidBytea {
			return `\x` + fmt.Sprintf("%x", x)
		}
		return string(x)
	case string:
		return x
	case duckdb.Decimal:
		return decimalText(x)
	case *big.Int:
		return x.String()
	}
	if oid == oidFloat8 || oid == oidFloat4 {
		if f, ok := asFloat(v); ok {
			return floatText(f, 64)
		}
	}
	return fmt.Sprint(v)
}

func floatText(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

func decimalText(d duckdb.Decimal) string {
	if d.Value == nil {
		return "0"
	}
	s := new(big.Int).Abs(d.Value).String()
	if d.Scale > 0 {
		for len(s) <= int(d.Scale) {
			s = "0" + s
		}
		s = s[:len(s)-int(d.Scale)] + "." + s[len(s)-int(d.Scale):]
	}
	if d.Value.Sign() < 0 {
		s = "-" + s
	}
	return s
}

func numericOf(v any) (pgtype.Numeric, error) {
	switch x := v.(type) {
	case duckdb.Decimal:
		if x.Value == nil {
			return pgtype.Numeric{Int: big.NewInt(0), Valid: true}, nil
		}
		return pgtype.Numeric{Int: x.Value, Exp: -int32(x.Scale), Valid: true}, nil
	case *big.Int:
		return pgtype.Numeric{Int: x, Valid: true}, nil
	case uint64:
		return pgtype.Numeric{Int: new(big.Int).SetUint64(x), Valid: true}, nil
	}
	if n, ok := asInt(v); ok {
		return pgtype.Numeric{Int: big.NewInt(n), Valid: true}, nil
	}
	var n pgtype.Numeric
	if err := n.Scan(textOf(oidNumeric, v)); err != nil {
		return n, fmt.Errorf("%v (%T) is not a number", v, v)
	}
	return n, nil
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	case *big.Int:
		return x.Int64(), x.IsInt64()
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case duckdb.Decimal:
		return x.Float64(), true
	}
	if n, ok := asInt(v); ok {
		return float64(n), true
	}
	return 0, false
}

// decodeParam turns a bound parameter into the Go value DuckDB binds: the
// binary forms of the common types are decoded, text stays text for DuckDB
// to cast (as PostgreSQL treats an untyped literal), except where the type
// is known and the driver needs a typed value.
func decodeParam(oid uint32, format int16, b []byte) (any, error) {
	if b == nil {
		return nil, nil
	}
	if format == 0 {
		s := string(b)
		switch oid {
		case oidInt2, oidInt4, oidInt8:
			return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		case oidFloat4, oidFloat8:
			return strconv.ParseFloat(strings.TrimSpace(s), 64)
		case oidBool:
			switch strings.ToLower(strings.TrimSpace(s)) {
			case "t", "true", "on", "yes", "1":
				return true, nil
			case "f", "false", "off", "no", "0":
				return false, nil
			}
			return nil, fmt.Errorf("%q is not a boolean", s)
		case oidTimestamptz, oidTimestamp, oidDate:
			if t, ok := parseTime(s); ok {
				return t, nil
			}
			return nil, fmt.Errorf("%q is not a time", s)
		}
		return s, nil
	}
	need := func(n int) error {
		if len(b) != n {
			return fmt.Errorf("binary parameter of type %d has %d bytes, want %d", oid, len(b), n)
		}
		return nil
	}
	switch oid {
	case oidBool:
		if err := need(1); err != nil {
			return nil, err
		}
		return b[0] != 0, nil
	case oidInt2:
		if err := need(2); err != nil {
			return nil, err
		}
		return int64(int16(binary.BigEndian.Uint16(b))), nil
	case oidInt4:
		if err := need(4); err != nil {
			return nil, err
		}
		return int64(int32(binary.BigEndian.Uint32(b))), nil
	case oidInt8:
		if err := need(8); err != nil {
			return nil, err
		}
		return int64(binary.BigEndian.Uint64(b)), nil
	case oidFloat4:
		if err := need(4); err != nil {
			return nil, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(b))), nil
	case oidFloat8:
		if err := need(8); err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
	case oidTimestamp, oidTimestamptz:
		if err := need(8); err != nil {
			return nil, err
		}
		return pgEpoch.Add(time.Duration(int64(binary.BigEndian.Uint64(b))) * time.Microsecond), nil
	case oidDate:
		if err := need(4); err != nil {
			return nil, err
		}
		return pgEpoch.AddDate(0, 0, int(int32(binary.BigEndian.Uint32(b)))), nil
	case oidText, oidVarchar, oidUnknown, 0:
		return string(b), nil
	case oidBytea:
		return append([]byte(nil), b...), nil
	case oidNumeric:
		var n pgtype.Numeric
		if err := (pgtype.NumericCodec{}).PlanScan(nil, oidNumeric, 1, &n).Scan(b, &n); err != nil {
			return nil, fmt.Errorf("binary numeric parameter: %w", err)
		}
		f, err := n.Float64Value()
		if err != nil {
			return nil, err
		}
		return f.Float64, nil
	}
	return nil, errors.New("binary parameters of type " + strconv.Itoa(int(oid)) + " are not supported; send it as text")
}

// parseTime reads the time forms clients send: RFC 3339 (Grafana's
// $__timeFilter), PostgreSQL's text output and plain dates.
func parseTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999Z07",
		"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
