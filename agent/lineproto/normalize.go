package lineproto

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// DefaultMaxLineBytes is the default limit on the length of one input line.
const DefaultMaxLineBytes = 64 << 10

// DefaultTags are the tags the agent adds to a line that does not set them
// itself: the sender's value always wins. An empty field adds nothing.
type DefaultTags struct {
	Host string // SLURMD_NODENAME or the hostname
	Job  string // SLURM_JOB_ID
	Step string // SLURM_STEP_ID
	Run  string // --run, SIMTEL_RUN, else the job id
}

// Validate reports a value that cannot be a tag value: one with a control
// character, invalid UTF-8, or a trailing backslash (which line protocol
// cannot represent before a separator).
func (t DefaultTags) Validate() error {
	for i, v := range [numDefaults]string{t.Host, t.Job, t.Step, t.Run} {
		if err := checkTagText(v); err != nil {
			return fmt.Errorf("invalid default %s tag %q: %w", defaultKeys[i], v, err)
		}
	}
	return nil
}

// checkTagText reports why s cannot be written as a tag key or value ("" is
// allowed: it means no tag).
func checkTagText(s string) error {
	if !utf8.ValidString(s) {
		return ErrInvalidUTF8
	}
	for i := 0; i < len(s); i++ {
		if class[s[i]]&clsNonPrint != 0 {
			return fmt.Errorf("control character %q", s[i])
		}
	}
	if len(s) > 0 && s[len(s)-1] == '\\' {
		return fmt.Errorf("trailing backslash")
	}
	return nil
}

// Indexes of the default tags.
const (
	tagHost = iota
	tagJob
	tagStep
	tagRun
	numDefaults
)

var defaultKeys = [numDefaults]string{"host", "job", "step", "run"}

// Option configures a Normalizer.
type Option func(*Normalizer)

// WithMaxLineBytes sets the longest input line Normalize accepts, in bytes
// (default DefaultMaxLineBytes). Longer lines fail with ErrLineTooLong.
func WithMaxLineBytes(n int) Option {
	return func(nz *Normalizer) {
		if n > 0 {
			nz.maxLine = n
		}
	}
}

// Sample is what the agent needs of a normalized line. Line is a subslice of
// the dst returned with it; Measurement, Run and Host are unescaped and are
// valid until the next call of Normalize (they point into dst or into the
// Normalizer). Do not modify them.
type Sample struct {
	Line        []byte // the canonical line, without newline
	Measurement []byte
	Run, Host   []byte // final values of the run and host tags; empty if neither the line nor the defaults set them
	Time        int64  // unix nanoseconds
}

// Normalizer turns input lines into canonical lines. It keeps buffers
// between calls, so it is not safe for concurrent use: use one per
// goroutine.
type Normalizer struct {
	maxLine int
	defKey  [numDefaults][]byte // "host", "job", "step", "run"
	defVal  [numDefaults][]byte // escaped default value; nil: do not add
	defRaw  [numDefaults][]byte // unescaped default value
	tags    []tag
	scratch []byte
}

// tag is one tag of the line being normalized, escaped as in the input.
type tag struct {
	key, val []byte
	raw      []byte // the unescaped value, if known (defaults)
	esc      bool   // val holds an escape sequence
	which    int8   // tagHost…tagRun, or -1
}

// NewNormalizer returns a Normalizer that adds the given tags. It fails if
// tags.Validate does.
func NewNormalizer(tags DefaultTags, opts ...Option) (*Normalizer, error) {
	if err := tags.Validate(); err != nil {
		return nil, err
	}
	n := &Normalizer{maxLine: DefaultMaxLineBytes}
	for i, v := range [numDefaults]string{tags.Host, tags.Job, tags.Step, tags.Run} {
		n.defKey[i] = []byte(defaultKeys[i])
		if v != "" {
			n.defVal[i] = appendEscaped(nil, v, clsKeyStop)
			n.defRaw[i] = []byte(v)
		}
	}
	for _, o := range opts {
		o(n)
	}
	return n, nil
}

