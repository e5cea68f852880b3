package lineproto

import "bytes"

// Lines calls fn for each line of body that is neither blank nor a comment
// (first non-blank byte '#'), with its 1-based line number, and stops at the
// first error fn returns. The line is passed without its "\n" or "\r\n"; it
// aliases body and is valid only during the call.
//
// A newline inside a quoted string field value does not end the line, as in
// InfluxDB and lineprotocol/v2 (the number passed is that of the line's
// first row; later numbers count every row). As there, a stray quote pairs
// with the next line's first string, which makes one bad line of two rows.
// Unlike there, a string that is never closed does not swallow the rest of
// the body: its line ends at the next newline.
//
// Lines does not allocate, and its cost is linear in len(body).
func Lines(body []byte, fn func(n int, line []byte) error) error {
	n := 1
	// quote is the first '"' at or after pos (len(body): none), found once
	// for all the lines before it rather than once per line: a body of
	// lines without strings is searched for quotes once in all.
	quote := -1
	for pos := 0; pos < len(body); {
		if quote < pos {
			quote = len(body)
			if q := bytes.IndexByte(body[pos:], '"'); q >= 0 {
				quote = pos + q
			}
		}
		end, multiRow := lineEnd(body, pos, quote)
		next := end + 1
		line := body[pos:end]
		rows := 1
		if multiRow {
			rows += bytes.Count(line, []byte{'\n'})
		}
		if k := len(line); k > 0 && line[k-1] == '\r' {
			line = line[:k-1]
		}
		if !blankOrComment(line) {
			if err := fn(n, line); err != nil {
				return err
			}
		}
		n += rows
		pos = next
	}
	return nil
}

// blankOrComment reports whether line holds only white space, or starts
// (after white space) with '#'.
func blankOrComment(line []byte) bool {
	for _, c := range line {
		switch c {
		case ' ', '\t', '\r':
			continue
		case '#':
			return true
		}
		return false
	}
	return true
}

// lineEnd returns the index of the newline that ends the line starting at
// b[start], or len(b), and whether the line may hold newlines (in strings:
// only when its first row has a quote). quote is the index of the first
// quote at or after start, or len(b).
//
// A string that is never closed ends its line at the next newline. That can
// only happen to the last string opened in b: an opening quote follows '='
// and so would close any string opened before it. Hence at most one search
// for a closing quote runs to the end of b, and the cost stays linear.
func lineEnd(b []byte, start, quote int) (int, bool) {
	nl := bytes.IndexByte(b[start:], '\n')
	if nl < 0 {
		return len(b), false // the last line: no newline in it
	}
	nl += start
	if quote > nl {
		return nl, false // no string can start on this row: the fast path
	}
	return lineEndQuoted(b, start, nl), true
}

// lineEndQuoted is lineEnd for a line whose first row, b[start:nl], has a
// quote.
func lineEndQuoted(b []byte, start, nl int) int {
	// Only a quote right after a field's '=' opens a string. Walk the line
	// as lineprotocol/v2 does; on anything malformed, give up and end the
	// line at the next newline, as its error recovery does.
	nextNL := func(i int) int {
		if k := bytes.IndexByte(b[i:], '\n'); k >= 0 {
			return i + k
		}
		return len(b)
	}
	i := start
	for i < nl && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	if b[i] == '#' {
		return nl // a comment ends at the newline, quotes or not
	}
	// Measurement and tags: up to the first unescaped space. A backslash
	// escapes a following space in both.
	for i < len(b) {
		c := b[i]
		if c == ' ' {
			break
		}
		if c == '\n' || class[c]&clsNonPrint != 0 {
			return nextNL(i)
		}
		if c == '\\' && i+1 < len(b) && b[i+1] == ' ' {
			i += 2
			continue
		}
		i++
	}
	for i < len(b) && b[i] == ' ' {
		i++
	}
	// Fields.
	for {
		// Key, up to an unescaped '='.
		for i < len(b) && b[i] != '=' {
			c := b[i]
			if class[c]&(clsKeyStop|clsNonPrint) != 0 {
				return nextNL(i)
			}
			if c == '\\' && i+1 < len(b) && class[b[i+1]]&clsKeyStop != 0 {
				i++
			}
			i++
		}
		if i >= len(b) {
			return len(b)
		}
		i++ // '='
		if i < len(b) && b[i] == '"' {
			e := stringEnd(b, i)
			if e < 0 {
				return nextNL(i)
			}
			i = e + 1
		} else {
			for i < len(b) && class[b[i]]&clsValStop == 0 {
				i++
			}
		}
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		// The timestamp, the end, or something malformed: no more strings.
		return nextNL(i)
	}
}
