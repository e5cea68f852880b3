package lineproto

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"unsafe"
)

// Byte classes of the line-protocol grammar, as lineprotocol/v2 and
// InfluxDB's models package define them.
const (
	clsNonPrint  = 1 << iota // 0x00-0x1f and 0x7f: invalid outside string field values
	clsMeasStop              // ',' ' ': end a measurement (and may be escaped in it)
	clsKeyStop               // ',' '=' ' ': end a tag key, tag value or field key (and may be escaped in them)
	clsBackslash             // '\'
	clsValStop               // ',' ' ' '\r' '\n': end an unquoted field value
	clsNumber                // 0-9 . e E + -: the only bytes of a float (no hex, inf, nan, '_')
	clsHigh                  // 0x80-0xff: part of a multi-byte UTF-8 sequence, or invalid
)

var class = func() (t [256]uint8) {
	for c := 0; c < 0x20; c++ {
		t[c] |= clsNonPrint
	}
	t[0x7f] |= clsNonPrint
	t[','] |= clsMeasStop | clsKeyStop | clsValStop
	t[' '] |= clsMeasStop | clsKeyStop | clsValStop
	t['='] |= clsKeyStop
	t['\\'] |= clsBackslash
	t['\r'] |= clsValStop
	t['\n'] |= clsValStop
	for _, c := range []byte("0123456789.eE+-") {
		t[c] |= clsNumber
	}
	for c := 0x80; c < 0x100; c++ {
		t[c] |= clsHigh
	}
	return t
}()

// plainEnd returns the index of the first byte of b[i:] that scanEsc
// must look at (or len(b)), and atStop whether that is a stop byte or the
// end of b, so that b[i:end] is the whole token, without escapes, high or
// control bytes. This common case is inlined in Normalize: it scans nine
// or so tokens per line, and the call of scanEsc, with the registers
// Normalize saves around it, cost more than the scan of a short token.
func plainEnd(b []byte, i int, stop uint8) (end int, atStop bool) {
	for uint(i) < uint(len(b)) && class[b[i]]&^clsNumber == 0 {
		i++
	}
	return i, uint(i) >= uint(len(b)) || class[b[i]]&stop != 0
}

// scanEsc scans an escaped token (measurement: stop = clsMeasStop; tag key,
// tag value, field key: stop = clsKeyStop) from b[i:]. It returns the index
// of the first unescaped stop byte (or len(b)), whether the token holds an
// escape sequence, whether it holds a byte above 0x7f (whose UTF-8 the
// caller must check), and the index of the first control character that
// ended it (or -1).
//
// A backslash escapes the following byte only when that byte is of the stop
// class; otherwise the backslash is an ordinary byte (so `a\\ b` is `a\`
// followed by an escaped space), exactly as in lineprotocol/v2.
func scanEsc(b []byte, i int, stop uint8) (end int, esc, high bool, bad int) {
	for {
		// The ordinary bytes, in a loop of their own that compiles tight
		// (uint: i is known not to be negative, so no bounds check).
		// Digits, '.', 'e', 'E', '+' and '-' are ordinary here: when the
		// loop stopped at their class bit, most keys and values went
		// through the slow path below for each digit and 'e' in them
		// (BenchmarkNormalize/typical and agent-step: 8-15% slower).
		for uint(i) < uint(len(b)) && class[b[i]]&^clsNumber == 0 {
			i++
		}
		if uint(i) >= uint(len(b)) {
			return i, esc, high, -1
		}
		k := class[b[i]]
		if k&stop != 0 {
			return i, esc, high, -1
		}
		if k&clsNonPrint != 0 {
			return i, esc, high, i
		}
		if k&clsBackslash != 0 && i+1 < len(b) && class[b[i+1]]&stop != 0 {
			esc = true
			i += 2
			continue
		}
		high = high || k&clsHigh != 0
		i++
	}
}