// Normalize validates one line of line protocol and appends its canonical
// form to dst. The canonical form has
//
//   - the measurement, tag keys and values, field keys and values exactly as
//     sent (escapes and number spellings kept);
//   - the tags sorted by key, with the default tags the line lacks added;
//   - single spaces between the sections, no leading or trailing white space;
//   - a timestamp in nanoseconds: the line's, converted from prec, or now
//     truncated to prec when the line has none.
//
// line may end in "\n", "\r\n" or spaces; it must not hold another line
// (a newline is allowed only inside a string field value). The canonical
// line is a fixed point: normalizing it again with Nanosecond precision
// gives it back unchanged. dst must not overlap line.
//
// On error, dst is returned unchanged with a *SyntaxError (see the Err*
// classes); valid lines cause no allocation once dst and the Normalizer's
// buffers have grown to fit.
func (n *Normalizer) Normalize(dst, line []byte, prec Precision, now time.Time) ([]byte, Sample, error) {
	if len(line) > n.maxLine {
		return dst, Sample{}, &SyntaxError{Err: ErrLineTooLong, Column: n.maxLine + 1,
			Detail: fmt.Sprintf("%d bytes, limit %d", len(line), n.maxLine)}
	}
	unit := int64(prec.Duration())
	if unit == 0 {
		return dst, Sample{}, fmt.Errorf("lineproto: invalid precision %d", int(prec))
	}

	// Trim as lineprotocol/v2 allows: one newline, one carriage return,
	// spaces (not tabs) at both ends. Offsets stay those of the input.
	b := line
	if k := len(b); k > 0 && b[k-1] == '\n' {
		b = b[:k-1]
	}
	if k := len(b); k > 0 && b[k-1] == '\r' {
		b = b[:k-1]
	}
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	if !utf8.Valid(b[i:]) {
		return dst, Sample{}, syntaxErr(ErrInvalidUTF8, i+invalidUTF8At(b[i:]), "")
	}

	// Measurement.
	if i == len(b) || b[i] == ',' {
		return dst, Sample{}, syntaxErr(ErrInvalidMeasurement, i, "missing measurement")
	}
	if b[i] == '#' {
		return dst, Sample{}, syntaxErr(ErrInvalidMeasurement, i, "a line starting with '#' is a comment")
	}
	mStart := i
	i, mEsc, bad := scanEsc(b, i, clsMeasStop)
	if bad >= 0 {
		return dst, Sample{}, syntaxErr(ErrInvalidMeasurement, bad, "control character %q", b[bad])
	}
	meas := b[mStart:i]

	// Tags. From here on, failures go through fail, which drops the tag
	// buffer's references to line.
	tags := n.tags[:0]
	fail := func(err error) ([]byte, Sample, error) {
		n.keep(tags)
		return dst, Sample{}, err
	}
	var have [numDefaults]bool
	for i < len(b) && b[i] == ',' {
		i++
		ks := i
		ke, kEsc, bad := scanEsc(b, i, clsKeyStop)
		if bad >= 0 {
			return fail(syntaxErr(ErrInvalidTagKey, bad, "control character %q", b[bad]))
		}
		if ke == ks {
			return fail(syntaxErr(ErrInvalidTagKey, ks, "missing tag key"))
		}
		if ke == len(b) || b[ke] != '=' {
			return fail(syntaxErr(ErrInvalidTagKey, ke, "missing '=' after tag key %q", b[ks:ke]))
		}
		vs := ke + 1
		ve, vEsc, bad := scanEsc(b, vs, clsKeyStop)
		if bad >= 0 {
			return fail(syntaxErr(ErrInvalidTagValue, bad, "control character %q", b[bad]))
		}
		if ve == vs {
			return fail(syntaxErr(ErrInvalidTagValue, vs, "missing value of tag %q", b[ks:ke]))
		}
		if ve < len(b) && b[ve] == '=' {
			return fail(syntaxErr(ErrInvalidTagValue, ve, "unescaped '=' in value of tag %q", b[ks:ke]))
		}
		t := tag{key: b[ks:ke], val: b[vs:ve], esc: vEsc, which: -1}
		if !kEsc { // an escaped key cannot spell a default key
			switch string(t.key) {
			case "host":
				t.which = tagHost
			case "job":
				t.which = tagJob
			case "step":
				t.which = tagStep
			case "run":
				t.which = tagRun
			}
			if t.which >= 0 {
				have[t.which] = true
			}
		}
		tags = append(tags, t)
		i = ve
	}
	if i == len(b) {
		return fail(syntaxErr(ErrMissingFields, i, ""))
	}
	for b[i] == ' ' { // b has no trailing spaces, so this stops before len(b)
		i++
	}

	// Fields, kept verbatim once checked.
	fStart := i
	for {
		ks := i
		ke, _, bad := scanEsc(b, i, clsKeyStop)
		if bad >= 0 {
			return fail(syntaxErr(ErrInvalidField, bad, "control character %q in field key", b[bad]))
		}
		if ke == ks {
			return fail(syntaxErr(ErrInvalidField, ks, "missing field key"))
		}
		key := b[ks:ke]
		if ke == len(b) || b[ke] != '=' {
			return fail(syntaxErr(ErrInvalidField, ke, "missing '=' after field key %q", key))
		}
		i = ke + 1
		if i == len(b) {
			return fail(syntaxErr(ErrInvalidField, i, "missing value of field %q", key))
		}
		switch c := b[i]; {
		case c == '"':
			e := stringEnd(b, i)
			if e < 0 {
				return fail(syntaxErr(ErrUnterminatedString, i, "value of field %q", key))
			}
			i = e + 1
		case c == 't' || c == 'T' || c == 'f' || c == 'F':
			ve := valueEnd(b, i)
			if !validBool(b[i:ve]) {
				return fail(syntaxErr(ErrInvalidBoolean, i, "field %q: %q", key, b[i:ve]))
			}
			i = ve
		case c == '-' || c == '.' || (c >= '0' && c <= '9'):
			ve := valueEnd(b, i)
			if msg := numberError(b[i:ve]); msg != "" {
				return fail(syntaxErr(ErrInvalidNumber, i, "field %q: %q: %s", key, b[i:ve], msg))
			}
			i = ve
		case c == ',' || c == ' ':
			return fail(syntaxErr(ErrInvalidField, i, "missing value of field %q", key))
		default:
			return fail(syntaxErr(ErrInvalidField, i,
				"value of field %q is not a number, boolean or quoted string", key))
		}
		if i == len(b) || b[i] == ' ' {
			break
		}
		if b[i] != ',' {
			return fail(syntaxErr(ErrInvalidField, i, "unexpected %q after value of field %q", b[i], key))
		}
		i++
	}
	fields := b[fStart:i]

	// Timestamp.
	var ns int64
	var tsText []byte // the line's timestamp, if it can be copied as it is
	if i == len(b) {
		ns = truncNanos(now.UnixNano(), unit)
	} else {
		for b[i] == ' ' {
			i++
		}
		ts, ok := parseTimestamp(b[i:])
		if !ok {
			return fail(syntaxErr(ErrInvalidTimestamp, i, "%q is not an integer", b[i:]))
		}
		if ns, ok = toNanos(ts, unit); !ok {
			return fail(syntaxErr(ErrInvalidTimestamp, i, "%d%s is out of range", ts, prec))
		}
		if unit == 1 && canonicalInt(b[i:]) {
			tsText = b[i:]
		}
	}

	// Default tags, then canonical order.
	for k := range numDefaults {
		if !have[k] && n.defVal[k] != nil {
			tags = append(tags, tag{key: n.defKey[k], val: n.defVal[k], raw: n.defRaw[k], which: int8(k)})
		}
	}
	sortTags(tags)
	for j := 1; j < len(tags); j++ {
		if bytes.Equal(tags[j-1].key, tags[j].key) {
			return fail(syntaxErr(ErrDuplicateTags, mStart+len(meas), "tag %q", tags[j].key))
		}
	}

	// Output. Positions are recorded as offsets because dst and scratch
	// may move while growing.
	start := len(dst)
	dst = append(dst, meas...)
	var runAt, hostAt span
	scratch := n.scratch[:0]
	for _, t := range tags {
		dst = append(dst, ',')
		dst = append(dst, t.key...)
		dst = append(dst, '=')
		at := span{src: srcDst, off: len(dst), end: len(dst) + len(t.val)}
		dst = append(dst, t.val...)
		switch {
		case t.which != tagRun && t.which != tagHost:
			continue
		case t.raw != nil:
			at = span{src: srcRaw, raw: t.raw}
		case t.esc:
			at.src, at.off = srcScratch, len(scratch)
			scratch = appendUnescaped(scratch, t.val, clsKeyStop)
			at.end = len(scratch)
		}
		if t.which == tagRun {
			runAt = at
		} else {
			hostAt = at
		}
	}
	dst = append(dst, ' ')
	dst = append(dst, fields...)
	dst = append(dst, ' ')
	if tsText != nil {
		dst = append(dst, tsText...)
	} else {
		dst = strconv.AppendInt(dst, ns, 10)
	}

	measAt := span{src: srcDst, off: start, end: start + len(meas)}
	if mEsc {
		measAt = span{src: srcScratch, off: len(scratch)}
		scratch = appendUnescaped(scratch, meas, clsMeasStop)
		measAt.end = len(scratch)
	}
	n.scratch = scratch
	n.keep(tags)
	return dst, Sample{
		Line:        dst[start:len(dst):len(dst)],
		Measurement: measAt.get(dst, scratch),
		Run:         runAt.get(dst, scratch),
		Host:        hostAt.get(dst, scratch),
		Time:        ns,
	}, nil
}

