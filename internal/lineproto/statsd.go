package lineproto

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// maxStatsDTags bounds the DogStatsD tags of one line; duplicates are found
// by rescanning, which is quadratic in their number.
const maxStatsDTags = 128

// AppendStatsD converts one StatsD line (name:value|type[|@rate][|#tags]
// [|T<unix seconds>]) to line protocol and appends the result to dst: one
// line per value, each ended by '\n'. The lines carry no timestamp unless
// the StatsD line has a DogStatsD T section, so normalize them with
// Nanosecond precision. See the package documentation for the mapping.
//
// On error, dst is returned unchanged with a *SyntaxError. AppendStatsD does
// not allocate on success.
func AppendStatsD(dst, line []byte) ([]byte, error) {
	if len(line) > DefaultMaxLineBytes {
		return dst, &SyntaxError{Err: ErrLineTooLong, Column: DefaultMaxLineBytes + 1,
			Detail: fmt.Sprintf("%d bytes, limit %d", len(line), DefaultMaxLineBytes)}
	}
	b := bytes.TrimRight(line, " \r\n")
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	if !utf8.Valid(b) {
		return dst, syntaxErr(ErrInvalidUTF8, invalidUTF8At(b), "")
	}
	for j := i; j < len(b); j++ {
		if class[b[j]]&clsNonPrint != 0 {
			return dst, syntaxErr(ErrInvalidStatsD, j, "control character %q", b[j])
		}
	}
	b = b[i:]
	if bytes.HasPrefix(b, []byte("_e{")) || bytes.HasPrefix(b, []byte("_sc|")) {
		return dst, syntaxErr(ErrInvalidStatsD, i, "DogStatsD events and service checks are not supported")
	}

	// name:values|type|sections...
	colon := bytes.IndexByte(b, ':')
	if colon < 0 {
		return dst, syntaxErr(ErrInvalidStatsD, i+len(b), "missing ':' after the metric name")
	}
	name := b[:colon]
	if err := checkStatsDName(name); err != "" {
		return dst, syntaxErr(ErrInvalidStatsD, i, "metric name %q: %s", name, err)
	}
	off := i + colon + 1
	rest := b[colon+1:]
	values, rest, ok := bytes.Cut(rest, []byte{'|'})
	if !ok {
		return dst, syntaxErr(ErrInvalidStatsD, off+len(values), "missing '|' and type after the value")
	}
	if len(values) == 0 {
		return dst, syntaxErr(ErrInvalidStatsD, off, "missing value")
	}
	typOff := off + len(values) + 1
	typ, rest, _ := bytes.Cut(rest, []byte{'|'})
	var metricType string
	switch string(typ) {
	case "c":
		metricType = "counter"
	case "g":
		metricType = "gauge"
	case "ms", "h", "d":
		metricType = "timing"
	case "s":
		metricType = "set"
	default:
		return dst, syntaxErr(ErrInvalidStatsD, typOff, "unknown type %q (want c, g, ms, h, d or s)", typ)
	}

	// Optional sections, in any order. Unknown ones (such as DogStatsD's
	// c:<container id>) are ignored, as DogStatsD does.
	secOff := typOff + len(typ) + 1
	rate := 1.0
	var tags []byte
	var tsNanos int64
	hasTS, hasTags := false, false
	for len(rest) > 0 {
		var sec []byte
		sec, rest, _ = bytes.Cut(rest, []byte{'|'})
		switch {
		case len(sec) == 0:
		case sec[0] == '@':
			r, err := strconv.ParseFloat(unsafeString(sec[1:]), 64)
			if err != nil || !(r > 0 && r <= 1) {
				return dst, syntaxErr(ErrInvalidStatsD, secOff, "sample rate %q is not in (0, 1]", sec[1:])
			}
			rate = r
		case sec[0] == '#':
			if hasTags {
				return dst, syntaxErr(ErrInvalidStatsD, secOff, "more than one tag section")
			}
			hasTags, tags = true, sec[1:]
			if err := checkStatsDTags(tags); err != "" {
				return dst, syntaxErr(ErrInvalidStatsD, secOff, "%s", err)
			}
		case sec[0] == 'T':
			ts, ok := parseInt64(sec[1:])
			if ok {
				tsNanos, ok = toNanos(ts, int64(1e9))
			}
			if !ok {
				return dst, syntaxErr(ErrInvalidStatsD, secOff, "timestamp %q is not unix seconds in range", sec[1:])
			}
			hasTS = true
		}
		secOff += len(sec) + 1
	}

	// Check all values before writing anything, so that an error leaves dst
	// as it was.
	for v := range bytes.SplitSeq(values, []byte{':'}) {
		if len(v) == 0 {
			return dst, syntaxErr(ErrInvalidStatsD, off, "empty value")
		}
		if metricType != "set" {
			if _, err := statsDNumber(v); err != "" {
				return dst, syntaxErr(ErrInvalidStatsD, off, "value %q: %s", v, err)
			}
		}
		off += len(v) + 1
	}

	for v := range bytes.SplitSeq(values, []byte{':'}) {
		dst = appendEscaped(dst, unsafeString(name), clsMeasStop)
		dst = append(dst, ",metric_type="...)
		dst = append(dst, metricType...)
		dst = appendStatsDTags(dst, tags)
		dst = append(dst, " value="...)
		switch metricType {
		case "set":
			dst = append(dst, '"')
			for _, c := range v {
				if c == '"' || c == '\\' {
					dst = append(dst, '\\')
				}
				dst = append(dst, c)
			}
			dst = append(dst, '"')
		case "counter":
			x, _ := statsDNumber(v)
			dst = appendFloat(dst, x/rate)
		case "gauge":
			x, _ := statsDNumber(v)
			dst = appendFloat(dst, x)
			if v[0] == '+' || v[0] == '-' {
				dst = append(dst, ",delta=true"...)
			}
		case "timing":
			x, _ := statsDNumber(v)
			dst = appendFloat(dst, x)
			if rate != 1 {
				dst = append(dst, ",sample_rate="...)
				dst = appendFloat(dst, rate)
			}
		}
		if hasTS {
			dst = append(dst, ' ')
			dst = strconv.AppendInt(dst, tsNanos, 10)
		}
		dst = append(dst, '\n')
	}
	return dst, nil
}

