package lineproto

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

// Tag is one tag of a decoded line, key and value without escapes.
type Tag struct {
	Key, Value []byte
}

// FieldValue is one field of a decoded line: its key without escapes, its
// type and its value. Num holds the float's bits, the int64, the uint64,
// or 0 or 1 for a boolean; Str the string without escapes.
type FieldValue struct {
	Key  []byte
	Type FieldType
	Num  uint64
	Str  []byte
}

// Float, Int, Uint and Bool read Num as the value of that type.
func (f *FieldValue) Float() float64 { return math.Float64frombits(f.Num) }
func (f *FieldValue) Int() int64     { return int64(f.Num) } //nolint:gosec // the bits of an int64
func (f *FieldValue) Uint() uint64   { return f.Num }
func (f *FieldValue) Bool() bool     { return f.Num != 0 }

// Interface returns the value as float64, int64, uint64, bool or string.
func (f *FieldValue) Interface() any {
	switch f.Type {
	case Float:
		return f.Float()
	case Integer:
		return f.Int()
	case Unsigned:
		return f.Uint()
	case Boolean:
		return f.Bool()
	case String:
		return string(f.Str)
	}
	return nil
}

// Decoder decodes canonical lines (see "Canonical line" in the package
// doc) into their parts without allocating once its buffers have grown:
// the byte slices of a decoded line point into the line itself, or into
// the Decoder's buffer when the token had escapes, and are valid until the
// next Decode or DecodeFields.
//
// It accepts any valid line with a nanosecond timestamp, or none; it is
// strict where the canonical form is (one space between sections, no
// trailing bytes), as a line in another form did not come from Normalize.
// Unlike Normalize it neither refuses duplicate tag keys nor checks the
// timestamp against InfluxDB's range: a reader takes what was written.
type Decoder struct {
	Measurement []byte
	Tags        []Tag
	Fields      []FieldValue
	Time        int64 // unix nanoseconds, if HasTime
	HasTime     bool
	// TagsEnd is where the tags ended in the last line Decode accepted:
	// the index of the space before the fields.
	TagsEnd int

	unesc []byte
}

// The errors of Decode and DecodeFields. Their texts are the reasons the
// sink gives for a dead letter, so they stay as they are.
var (
	errEmptyLine      = errors.New("empty line")
	errDecMeasurement = errors.New("missing or invalid measurement")
	errDecTag         = errors.New("invalid tag (want key=value with non-empty key and value)")
	errDecNoFields    = errors.New("no fields")
	errDecFieldKey    = errors.New("invalid field key")
	errDecFieldValue  = errors.New("invalid field value")
	errDecNumber      = errors.New("invalid number")
	errDecString      = errors.New("unterminated string field value")
	errDecTimestamp   = errors.New("invalid timestamp")
	errDecTrailing    = errors.New("unexpected bytes after the timestamp")
	errDecControl     = errors.New("control character outside a string field value")
	errDecUTF8        = errors.New("not valid UTF-8")
)

// Decode decodes line. On error the Decoder's results are undefined.
func (d *Decoder) Decode(line []byte) error {
	d.begin(line)
	d.Tags = d.Tags[:0]
	d.TagsEnd = -1
	if len(line) == 0 {
		return errEmptyLine
	}
	if !utf8.Valid(line) {
		return errDecUTF8
	}
	m, i, err := d.token(line, 0, clsMeasStop)
	if err != nil {
		return err
	}
	if len(m) == 0 || m[0] == '#' {
		return errDecMeasurement
	}
	d.Measurement = m
	for i < len(line) && line[i] == ',' {
		var k, v []byte
		k, i, err = d.token(line, i+1, clsKeyStop)
		if err != nil {
			return err
		}
		if len(k) == 0 || i >= len(line) || line[i] != '=' {
			return errDecTag
		}
		v, i, err = d.token(line, i+1, clsKeyStop)
		if err != nil {
			return err
		}
		if len(v) == 0 {
			return errDecTag
		}
		d.Tags = append(d.Tags, Tag{Key: k, Value: v})
	}
	d.TagsEnd = i
	return d.fields(line, i)
}