// keep stores the (possibly grown) tag buffer for the next call, dropping
// its references to the caller's line.
func (n *Normalizer) keep(tags []tag) {
	clear(tags)
	n.tags = tags[:0]
}

// span locates a value in dst, in the scratch buffer, or in a default.
type span struct {
	src      uint8
	off, end int
	raw      []byte
}

const (
	srcNone = iota
	srcDst
	srcScratch
	srcRaw
)

func (s span) get(dst, scratch []byte) []byte {
	switch s.src {
	case srcDst:
		return dst[s.off:s.end:s.end]
	case srcScratch:
		return scratch[s.off:s.end:s.end]
	case srcRaw:
		return s.raw
	}
	return nil
}

// valueEnd returns the end of the unquoted field value starting at b[i].
func valueEnd(b []byte, i int) int {
	for i < len(b) && class[b[i]]&clsValStop == 0 {
		i++
	}
	return i
}

// sortTags sorts by key (escaped bytes, as InfluxDB does). Lines usually
// come with few tags, often sorted already, where insertion sort is fastest;
// the general sort bounds the cost of lines with thousands of tags.
func sortTags(tags []tag) {
	if len(tags) > 16 {
		slices.SortFunc(tags, func(a, b tag) int { return bytes.Compare(a.key, b.key) })
		return
	}
	for i := 1; i < len(tags); i++ {
		for j := i; j > 0 && bytes.Compare(tags[j].key, tags[j-1].key) < 0; j-- {
			tags[j], tags[j-1] = tags[j-1], tags[j]
		}
	}
}

// invalidUTF8At returns the offset of the first invalid UTF-8 sequence in b.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}
