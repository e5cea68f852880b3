package sink

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Field kinds of a line-protocol field value, and so of a field column.
type fieldKind uint8

const (
	kindFloat fieldKind = iota + 1
	kindInt
	kindUint
	kindBool
	kindString
)

func (k fieldKind) String() string {
	switch k {
	case kindFloat:
		return "float"
	case kindInt:
		return "integer"
	case kindUint:
		return "unsigned"
	case kindBool:
		return "boolean"
	case kindString:
		return "string"
	}
	return "unknown"
}

// parsedField is one field of a decoded line. num holds the float bits, the
// integer, the unsigned integer or 0/1 for a boolean; str the string value.
type parsedField struct {
	key  []byte
	kind fieldKind
	num  uint64
	str  []byte
}

type parsedTag struct {
	key, val []byte
}

// lineParser decodes canonical line-protocol lines (see agent/lineproto,
// "Canonical line") without allocating: the byte slices of a parsed line
// point into the line itself, or into the parser's unescape buffer when the
// token had escapes, and are valid until the next parse.
//
// It accepts any valid line protocol with a nanosecond timestamp; it is
// strict where the canonical form is (one space between sections, no
// trailing garbage) because anything else did not come from the agent and
// belongs in the dead-letter object rather than in a guessed row.
type lineParser struct {
	measurement []byte
	tags        []parsedTag
	fields      []parsedField
	ts          int64
	hasTS       bool
	unesc       []byte
	tagsEnd     int // where the tags ended (the space before the fields), -1 if parse failed before
}

// Decode errors; the text is the dead-letter reason.
var (
	errEmpty            = errors.New("empty line")
	errMeasurement      = errors.New("missing or invalid measurement")
	errTag              = errors.New("invalid tag (want key=value with non-empty key and value)")
	errNoFields         = errors.New("no fields")
	errFieldKey         = errors.New("invalid field key")
	errFieldValue       = errors.New("invalid field value")
	errNumber           = errors.New("invalid number")
	errString           = errors.New("unterminated string field value")
	errTimestamp        = errors.New("invalid timestamp")
	errTrailing         = errors.New("unexpected bytes after the timestamp")
	errControlCharacter = errors.New("control character outside a string field value")
	errUTF8             = errors.New("not valid UTF-8")
)

// parse decodes line. On error the parser's fields are undefined.
func (p *lineParser) parse(line []byte) error {
	p.begin(line)
	p.tags = p.tags[:0]
	p.tagsEnd = -1
	if len(line) == 0 {
		return errEmpty
	}
	if !utf8.Valid(line) {
		return errUTF8
	}
	i := 0
	// Measurement: up to an unescaped ',' or ' '.
	m, i, err := p.token(line, i, false)
	if err != nil {
		return err
	}
	if len(m) == 0 || m[0] == '#' {
		return errMeasurement
	}
	p.measurement = m
	// Tags.
	for i < len(line) && line[i] == ',' {
		i++
		var k, v []byte
		k, i, err = p.token(line, i, true)
		if err != nil {
			return err
		}
		if len(k) == 0 || i >= len(line) || line[i] != '=' {
			return errTag
		}
		i++
		v, i, err = p.token(line, i, true)
		if err != nil {
			return err
		}
		if len(v) == 0 {
			return errTag
		}
		p.tags = append(p.tags, parsedTag{key: k, val: v})
	}
	p.tagsEnd = i
	return p.parseFields(line, i)
}

// begin prepares the parser for line.
func (p *lineParser) begin(line []byte) {
	p.fields = p.fields[:0]
	p.hasTS = false
	p.ts = 0
	if cap(p.unesc) < len(line) {
		p.unesc = make([]byte, 0, len(line)+len(line)/2+64)
	}
	p.unesc = p.unesc[:0]
}