// appendUnescaped appends tok, an escaped token of the given stop class,
// without its escapes.
func appendUnescaped(dst, tok []byte, stop uint8) []byte {
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c == '\\' && i+1 < len(tok) && class[tok[i+1]]&stop != 0 {
			i++
			c = tok[i]
		}
		dst = append(dst, c)
	}
	return dst
}

// appendEscaped appends s with the bytes of class stop escaped.
func appendEscaped(dst []byte, s string, stop uint8) []byte {
	for i := 0; i < len(s); i++ {
		if class[s[i]]&stop != 0 {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return dst
}

// stringEnd returns the index of the quote that closes the string field
// value whose opening quote is at b[open], or -1. Inside a string a
// backslash pairs with the next byte when that is \ " n r t; a quote thus
// closes the string iff the run of backslashes just before it has even
// length (the byte before the run is not a backslash, so no pair straddles
// the run's start).
func stringEnd(b []byte, open int) int {
	i := open + 1
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		q += i
		n := 0
		for j := q - 1; j > open && b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
}

// validBool reports whether v is one of the spellings of a boolean that both
// InfluxDB and lineprotocol/v2 accept.
func validBool(v []byte) bool {
	switch string(v) {
	case "t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE":
		return true
	}
	return false
}

// numberError checks an unquoted numeric field value (with its i or u
// suffix). It returns "" if the value is valid, or what is wrong. The common
// cases are decided here; strconv settles the rest, so the result is what
// strconv (used by lineprotocol/v2) says, restricted to decimal syntax.
func numberError(v []byte) string {
	switch v[len(v)-1] {
	case 'i':
		d := v[:len(v)-1]
		if len(d) > 1 && d[0] == '-' {
			d = d[1:]
		}
		if len(d) > 0 && len(d) < 19 && allDigits(d) {
			return "" // fits in 63 bits
		}
		if _, err := strconv.ParseInt(unsafeString(v[:len(v)-1]), 10, 64); err != nil {
			return numErrText(err, "integer")
		}
	case 'u':
		d := v[:len(v)-1]
		if len(d) > 0 && len(d) < 20 && allDigits(d) {
			return ""
		}
		if _, err := strconv.ParseUint(unsafeString(d), 10, 64); err != nil {
			return numErrText(err, "unsigned integer")
		}
	default:
		// strconv also takes hex floats, "inf", "nan" and '_' separators;
		// InfluxDB does not, so neither do we.
		switch decimalFloat(v) {
		case floatInvalid:
			return "not a decimal float"
		case floatValid:
			return ""
		}
		if _, err := strconv.ParseFloat(unsafeString(v), 64); err != nil {
			return numErrText(err, "float")
		}
	}
	return ""
}

func allDigits(d []byte) bool {
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

const (
	floatValid   = iota // decimal syntax, surely in range
	floatInvalid        // not decimal float syntax (hex, inf, nan, '_', …)
	floatCheck          // decimal syntax, but strconv must decide
)

// decimalFloat classifies v against -?(d+(.d*)?|.d+)([eE][+-]?d+)?. Without
// exponent and with few digits the value is surely finite; with an
// exponent, strconv must check the range.
func decimalFloat(v []byte) int {
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
		for _, c := range v {
			if class[c]&clsNumber == 0 {
				return floatInvalid
			}
		}
		return floatCheck // let strconv word the error
	}
	if i == len(v) {
		if digits > 300 {
			return floatCheck
		}
		return floatValid
	}
	for _, c := range v[i:] {
		if class[c]&clsNumber == 0 {
			return floatInvalid
		}
	}
	return floatCheck // an exponent, or a syntax error strconv will name
}

func numErrText(err error, kind string) string {
	if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		return kind + " out of range"
	}
	return "invalid " + kind + " syntax"
}

// numberEnd returns the end of the unquoted field value at b[i] if it is a
// number in one of the usual spellings, which are valid whatever the
// digits: -?d+(.d*)? and -?.d+ with at most 300 digits (surely finite),
// -?d{1,18}i and d{1,19}u (surely in range); the value must end at ',',
// ' ' or the end of b. Otherwise it returns -1, and valueEnd and
// numberError decide, as for any other value.
func numberEnd(b []byte, i int) int {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	d := j
	for j < len(b) && b[j]-'0' < 10 {
		j++
	}
	digits := j - d
	if j < len(b) {
		switch b[j] {
		case '.':
			j++
			d = j
			for j < len(b) && b[j]-'0' < 10 {
				j++
			}
			digits += j - d
		case 'i':
			if digits > 18 {
				return -1
			}
			j++
		case 'u':
			if digits > 19 || b[i] == '-' {
				return -1
			}
			j++
		}
	}
	if digits == 0 || digits > 300 {
		return -1
	}
	if j == len(b) || b[j] == ',' || b[j] == ' ' {
		return j
	}
	return -1
}

// parseInt64 parses a decimal int64 with an optional leading '-'.
func parseInt64(v []byte) (int64, bool) {
	d := v
	neg := len(d) > 0 && d[0] == '-'
	if neg {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 19 {
		if len(d) == 0 || !allDigits(d) {
			return 0, false
		}
		ts, err := strconv.ParseInt(unsafeString(v), 10, 64) // leading zeros
		return ts, err == nil
	}
	// At most 19 digits: below 1e19, no uint64 overflow.
	var x uint64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		x = x*10 + uint64(c-'0')
	}
	if neg {
		if x > 1<<63 {
			return 0, false
		}
		return int64(-x), true
	}
	if x > 1<<63-1 {
		return 0, false
	}
	return int64(x), true
}

// canonicalNanos parses v if it is a timestamp as strconv.AppendInt writes
// it (1 to 19 digits, no leading zero, no sign) within InfluxDB's range;
// otherwise it reports false, and parseInt64 and toNanos decide.
func canonicalNanos(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 19 || (v[0] == '0' && len(v) > 1) {
		return 0, false
	}
	var x uint64 // below 1e19: no overflow
	for len(v) >= 8 {
		d, ok := eightDigits(binary.LittleEndian.Uint64(v))
		if !ok {
			return 0, false
		}
		x = x*1e8 + d
		v = v[8:]
	}
	for _, c := range v {
		if c-'0' >= 10 {
			return 0, false
		}
		x = x*10 + uint64(c-'0')
	}
	if x > maxNanoTime {
		return 0, false
	}
	return int64(x), true
}

// eightDigits returns the value of x, eight bytes of text in little-endian
// order (the first digit lowest), if they are all decimal digits.
func eightDigits(x uint64) (uint64, bool) {
	const ones = 0x0101010101010101
	// Each byte 0x30-0x39: its high nibble is 3, and adding 6 keeps it so
	// (no carry leaves a byte below 0x40).
	if x&(0xf0*ones) != 0x30*ones || (x+0x06*ones)&(0xf0*ones) != 0x30*ones {
		return 0, false
	}
	x &= 0x0f * ones
	x = (x * (10<<8 + 1)) >> 8 // pairs of digits in the low byte of each 16 bits
	x = ((x & 0x00ff00ff00ff00ff) * (100<<16 + 1)) >> 16
	x = ((x & 0x0000ffff0000ffff) * (10000<<32 + 1)) >> 32
	return x, true
}

// canonicalInt reports whether v is the way strconv.AppendInt writes its
// value: no leading zeros, no "-0".
func canonicalInt(v []byte) bool {
	if len(v) > 0 && v[0] == '-' {
		v = v[1:]
		return len(v) > 0 && v[0] != '0'
	}
	return len(v) == 1 || (len(v) > 1 && v[0] != '0')
}

// unsafeString views b as a string for the duration of a call that does not
// keep it (strconv copies what it puts in errors).
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
