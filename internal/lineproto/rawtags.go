package lineproto

// RawTag is one tag of a line as sent, before Normalize: Key and Value are
// escaped as in the line, and ",key=value" is line[Start:End].
type RawTag struct {
	Key, Value []byte
	Start, End int
}

// AppendRawTags appends the tags of line, in the order sent, to dst. It
// reads the measurement and the tag set only, with Normalize's rules for
// escapes, and stops quietly at the first byte that cannot be there,
// returning the tags before it: Normalize reports the error. It serves a
// caller that rewrites a tag of the odd line before normalizing it, so it
// is written for clarity rather than speed.
func AppendRawTags(dst []RawTag, line []byte) []RawTag {
	b, i := trimLine(line)
	if i == len(b) || b[i] == ',' || b[i] == '#' {
		return dst
	}
	i, ok := rawTokenEnd(b, i, clsMeasStop)
	if !ok {
		return dst
	}
	for i < len(b) && b[i] == ',' {
		start, ks := i, i+1
		ke, ok := rawTokenEnd(b, ks, clsKeyStop)
		if !ok || ke == ks || ke == len(b) || b[ke] != '=' {
			return dst
		}
		vs := ke + 1
		ve, ok := rawTokenEnd(b, vs, clsKeyStop)
		if !ok || ve == vs || ve < len(b) && b[ve] == '=' {
			return dst
		}
		dst = append(dst, RawTag{Key: b[ks:ke], Value: b[vs:ve], Start: start, End: ve})
		i = ve
	}
	return dst
}

// rawTokenEnd returns the end of the escaped token at b[i:] (see scanEsc),
// and false if a control character ends it.
func rawTokenEnd(b []byte, i int, stop uint8) (int, bool) {
	end, plain := plainEnd(b, i, stop)
	if plain {
		return end, true
	}
	end, _, _, bad := scanEsc(b, end, stop)
	return end, bad < 0
}

// AppendUnescapedTag appends the tag key or value v (escaped as in a line)
// to dst without its escapes.
func AppendUnescapedTag(dst, v []byte) []byte {
	return appendUnescaped(dst, v, clsKeyStop)
}