// DecodeFields decodes the fields and timestamp of line, whose series key
// (see SeriesEnd) ends at k, and leaves Measurement, Tags and TagsEnd
// alone: a caller that decoded an identical series key before need not
// decode it again. It returns the error Decode would give for the line
// when Decode accepts its series key.
func (d *Decoder) DecodeFields(line []byte, k int) error {
	d.begin(line)
	if !utf8.Valid(line[k:]) {
		return errDecUTF8
	}
	return d.fields(line, k)
}

// SeriesEnd returns the length of the series key of line — measurement and
// tags, up to the first unescaped space — or -1 if there is no such space.
// A space is escaped exactly when a backslash precedes it: no escape
// sequence ends in a backslash, so that backslash cannot belong to an
// earlier one.
func SeriesEnd(line []byte) int {
	off := 0
	for {
		j := bytes.IndexByte(line[off:], ' ')
		if j < 0 {
			return -1
		}
		j += off
		if j == 0 || line[j-1] != '\\' {
			return j
		}
		off = j + 1
	}
}

// begin prepares the Decoder for line.
func (d *Decoder) begin(line []byte) {
	d.Fields = d.Fields[:0]
	d.HasTime = false
	d.Time = 0
	if cap(d.unesc) < len(line) {
		d.unesc = make([]byte, 0, len(line)+len(line)/2+64)
	}
	d.unesc = d.unesc[:0]
}

// fields decodes the fields and timestamp that follow the space at
// line[i].
func (d *Decoder) fields(line []byte, i int) (err error) {
	if i >= len(line) || line[i] != ' ' {
		return errDecNoFields
	}
	i++
	for {
		var k []byte
		k, i, err = d.token(line, i, clsKeyStop)
		if err != nil {
			return err
		}
		if len(k) == 0 || i >= len(line) || line[i] != '=' {
			if len(k) == 0 && len(d.Fields) == 0 {
				return errDecNoFields
			}
			return errDecFieldKey
		}
		d.Fields = append(d.Fields, FieldValue{Key: k})
		if i, err = d.value(line, i+1, &d.Fields[len(d.Fields)-1]); err != nil {
			return err
		}
		if i < len(line) && line[i] == ',' {
			i++
			continue
		}
		break
	}
	if i == len(line) {
		return nil
	}
	if line[i] != ' ' {
		return errDecFieldValue
	}
	i++
	if ts, ok := canonicalNanos(line[i:]); ok {
		d.Time, d.HasTime = ts, true
		return nil
	}
	// The timestamp: a bad number is one error, good digits followed by
	// anything else another.
	e := i
	if e < len(line) && line[e] == '-' {
		e++
	}
	for e < len(line) && line[e]-'0' < 10 {
		e++
	}
	ts, ok := parseInt64(line[i:e])
	if !ok {
		return errDecTimestamp
	}
	if e != len(line) {
		return errDecTrailing
	}
	d.Time, d.HasTime = ts, true
	return nil
}

// token reads a measurement (stop = clsMeasStop) or a tag key, tag value
// or field key (stop = clsKeyStop) that starts at i, up to the first
// unescaped stop byte, and returns it without escapes.
func (d *Decoder) token(line []byte, i int, stop uint8) ([]byte, int, error) {
	end, esc, _, bad := scanEsc(line, i, stop)
	if bad >= 0 {
		return nil, bad, errDecControl
	}
	if !esc {
		return line[i:end], end, nil
	}
	o := len(d.unesc)
	d.unesc = appendUnescaped(d.unesc, line[i:end], stop)
	return d.unesc[o:len(d.unesc):len(d.unesc)], end, nil
}

