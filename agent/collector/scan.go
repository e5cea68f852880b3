package collector

import (
	"bytes"
	"math"
	"strconv"
)

// The /proc parsers work on the bytes of a file without allocating: a line
// is cut off the front of the input, then split into fields on blanks.

// nextLine returns the first line of b (without its newline) and the rest.
func nextLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// fields iterates over the blank-separated fields of a line.
type fields struct {
	b []byte
}

// next returns the next field, or false at the end of the line.
func (f *fields) next() ([]byte, bool) {
	b := f.b
	i := 0
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isBlank(b[j]) {
		j++
	}
	f.b = b[j:]
	if i == j {
		return nil, false
	}
	return b[i:j], true
}

// nextUint parses the next field as a decimal number.
func (f *fields) nextUint() (uint64, bool) {
	tok, ok := f.next()
	if !ok {
		return 0, false
	}
	return parseUint(tok)
}

// uints parses the next fields as decimal numbers into dst, up to len(dst)
// of them, and returns how many it parsed: it stops at the end of the line
// or at a field that is not a number.
func (f *fields) uints(dst []uint64) int {
	for n := range dst {
		x, ok := f.nextUint()
		if !ok {
			return n
		}
		dst[n] = x
	}
	return len(dst)
}

func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// parseUint parses a decimal number of at most 20 digits, rejecting
// anything else (signs, blanks, overflow).
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// parseFloat parses a decimal number such as "0.52" or "3436.38".
func parseFloat(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) > 64 {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}