// checkStatsDName reports why name cannot be a measurement, or "".
func checkStatsDName(name []byte) string {
	switch {
	case len(name) == 0:
		return "empty"
	case name[0] == '#':
		return "starts with '#'"
	case name[len(name)-1] == '\\':
		return "ends with a backslash"
	case bytes.IndexByte(name, '|') >= 0:
		return "holds '|'"
	}
	return ""
}

// statsDNumber parses a StatsD value: a decimal number with an optional
// sign, finite.
func statsDNumber(v []byte) (float64, string) {
	for _, c := range v {
		if class[c]&clsNumber == 0 {
			return 0, "not a decimal number"
		}
	}
	x, err := strconv.ParseFloat(unsafeString(v), 64)
	if err != nil {
		return 0, numErrText(err, "number")
	}
	return x, ""
}

// appendFloat appends x in a form both InfluxDB and lineprotocol/v2 read as
// a float: integral values without exponent while that is short.
func appendFloat(dst []byte, x float64) []byte {
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return strconv.AppendFloat(dst, x, 'f', -1, 64)
	}
	return strconv.AppendFloat(dst, x, 'g', -1, 64)
}

// The DogStatsD tags section is "k:v,k2:v2,bare". A bare tag becomes
// bare=true; a tag with an empty key or value is dropped (line protocol has
// no empty tag values); of several tags with one key the first wins; a
// metric_type tag is dropped, the converter's own wins.

// checkStatsDTags reports why the tags section cannot be converted, or "".
func checkStatsDTags(tags []byte) string {
	n := 0
	for t := range bytes.SplitSeq(tags, []byte{','}) {
		k, v, _ := statsDTag(t)
		if len(k) > 0 && k[len(k)-1] == '\\' || len(v) > 0 && v[len(v)-1] == '\\' {
			return fmt.Sprintf("tag %q ends with a backslash", t)
		}
		if n++; n > maxStatsDTags {
			return fmt.Sprintf("more than %d tags", maxStatsDTags)
		}
	}
	return ""
}

var trueBytes = []byte("true")

// statsDTag splits one DogStatsD tag into key and value.
func statsDTag(t []byte) (k, v []byte, ok bool) {
	k, v, found := bytes.Cut(t, []byte{':'})
	if !found {
		v = trueBytes
	}
	return k, v, len(k) > 0 && len(v) > 0 && string(k) != "metric_type"
}

func appendStatsDTags(dst, tags []byte) []byte {
	for pos := 0; pos < len(tags); {
		end := bytes.IndexByte(tags[pos:], ',')
		if end < 0 {
			end = len(tags)
		} else {
			end += pos
		}
		k, v, ok := statsDTag(tags[pos:end])
		if ok && !statsDTagSeen(tags[:pos], k) {
			dst = append(dst, ',')
			dst = appendEscaped(dst, unsafeString(k), clsKeyStop)
			dst = append(dst, '=')
			dst = appendEscaped(dst, unsafeString(v), clsKeyStop)
		}
		pos = end + 1
	}
	return dst
}

// statsDTagSeen reports whether an earlier, kept tag in prev has key k.
func statsDTagSeen(prev, k []byte) bool {
	for t := range bytes.SplitSeq(prev, []byte{','}) {
		if pk, _, ok := statsDTag(t); ok && bytes.Equal(pk, k) {
			return true
		}
	}
	return false
}
