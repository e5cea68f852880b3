package replay

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
)

// Sample is one telemetry sample as the lake and the broker hold it: one
// canonical line-protocol line, or one row of a telemetry object.
type Sample struct {
	Measurement string
	Tags        map[string]string
	// Fields maps a field key to float64, int64, uint64, bool or string.
	Fields    map[string]any
	Time      int64 // Unix nanoseconds
	Partition int32
	Offset    int64
}

// Less orders samples as replay emits them: by time, then partition, then
// offset. Within a partition offsets are unique, so this is a total order.
func Less(a, b *Sample) bool {
	if a.Time != b.Time {
		return a.Time < b.Time
	}
	if a.Partition != b.Partition {
		return a.Partition < b.Partition
	}
	return a.Offset < b.Offset
}

// AppendLine appends s as one canonical line-protocol line, as the agent
// ships it: tags sorted by key (empty values left out: line protocol has
// none), fields sorted by key with their types (1.5, 3i, 4u, true, "text"),
// the exact nanosecond timestamp, no trailing newline. In string fields
// only " and \ are escaped; a newline stays a raw newline inside the
// quotes, which every line-protocol reader accepts (an escaped \n would
// come back as a backslash and an n from some of them).
func AppendLine(dst []byte, s *Sample) ([]byte, error) {
	fail := func(what string) ([]byte, error) {
		return dst, fmt.Errorf("cannot write sample %q at %d (partition %d offset %d) as line protocol: %s", s.Measurement, s.Time, s.Partition, s.Offset, what)
	}
	if !validName(s.Measurement) {
		return fail("invalid measurement name")
	}
	b := appendEscaped(dst, s.Measurement, false)
	for _, k := range slices.Sorted(maps.Keys(s.Tags)) {
		v := s.Tags[k]
		if v == "" {
			continue
		}
		if !validName(k) || !validName(v) {
			return fail(fmt.Sprintf("invalid tag %q=%q", k, v))
		}
		b = append(b, ',')
		b = appendEscaped(b, k, true)
		b = append(b, '=')
		b = appendEscaped(b, v, true)
	}
	sep := byte(' ')
	for _, k := range slices.Sorted(maps.Keys(s.Fields)) {
		if !validName(k) {
			return fail(fmt.Sprintf("invalid field key %q", k))
		}
		b = append(b, sep)
		sep = ','
		b = appendEscaped(b, k, true)
		b = append(b, '=')
		switch x := s.Fields[k].(type) {
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return fail(fmt.Sprintf("field %q is %v, which line protocol cannot carry", k, x))
			}
			b = strconv.AppendFloat(b, x, 'g', -1, 64)
		case int64:
			b = strconv.AppendInt(b, x, 10)
			b = append(b, 'i')
		case uint64:
			b = strconv.AppendUint(b, x, 10)
			b = append(b, 'u')
		case bool:
			b = strconv.AppendBool(b, x)
		case string:
			if !utf8.ValidString(x) {
				return fail(fmt.Sprintf("field %q is not UTF-8", k))
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
			return fail(fmt.Sprintf("field %q has unsupported type %T", k, x))
		}
	}
	if sep == ' ' {
		return fail("no field values")
	}
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.Time, 10)
	return b, nil
}

// validName: not empty, UTF-8, no control characters, no trailing
// backslash (which would escape the separator after it).
func validName(s string) bool {
	if s == "" || !utf8.ValidString(s) || s[len(s)-1] == '\\' {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// appendEscaped escapes commas and spaces, and for tag keys, tag values
// and field keys also equals signs.
func appendEscaped(b []byte, s string, eq bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ',' || c == ' ' || eq && c == '=' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return b
}

// ParseLine decodes one line-protocol line into a Sample (partition and
// offset left zero). A line without a timestamp is refused: every line the
// agent ships carries one.
func ParseLine(line []byte) (Sample, error) {
	dec := lineprotocol.NewDecoderWithBytes(line)
	if !dec.Next() {
		return Sample{}, fmt.Errorf("empty line")
	}
	m, err := dec.Measurement()
	if err != nil {
		return Sample{}, err
	}
	s := Sample{Measurement: string(m), Tags: map[string]string{}, Fields: map[string]any{}}
	for {
		k, v, err := dec.NextTag()
		if err != nil {
			return Sample{}, err
		}
		if k == nil {
			break
		}
		s.Tags[string(k)] = string(v)
	}
	for {
		k, v, err := dec.NextField()
		if err != nil {
			return Sample{}, err
		}
		if k == nil {
			break
		}
		s.Fields[string(k)] = v.Interface()
	}
	ts, err := dec.TimeBytes()
	if err != nil {
		return Sample{}, err
	}
	if len(ts) == 0 {
		return Sample{}, fmt.Errorf("line has no timestamp")
	}
	s.Time, err = strconv.ParseInt(string(ts), 10, 64)
	if err != nil {
		return Sample{}, fmt.Errorf("timestamp %q: %w", ts, err)
	}
	if dec.Next() {
		return Sample{}, fmt.Errorf("more than one line")
	}
	return s, nil
}

// String is the sample's line, for messages and tests.
func (s *Sample) String() string {
	b, err := AppendLine(nil, s)
	if err != nil {
		return strings.TrimSpace(err.Error())
	}
	return string(b)
}