// value reads the field value that starts at line[i] into f and returns
// the index after it.
func (d *Decoder) value(line []byte, i int, f *FieldValue) (int, error) {
	if i >= len(line) {
		return i, errDecFieldValue
	}
	if line[i] == '"' {
		e := stringEnd(line, i)
		if e < 0 {
			return len(line), errDecString
		}
		s := line[i+1 : e]
		if bytes.IndexByte(s, '\\') >= 0 {
			o := len(d.unesc)
			d.unesc = appendUnescapedString(d.unesc, s)
			s = d.unesc[o:len(d.unesc):len(d.unesc)]
		}
		f.Type, f.Str = String, s
		return e + 1, nil
	}
	start := i
	for i < len(line) && line[i] != ',' && line[i] != ' ' {
		i++
	}
	v := line[start:i]
	if len(v) == 0 {
		return i, errDecFieldValue
	}
	if len(v) > 1 {
		switch v[len(v)-1] {
		case 'i':
			n, ok := parseInt64(v[:len(v)-1])
			if !ok {
				return i, errDecNumber
			}
			f.Type, f.Num = Integer, uint64(n) //nolint:gosec // the bits of an int64
			return i, nil
		case 'u':
			n, err := strconv.ParseUint(unsafeString(v[:len(v)-1]), 10, 64)
			if err != nil {
				return i, errDecNumber
			}
			f.Type, f.Num = Unsigned, n
			return i, nil
		}
	}
	if validBool(v) {
		f.Type, f.Num = Boolean, 0
		if c := v[0]; c == 't' || c == 'T' {
			f.Num = 1
		}
		return i, nil
	}
	x, ok := parseFloat(v)
	if !ok {
		return i, errDecNumber
	}
	f.Type, f.Num = Float, math.Float64bits(x)
	return i, nil
}

// parseFloat parses a float field value: decimal only (no inf, nan, hex or
// '_', which strconv would take), finite, as Normalize accepts it.
func parseFloat(v []byte) (float64, bool) {
	if x, ok := exactFloat(v); ok {
		return x, true
	}
	if c := v[0]; c != '-' && c != '.' && c-'0' >= 10 || decimalFloat(v) == floatInvalid {
		return 0, false
	}
	x, err := strconv.ParseFloat(unsafeString(v), 64)
	return x, err == nil
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// exactFloat parses the common spelling of a float field value, -?d*.?d*
// without exponent, whose significant digits make an integer m below 2^53 and that
// has at most 22 digits after the point: m and 10^k are then exact
// float64s and one division rounds m/10^k correctly, to what strconv
// returns. It reports false for anything else, which parseFloat then
// takes the general way.
func exactFloat(v []byte) (float64, bool) {
	i, neg := 0, false
	if v[0] == '-' {
		i, neg = 1, true
	}
	var m uint64
	digits, point, seen := 0, -1, false
	for ; i < len(v); i++ {
		c := v[i]
		switch {
		case c-'0' < 10:
			// Leading zeros do not count: 19 digits fit in m.
			if seen = true; m == 0 && c == '0' {
				continue
			}
			if digits++; digits > 19 {
				return 0, false
			}
			m = m*10 + uint64(c-'0')
		case c == '.' && point < 0:
			point = i
		default:
			return 0, false
		}
	}
	frac := 0
	if point >= 0 {
		frac = len(v) - 1 - point
	}
	if !seen || m > 1<<53 || frac >= len(pow10) {
		return 0, false
	}
	x := float64(m) / pow10[frac]
	if neg {
		x = -x
	}
	return x, true
}

// appendUnescapedString appends the text of a string field value without
// its escapes: `\"` and `\\` stand for one byte, any other backslash for
// itself.
func appendUnescapedString(dst, s []byte) []byte {
	for j := 0; j < len(s); j++ {
		c := s[j]
		if c == '\\' && j+1 < len(s) && (s[j+1] == '"' || s[j+1] == '\\') {
			j++
			c = s[j]
		}
		dst = append(dst, c)
	}
	return dst
}
