package lineproto

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// The classes of syntax errors. Normalize and AppendStatsD return a
// *SyntaxError whose Unwrap gives one of these, so callers classify with
// errors.Is. The texts follow InfluxDB's ("missing fields", "invalid
// number", "duplicate tags", …) so that clients see familiar answers.
var (
	ErrLineTooLong        = errors.New("line too long")
	ErrInvalidUTF8        = errors.New("invalid utf-8")
	ErrInvalidMeasurement = errors.New("invalid measurement")
	ErrInvalidTagKey      = errors.New("invalid tag key")
	ErrInvalidTagValue    = errors.New("invalid tag value")
	ErrDuplicateTags      = errors.New("duplicate tags")
	ErrMissingFields      = errors.New("missing fields")
	ErrInvalidField       = errors.New("invalid field format")
	ErrInvalidNumber      = errors.New("invalid number")
	ErrInvalidBoolean     = errors.New("invalid boolean")
	ErrUnterminatedString = errors.New("unterminated string")
	ErrInvalidTimestamp   = errors.New("invalid timestamp")
	ErrInvalidStatsD      = errors.New("invalid statsd line")
)

// SyntaxError is a problem with one line: its class (one of the Err*
// values above), the 1-based byte column where it was found, and what
// exactly is wrong.
type SyntaxError struct {
	Err    error
	Column int
	Detail string
}

func (e *SyntaxError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%v at column %d", e.Err, e.Column)
	}
	return fmt.Sprintf("%v at column %d: %s", e.Err, e.Column, e.Detail)
}

func (e *SyntaxError) Unwrap() error { return e.Err }

// syntaxErr builds a *SyntaxError for byte offset off. It is only called on
// the error path, so it may allocate.
func syntaxErr(class error, off int, format string, args ...any) error {
	return &SyntaxError{Err: class, Column: off + 1, Detail: fmt.Sprintf(format, args...)}
}

// MaxErrorText is how many bytes of a bad line a LineError quotes.
const MaxErrorText = 128

// LineError names the bad line of a multi-line body, for answers like
// InfluxDB's ("unable to parse '<line>': <reason>"). Text is the line,
// cut to MaxErrorText bytes; Reason is the text of Err.
type LineError struct {
	Line   int // 1-based line number in the body
	Text   string
	Reason string
	Err    error
}

// NewLineError wraps err, returned for line number n of a body, with a copy
// of the start of line.
func NewLineError(n int, line []byte, err error) *LineError {
	s := string(line)
	if len(line) > MaxErrorText {
		// Cut before a UTF-8 continuation byte rather than in a sequence.
		p := MaxErrorText
		for p > MaxErrorText-utf8.UTFMax && line[p]&0xC0 == 0x80 {
			p--
		}
		s = string(line[:p]) + "..."
	}
	return &LineError{Line: n, Text: s, Reason: err.Error(), Err: err}
}

func (e *LineError) Error() string {
	return fmt.Sprintf("line %d: unable to parse '%s': %s", e.Line, e.Text, e.Reason)
}

func (e *LineError) Unwrap() error { return e.Err }
