package lineproto

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// AppendLine appends the canonical line of a point: the measurement, the
// tags sorted by key (empty values left out: line protocol has none), the
// fields sorted by key with their types (1.5, 3i, 4u, true, "text"), the
// nanosecond timestamp, no newline. A field value is a float64, int64,
// uint64, bool or string. Floats are written as strconv's shortest 'g'
// form; in strings only " and \ are escaped, and a newline stays a raw
// newline inside the quotes, which every line-protocol reader accepts (an
// escaped \n would come back as a backslash and an n from some of them).
//
// The error says what cannot be written; dst is then returned as it was.
func AppendLine(dst []byte, measurement string, tags map[string]string, fields map[string]any, ns int64) ([]byte, error) {
	if !validName(measurement) {
		return dst, errors.New("invalid measurement name")
	}
	b := appendEscaped(dst, measurement, clsMeasStop)
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		v := tags[k]
		if v == "" {
			continue
		}
		if !validName(k) || !validName(v) {
			return dst, fmt.Errorf("invalid tag %q=%q", k, v)
		}
		b = appendTag(b, k, v)
	}
	sep := byte(' ')
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if !validName(k) {
			return dst, fmt.Errorf("invalid field key %q", k)
		}
		b = append(b, sep)
		sep = ','
		b = appendEscaped(b, k, clsKeyStop)
		b = append(b, '=')
		switch x := fields[k].(type) {
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return dst, fmt.Errorf("field %q is %v, which line protocol cannot carry", k, x)
			}
			b = strconv.AppendFloat(b, x, 'g', -1, 64)
		case int64:
			b = appendInt(b, x)
		case uint64:
			b = strconv.AppendUint(b, x, 10)
			b = append(b, 'u')
		case bool:
			b = strconv.AppendBool(b, x)
		case string:
			if !utf8.ValidString(x) {
				return dst, fmt.Errorf("field %q is not UTF-8", k)
			}
			b = append(b, '"')
			for i := 0; i < len(x); i++ {
				if x[i] == '"' || x[i] == '\\' {
					b = append(b, '\\')
				}
				b = append(b, x[i])
			}
			b = append(b, '"')
		default:
			return dst, fmt.Errorf("field %q has unsupported type %T", k, x)
		}
	}
	if sep == ' ' {
		return dst, errors.New("no field values")
	}
	b = append(b, ' ')
	return strconv.AppendInt(b, ns, 10), nil
}

// validName reports whether s can be a measurement, tag key, tag value or
// field key: not empty, UTF-8, no control characters, no trailing
// backslash (which would escape the separator after it).
func validName(s string) bool {
	return s != "" && checkTagText(s) == nil
}

func appendTag(dst []byte, k, v string) []byte {
	dst = append(dst, ',')
	dst = appendEscaped(dst, k, clsKeyStop)
	dst = append(dst, '=')
	return appendEscaped(dst, v, clsKeyStop)
}

func appendInt(dst []byte, x int64) []byte {
	return append(strconv.AppendInt(dst, x, 10), 'i')
}

// Encoder writes a body of canonical lines, one field at a time, into a
// buffer it does not allocate: StartLine, AddTag for each tag in
// increasing key order, AddInt or AddFloat for each field, EndLine. A
// line that cannot be written (an invalid name, tags out of order, a NaN)
// is left out whole, and the first such error is kept for Err.
type Encoder struct {
	buf       []byte
	lineStart int
	prevTag   []byte // the key of the line's last tag
	state     uint8
	err       error
}

// The states of an Encoder's line.
const (
	encIdle   = iota // before StartLine, after EndLine
	encTags          // after StartLine or AddTag
	encFields        // after a field
	encFailed        // the line was refused: ignore it up to EndLine
)

// SetBuffer makes the Encoder append to buf from now on and clears its
// error.
func (e *Encoder) SetBuffer(buf []byte) {
	e.buf, e.lineStart, e.state, e.err = buf, len(buf), encIdle, nil
}

// Bytes returns the lines written so far.
func (e *Encoder) Bytes() []byte { return e.buf }

// Err returns the first error since SetBuffer, or nil.
func (e *Encoder) Err() error { return e.err }

// StartLine begins a line of measurement m.
func (e *Encoder) StartLine(m string) {
	if e.state == encTags {
		e.fail("line of %q has no fields", e.buf[e.lineStart:])
	}
	e.lineStart, e.state, e.prevTag = len(e.buf), encTags, e.prevTag[:0]
	if !validName(m) {
		e.fail("invalid measurement %q", m)
		return
	}
	e.buf = appendEscaped(e.buf, m, clsMeasStop)
}

// AddTag adds a tag; its key must sort after the line's previous tag's.
func (e *Encoder) AddTag(k, v string) {
	switch {
	case e.state == encFailed:
		return
	case e.state != encTags:
		e.fail("tag %q outside the tags of a line", k)
	case !validName(k) || !validName(v):
		e.fail("invalid tag %q=%q", k, v)
	case len(e.prevTag) > 0 && k <= string(e.prevTag):
		e.fail("tag key %q out of order (previous key %q)", k, e.prevTag)
	default:
		e.prevTag = append(e.prevTag[:0], k...)
		e.buf = appendTag(e.buf, k, v)
	}
}

// AddInt adds an integer field.
func (e *Encoder) AddInt(k string, v int64) {
	if e.fieldKey(k) {
		e.buf = appendInt(e.buf, v)
	}
}

// AddFloat adds a float field; NaN and infinities, which line protocol
// cannot carry, make the line fail.
func (e *Encoder) AddFloat(k string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		if e.state != encFailed {
			e.fail("field %q is %v, which line protocol cannot carry", k, v)
		}
		return
	}
	if e.fieldKey(k) {
		e.buf = strconv.AppendFloat(e.buf, v, 'g', -1, 64)
	}
}

// fieldKey writes the separator and key=, and reports whether the value
// is to follow.
func (e *Encoder) fieldKey(k string) bool {
	switch {
	case e.state == encFailed:
		return false
	case e.state == encIdle:
		e.fail("field %q outside a line", k)
		return false
	case !validName(k):
		e.fail("invalid field key %q", k)
		return false
	}
	sep := byte(',')
	if e.state == encTags {
		sep = ' '
	}
	e.state = encFields
	e.buf = append(e.buf, sep)
	e.buf = appendEscaped(e.buf, k, clsKeyStop)
	e.buf = append(e.buf, '=')
	return true
}

// EndLine ends the line with a timestamp in unix nanoseconds and a newline.
func (e *Encoder) EndLine(ns int64) {
	switch e.state {
	case encFields:
		e.buf = append(e.buf, ' ')
		e.buf = strconv.AppendInt(e.buf, ns, 10)
		e.buf = append(e.buf, '\n')
	case encTags:
		e.fail("line of %q has no fields", e.buf[e.lineStart:])
	case encIdle:
		e.fail("EndLine without StartLine")
	}
	e.state = encIdle
}

// fail drops the line being written and keeps the first error.
func (e *Encoder) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("line protocol: "+format, args...)
	}
	e.buf = e.buf[:e.lineStart]
	e.state = encFailed
}