// seriesEnd returns the length of the series key of line — measurement and
// tags, up to the first unescaped space — or -1 if there is no such space.
// A space is escaped exactly when a backslash precedes it: no escape
// sequence ends in a backslash, so that backslash cannot belong to an
// earlier one.
func seriesEnd(line []byte) int {
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

// parseFields decodes the fields and timestamp of line, which start after
// the space at i (the end of the series key). It leaves the measurement and
// tags alone, so a caller that knows them from an identical series key
// need not decode them again; the caller must have checked that
// line[i:] is valid UTF-8 and called begin.
func (p *lineParser) parseFields(line []byte, i int) (err error) {
	if i >= len(line) || line[i] != ' ' {
		return errNoFields
	}
	i++
	// Fields.
	for {
		var k []byte
		k, i, err = p.token(line, i, true)
		if err != nil {
			return err
		}
		if len(k) == 0 || i >= len(line) || line[i] != '=' {
			if len(k) == 0 && len(p.fields) == 0 {
				return errNoFields
			}
			return errFieldKey
		}
		i++
		f := parsedField{key: k}
		if i, err = p.fieldValue(line, i, &f); err != nil {
			return err
		}
		p.fields = append(p.fields, f)
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
		return errFieldValue
	}
	i++
	ts, n, ok := parseInt(line[i:])
	if !ok {
		return errTimestamp
	}
	if i+n != len(line) {
		return errTrailing
	}
	p.ts, p.hasTS = ts, true
	return nil
}

// token reads a measurement (tagLike=false: escapes `\,` `\ `) or a tag
// key, tag value or field key (tagLike=true: escapes `\,` `\=` `\ `) that
// starts at i, up to the first unescaped separator. Other backslashes are
// literal, as in InfluxDB.
func (p *lineParser) token(line []byte, i int, tagLike bool) ([]byte, int, error) {
	start := i
	escaped := false
	for i < len(line) {
		c := line[i]
		switch {
		case c == ',' || c == ' ' || tagLike && c == '=':
			goto done
		case c == '\\' && i+1 < len(line) && (line[i+1] == ',' || line[i+1] == ' ' || line[i+1] == '=' && tagLike):
			escaped = true
			i += 2
			continue
		case c < 0x20 || c == 0x7f:
			return nil, i, errControlCharacter
		}
		i++
	}
done:
	tok := line[start:i]
	if !escaped {
		return tok, i, nil
	}
	o := len(p.unesc)
	for j := 0; j < len(tok); j++ {
		c := tok[j]
		if c == '\\' && j+1 < len(tok) && (tok[j+1] == ',' || tok[j+1] == ' ' || tok[j+1] == '=' && tagLike) {
			j++
			c = tok[j]
		}
		p.unesc = append(p.unesc, c)
	}
	return p.unesc[o:len(p.unesc):len(p.unesc)], i, nil
}

// fieldValue reads the value of a field starting at i into f.
func (p *lineParser) fieldValue(line []byte, i int, f *parsedField) (int, error) {
	if i >= len(line) {
		return i, errFieldValue
	}
	if line[i] == '"' {
		i++
		start := i
		escaped := false
		for ; i < len(line); i++ {
			c := line[i]
			if c == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
				escaped = true
				i++
				continue
			}
			if c == '"' {
				break
			}
		}
		if i >= len(line) {
			return i, errString
		}
		s := line[start:i]
		i++
		if escaped {
			o := len(p.unesc)
			for j := 0; j < len(s); j++ {
				c := s[j]
				if c == '\\' && j+1 < len(s) && (s[j+1] == '"' || s[j+1] == '\\') {
					j++
					c = s[j]
				}
				p.unesc = append(p.unesc, c)
			}
			s = p.unesc[o:len(p.unesc):len(p.unesc)]
		}
		f.kind, f.str = kindString, s
		return i, nil
	}
	start := i
	for i < len(line) && line[i] != ',' && line[i] != ' ' {
		i++
	}
	v := line[start:i]
	if len(v) == 0 {
		return i, errFieldValue
	}
	switch last := v[len(v)-1]; {
	case last == 'i' && len(v) > 1:
		n, k, ok := parseInt(v[:len(v)-1])
		if !ok || k != len(v)-1 {
			return i, errNumber
		}
		f.kind, f.num = kindInt, uint64(n)
		return i, nil
	case last == 'u' && len(v) > 1:
		n, ok := parseUint(v[:len(v)-1])
		if !ok {
			return i, errNumber
		}
		f.kind, f.num = kindUint, n
		return i, nil
	}
	switch string(v) {
	case "t", "T", "true", "True", "TRUE":
		f.kind, f.num = kindBool, 1
		return i, nil
	case "f", "F", "false", "False", "FALSE":
		f.kind, f.num = kindBool, 0
		return i, nil
	}
	x, ok := parseFloat(v)
	if !ok {
		return i, errNumber
	}
	f.kind, f.num = kindFloat, math.Float64bits(x)
	return i, nil
}

// parseFloat accepts the decimal floats line protocol allows (digits, one
// optional sign, point and exponent): not inf, nan, hex or underscores,
// which strconv would take.
func parseFloat(v []byte) (float64, bool) {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	digits := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
		digits++
	}
	if i < len(v) && v[i] == '.' {
		i++
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return 0, false
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		exp := i
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
		if i == exp {
			return 0, false
		}
	}
	if i != len(v) {
		return 0, false
	}
	x, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(v), len(v)), 64)
	if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
		return 0, false
	}
	return x, true
}

// parseInt reads an optionally negative decimal int64 at the start of b and
// returns it with the number of bytes read.
func parseInt(b []byte) (int64, int, bool) {
	neg := false
	i := 0
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start := i
	var u uint64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		d := uint64(b[i] - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, i, false
		}
		u = u*10 + d
		i++
	}
	if i == start {
		return 0, i, false
	}
	if neg {
		if u > 1<<63 {
			return 0, i, false
		}
		return int64(-u), i, true //nolint:gosec // -u of a value ≤ 2^63 wraps into range
	}
	if u > math.MaxInt64 {
		return 0, i, false
	}
	return int64(u), i, true
}

// parseUint reads a whole decimal uint64.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	return u, true
}
