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
	vals := [numDefaults]string{tagHost: t.Host, tagJob: t.Job, tagRun: t.Run, tagStep: t.Step}
	for _, k := range [numDefaults]int{tagHost, tagJob, tagStep, tagRun} { // the order of the fields
		if err := checkTagText(vals[k]); err != nil {
			return fmt.Errorf("invalid default %s tag %q: %w", defaultKeys[k], vals[k], err)
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

// Indexes of the default tags, in the order of their keys: the order in
// which the canonical line has them.
const (
	tagHost = iota
	tagJob
	tagRun
	tagStep
	numDefaults
)

var defaultKeys = [numDefaults]string{"host", "job", "run", "step"}

// Bits of Sample.Own.
const (
	OwnHost uint8 = 1 << tagHost
	OwnJob  uint8 = 1 << tagJob
	OwnRun  uint8 = 1 << tagRun
	OwnStep uint8 = 1 << tagStep
)

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
	Own         uint8  // the default tags the line sets itself: OwnHost | OwnJob | OwnRun | OwnStep
	// Fields are the line's fields in the order sent (duplicate keys
	// included). Their keys point into the input line, not into dst; the
	// slice is the Normalizer's, valid until its next call.
	Fields []Field
}

// Normalizer turns input lines into canonical lines. It keeps buffers
// between calls, so it is not safe for concurrent use: use one per
// goroutine.
type Normalizer struct {
	maxLine int
	defRaw  [numDefaults][]byte // unescaped default value; nil: none
	// defText is ",key=value" (escaped) of each default tag that has a
	// value, in key order; the defaults k up to l-1 are
	// defText[defOff[k]:defOff[l]], so those the line lacks are copied in
	// one piece when it sets none of them.
	defText []byte
	defOff  [numDefaults + 1]int
	tags    []tag
	fields  []Field
	scratch []byte
	// lastTimeText is lastTime as the last line that had to format its
	// timestamp wrote it, if lastTimeOK.
	lastTime     int64
	lastTimeText []byte
	lastTimeOK   bool
	// alwaysSort makes Normalize sort the tags even when the line has them
	// in order, so that tests can compare both ways on the same lines.
	alwaysSort bool
}

// tag is one tag of the line being normalized, as offsets into the trimmed
// line b: ",key=value" is b[ks-1:ve], the key b[ks:ke], the value
// b[ke+1:ve], all escaped as sent. It holds no pointer into the caller's
// line, so the buffer of tags can be kept between calls as it is.
type tag struct {
	ks, ke, ve int
	rank       uint8 // how many default keys sort before the key
	esc        bool  // the value holds an escape sequence
	which      int8  // tagHost…tagStep if the key is a default key, or -1
}

// NewNormalizer returns a Normalizer that adds the given tags. It fails if
// tags.Validate does.
func NewNormalizer(tags DefaultTags, opts ...Option) (*Normalizer, error) {
	if err := tags.Validate(); err != nil {
		return nil, err
	}
	n := &Normalizer{maxLine: DefaultMaxLineBytes}
	for k, v := range [numDefaults]string{tagHost: tags.Host, tagJob: tags.Job, tagRun: tags.Run, tagStep: tags.Step} {
		n.defOff[k] = len(n.defText)
		if v != "" {
			n.defText = append(n.defText, ',')
			n.defText = append(n.defText, defaultKeys[k]...)
			n.defText = append(n.defText, '=')
			n.defText = appendEscaped(n.defText, v, clsKeyStop)
			n.defRaw[k] = []byte(v)
		}
	}
	n.defOff[numDefaults] = len(n.defText)
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
//
// The work is one pass over the line and one copy. What would cost a pass
// of its own is folded into the scans: UTF-8 is checked only when a scan
// meets a byte above 0x7f (and in string values), and on the error path,
// where invalid UTF-8 takes precedence over every other error; tags that
// arrive sorted are not sorted again, and the default tags are merged in
// while copying rather than sorted with them; numbers and timestamps in
// their usual spellings are checked as they are scanned, and a timestamp
// that must be formatted is formatted once for all the lines that share
// it.
func (n *Normalizer) Normalize(dst, line []byte, prec Precision, now time.Time) (_ []byte, s Sample, _ error) {
	unit := int64(prec.Duration())
	if len(line) > n.maxLine || unit == 0 {
		return dst, Sample{}, lineError(len(line), n.maxLine, prec)
	}
	b, i := trimLine(line)
	// From here on every error goes through badLine, which reports invalid
	// UTF-8 first, wherever it is in the line.
	from := i
	high := false // a byte above 0x7f was seen outside string values

	// Measurement.
	if i == len(b) || b[i] == ',' {
		return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidMeasurement, i, "missing measurement"))
	}
	if b[i] == '#' {
		return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidMeasurement, i, "a line starting with '#' is a comment"))
	}
	mStart := i
	i, plain := plainEnd(b, i, clsMeasStop)
	mEsc, hi, bad := false, false, -1
	if !plain {
		i, mEsc, hi, bad = scanEsc(b, i, clsMeasStop)
	}
	if bad >= 0 {
		return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidMeasurement, bad, "control character %q", b[bad]))
	}
	high = high || hi
	meas := b[mStart:i]

	// Tags.
	tags := n.tags[:0]
	var have uint8  // bit k: the line sets default tag k
	sorted := true  // keys strictly increasing so far: no sort, no duplicates
	var prev []byte // the key of the previous tag
	for i < len(b) && b[i] == ',' {
		i++
		ks := i
		ke, plain := plainEnd(b, i, clsKeyStop)
		kEsc, hi, bad := false, false, -1
		if !plain {
			ke, kEsc, hi, bad = scanEsc(b, ke, clsKeyStop)
		}
		if bad >= 0 || ke == ks || ke == len(b) || b[ke] != '=' {
			return dst, Sample{}, badLine(b, from, keyErr(b, ks, ke, bad, &tagKey))
		}
		vs := ke + 1
		ve, plain := plainEnd(b, vs, clsKeyStop)
		vEsc, hi2 := false, false
		if !plain {
			ve, vEsc, hi2, bad = scanEsc(b, ve, clsKeyStop)
		}
		if bad >= 0 {
			return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidTagValue, bad, "control character %q", b[bad]))
		}
		if ve == vs {
			return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidTagValue, vs, "missing value of tag %q", b[ks:ke]))
		}
		if ve < len(b) && b[ve] == '=' {
			return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidTagValue, ve, "unescaped '=' in value of tag %q", b[ks:ke]))
		}
		high = high || hi || hi2
		key := b[ks:ke]
		rank, isDefault := defaultRank(key)
		which := int8(-1)
		if isDefault && !kEsc {
			// An escaped key cannot spell a default key.
			which = int8(rank)
			have |= 1 << rank
		}
		if sorted && prev != nil {
			sorted = keyLess(prev, key)
		}
		prev = key
		// The tag is stored field by field in place: appended as a value,
		// it was built on the stack and copied with 16-byte loads of
		// bytes just stored one at a time, a store-forwarding stall that
		// was 5% of BenchmarkIngestAdd's profile.
		tags = slices.Grow(tags, 1)[:len(tags)+1]
		t := &tags[len(tags)-1]
		t.ks, t.ke, t.ve, t.rank, t.esc, t.which = ks, ke, ve, rank, vEsc, which
		i = ve
	}
	n.tags = tags
	if i == len(b) {
		return dst, Sample{}, badLine(b, from, syntaxErr(ErrMissingFields, i, ""))
	}
	for b[i] == ' ' { // b has no trailing spaces, so this stops before len(b)
		i++
	}

	// Fields, kept verbatim once checked; their keys and types are
	// recorded for the Sample.
	fStart := i
	fields := n.fields[:0]
	for {
		ks := i
		ke, plain := plainEnd(b, i, clsKeyStop)
		kEsc, hi, bad := false, false, -1
		if !plain {
			ke, kEsc, hi, bad = scanEsc(b, ke, clsKeyStop)
		}
		if bad >= 0 || ke == ks || ke == len(b) || b[ke] != '=' {
			return dst, Sample{}, badLine(b, from, keyErr(b, ks, ke, bad, &fieldKey))
		}
		key := b[ks:ke]
		high = high || hi
		i = ke + 1
		if i == len(b) {
			return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidField, i, "missing value of field %q", key))
		}
		var typ FieldType
		switch c := b[i]; {
		case c == '-' || c == '.' || (c >= '0' && c <= '9'):
			if e := numberEnd(b, i); e >= 0 {
				i = e
				typ = numberType(b[e-1])
				break
			}
			ve := valueEnd(b, i)
			if msg := numberError(b[i:ve]); msg != "" {
				return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidNumber, i, "field %q: %q: %s", key, b[i:ve], msg))
			}
			i = ve
			typ = numberType(b[ve-1])
		case c == '"':
			e := stringEnd(b, i)
			if e < 0 {
				return dst, Sample{}, badLine(b, from, syntaxErr(ErrUnterminatedString, i, "value of field %q", key))
			}
			if !utf8.Valid(b[i+1 : e]) {
				return dst, Sample{}, badLine(b, from, nil)
			}
			i = e + 1
			typ = String
		case c == 't' || c == 'T' || c == 'f' || c == 'F':
			ve := valueEnd(b, i)
			if !validBool(b[i:ve]) {
				return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidBoolean, i, "field %q: %q", key, b[i:ve]))
			}
			i = ve
			typ = Boolean
		case c == ',' || c == ' ':
			return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidField, i, "missing value of field %q", key))
		default:
			return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidField, i,
				"value of field %q is not a number, boolean or quoted string", key))
		}
		// Stored in place, like the tags, rather than built and copied.
		fields = slices.Grow(fields, 1)[:len(fields)+1]
		f := &fields[len(fields)-1]
		f.Key, f.Type, f.Escaped = key, typ, kEsc
		if i == len(b) || b[i] == ' ' {
			break
		}
		if b[i] != ',' {
			return dst, Sample{}, badLine(b, from, syntaxErr(ErrInvalidField, i, "unexpected %q after value of field %q", b[i], key))
		}
		i++
	}
	n.fields = fields
	fieldText := b[fStart:i]

	ns, tsText, err := lineTime(b, i, now, unit, prec)
	if err != nil {
		return dst, Sample{}, badLine(b, from, err)
	}

	// The scans met a byte above 0x7f: check the line as a whole.
	if high && !utf8.Valid(b[from:]) {
		return dst, Sample{}, badLine(b, from, nil)
	}

	// Canonical order. Duplicates of the line's keys among themselves
	// sort next to each other; a default tag cannot be one, as it is
	// added only when the line lacks its key.
	switch {
	case len(tags) == 2 && !sorted && !n.alwaysSort:
		// Two tags out of order, as in "cpu,host=a,cpu=cpu0": the second
		// key sorts before the first or equals it, so a swap sorts them.
		if k := b[tags[1].ks:tags[1].ke]; bytes.Equal(b[tags[0].ks:tags[0].ke], k) {
			return dst, Sample{}, syntaxErr(ErrDuplicateTags, mStart+len(meas), "tag %q", k)
		}
		tags[0], tags[1] = tags[1], tags[0]
	case !sorted || n.alwaysSort:
		sortTags(b, tags)
		for j := 1; j < len(tags); j++ {
			if k := b[tags[j].ks:tags[j].ke]; bytes.Equal(b[tags[j-1].ks:tags[j-1].ke], k) {
				return dst, Sample{}, syntaxErr(ErrDuplicateTags, mStart+len(meas), "tag %q", k)
			}
		}
	}

	// Output: the line's tags in order, with the default tags it lacks
	// merged in before the first tag whose rank passes them. Positions are
	// recorded as offsets because dst and scratch may move while growing.
	start := len(dst)
	dst = append(dst, meas...)
	var runAt, hostAt span
	scratch := n.scratch[:0]
	next := 0 // the first default tag not yet merged
	for j := range tags {
		t := &tags[j]
		if int(t.rank) > next {
			dst = n.appendDefaults(dst, next, int(t.rank), have)
			next = int(t.rank)
		}
		off := len(dst)
		dst = append(dst, b[t.ks-1:t.ve]...)
		if t.which != tagRun && t.which != tagHost {
			continue
		}
		vs := off + (t.ke + 2 - t.ks)
		at := span{src: srcDst, off: vs, end: len(dst)}
		if t.esc {
			at = span{src: srcScratch, off: len(scratch)}
			scratch = appendUnescaped(scratch, b[t.ke+1:t.ve], clsKeyStop)
			at.end = len(scratch)
		}
		if t.which == tagRun {
			runAt = at
		} else {
			hostAt = at
		}
	}
	if next < numDefaults {
		dst = n.appendDefaults(dst, next, numDefaults, have)
	}
	if tsText != nil && len(b)-len(tsText) == fStart+len(fieldText)+1 && b[fStart-1] == ' ' {
		// Single spaces around the fields and a timestamp kept as sent,
		// as nearly every sender writes: " fields timestamp" is the end
		// of b, copied in one piece rather than four.
		dst = append(dst, b[fStart-1:]...)
	} else {
		dst = append(dst, ' ')
		dst = append(dst, fieldText...)
		dst = append(dst, ' ')
		switch {
		case tsText != nil:
			dst = append(dst, tsText...)
		case n.lastTimeOK && ns == n.lastTime:
			dst = append(dst, n.lastTimeText...)
		default:
			// Formatting costs more than the rest of a short line; the
			// lines of a body without timestamps all get the same one.
			k := len(dst)
			dst = strconv.AppendInt(dst, ns, 10)
			n.lastTime, n.lastTimeText, n.lastTimeOK = ns, append(n.lastTimeText[:0], dst[k:]...), true
		}
	}

	measAt := span{src: srcDst, off: start, end: start + len(meas)}
	if mEsc {
		measAt = span{src: srcScratch, off: len(scratch)}
		scratch = appendUnescaped(scratch, meas, clsMeasStop)
		measAt.end = len(scratch)
	}
	n.scratch = scratch
	// The fields are set one by one in the named result: a Sample built
	// in a variable was copied to the result with 16-byte loads of words
	// just stored, a store-forwarding stall on every line.
	s.Line = dst[start:len(dst):len(dst)]
	s.Measurement = measAt.get(dst, scratch)
	s.Run = runAt.get(dst, scratch)
	s.Host = hostAt.get(dst, scratch)
	s.Time = ns
	s.Fields = fields
	s.Own = have
	if have&(1<<tagRun) == 0 {
		s.Run = n.defRaw[tagRun]
	}
	if have&(1<<tagHost) == 0 {
		s.Host = n.defRaw[tagHost]
	}
	return dst, s, nil
}

// lineError is the error for a line of n bytes that is longer than
// maxLine, or else for prec, which is not a precision.
func lineError(n, maxLine int, prec Precision) error {
	if n > maxLine {
		return &SyntaxError{Err: ErrLineTooLong, Column: maxLine + 1,
			Detail: fmt.Sprintf("%d bytes, limit %d", n, maxLine)}
	}
	return fmt.Errorf("lineproto: invalid precision %d", int(prec))
}

// keyKind is what the errors of a tag key and a field key say.
type keyKind struct {
	class   error
	name    string // "tag", "field"
	control string // the format of a control character in the key
}

var (
	tagKey   = keyKind{ErrInvalidTagKey, "tag", "control character %q"}
	fieldKey = keyKind{ErrInvalidField, "field", "control character %q in field key"}
)

// keyErr is the error of the key b[ks:ke] of kind k that failed its
// checks: a control character at bad (when bad >= 0), an empty key, or no
// '=' after it. The checks stay in the callers, so the good path has no
// call.
func keyErr(b []byte, ks, ke, bad int, k *keyKind) error {
	switch {
	case bad >= 0:
		return syntaxErr(k.class, bad, k.control, b[bad])
	case ke == ks:
		return syntaxErr(k.class, ks, "missing %s key", k.name)
	default:
		return syntaxErr(k.class, ke, "missing '=' after %s key %q", k.name, b[ks:ke])
	}
}

// lineTimestamp parses the timestamp b[i:], the end of a line, in units of
// unit nanoseconds (prec, for the error). text is b[i:] when it can be
// copied as it is: canonical nanoseconds.
// lineTime returns the time of the line whose timestamp, if any, starts
// at or after the spaces at b[i:]: the timestamp converted from prec, or
// now truncated to prec where the line has none; and the timestamp's text
// where it can be copied as it is.
func lineTime(b []byte, i int, now time.Time, unit int64, prec Precision) (ns int64, text []byte, err error) {
	if i == len(b) {
		return truncNanos(now.UnixNano(), unit), nil, nil
	}
	for b[i] == ' ' {
		i++
	}
	if unit == 1 {
		if ns, ok := canonicalNanos(b[i:]); ok {
			return ns, b[i:], nil
		}
	}
	return lineTimestamp(b, i, unit, prec)
}

func lineTimestamp(b []byte, i int, unit int64, prec Precision) (ns int64, text []byte, err error) {
	ts, ok := parseInt64(b[i:])
	if !ok {
		return 0, nil, syntaxErr(ErrInvalidTimestamp, i, "%q is not an integer", b[i:])
	}
	if ns, ok = toNanos(ts, unit); !ok {
		return 0, nil, syntaxErr(ErrInvalidTimestamp, i, "%d%s is out of range", ts, prec)
	}
	if unit == 1 && canonicalInt(b[i:]) {
		text = b[i:]
	}
	return ns, text, nil
}

// trimLine trims line as lineprotocol/v2 allows: one newline, one carriage
// return, spaces (not tabs) at both ends. It returns line without the
// trailing ones and the index of its first byte that is not a leading
// space, so that offsets stay those of the input. It is small enough to be
// inlined.
func trimLine(line []byte) (b []byte, i int) {
	k := len(line)
	if k > 0 && line[k-1] == '\n' {
		k--
	}
	if k > 0 && line[k-1] == '\r' {
		k--
	}
	for k > 0 && line[k-1] == ' ' {
		k--
	}
	for i < k && line[i] == ' ' {
		i++
	}
	return line[:k], i
}

// badLine returns the error for a line refused with err (nil: the line has
// invalid UTF-8 somewhere): invalid UTF-8 anywhere in b[from:] is reported
// rather than err, as the check of the whole line came first.
func badLine(b []byte, from int, err error) error {
	if err == nil || !utf8.Valid(b[from:]) {
		return syntaxErr(ErrInvalidUTF8, from+invalidUTF8At(b[from:]), "")
	}
	return err
}

// appendDefaults appends the default tags k..l-1 that the line lacks, in
// as few pieces as the tags it has leave.
func (n *Normalizer) appendDefaults(dst []byte, k, l int, have uint8) []byte {
	for k < l {
		if have&(1<<k) != 0 {
			k++
			continue
		}
		e := k + 1
		for e < l && have&(1<<e) == 0 {
			e++
		}
		dst = append(dst, n.defText[n.defOff[k]:n.defOff[e]]...)
		k = e
	}
	return dst
}

// defaultRank returns how many of the default keys sort before key (a
// key equal to one of them has that one's index), and whether key is that
// default key. The default keys start with different bytes, so the first
// byte of key decides, except against the default key that starts with the
// same byte.
//
// That comparison is a byte loop rather than string comparisons: keys
// such as "rank" and "step_time" meet it on nearly every line, and the
// calls of the runtime's compare and equal were 5% of the profile of
// BenchmarkIngestAdd; the loop ends at the second byte for most keys.
func defaultRank(key []byte) (uint8, bool) {
	r := rankBefore[key[0]]
	if r&rankSame == 0 {
		return r, false
	}
	r &^= rankSame
	d := defaultKeys[r]
	for i := 1; ; i++ {
		switch {
		case i == len(d):
			if i == len(key) {
				return r, true
			}
			return r + 1, false // d is a prefix of key
		case i == len(key):
			return r, false // key is a prefix of d
		case key[i] != d[i]:
			if key[i] > d[i] {
				r++
			}
			return r, false
		}
	}
}

// rankBefore[c] is the number of default keys whose first byte is below
// c, plus rankSame if one starts with c.
var rankBefore = func() (t [256]uint8) {
	for c := range t {
		for _, d := range defaultKeys {
			if d[0] < byte(c) {
				t[c]++
			} else if d[0] == byte(c) {
				t[c] |= rankSame
			}
		}
	}
	return t
}()

const rankSame = 0x80

// keyLess reports whether tag key a sorts before b (escaped bytes, as
// InfluxDB orders them). Keys are not empty.
func keyLess(a, b []byte) bool {
	if a[0] != b[0] {
		return a[0] < b[0]
	}
	return string(a) < string(b)
}

// span locates a value in dst or in the scratch buffer.
type span struct {
	src      uint8
	off, end int
}

const (
	srcNone = iota
	srcDst
	srcScratch
)

func (s span) get(dst, scratch []byte) []byte {
	switch s.src {
	case srcDst:
		return dst[s.off:s.end:s.end]
	case srcScratch:
		return scratch[s.off:s.end:s.end]
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
// come with few tags, where insertion sort is fastest; the general sort
// bounds the cost of lines with thousands of tags.
func sortTags(b []byte, tags []tag) {
	if len(tags) > 16 {
		slices.SortFunc(tags, func(x, y tag) int { return bytes.Compare(b[x.ks:x.ke], b[y.ks:y.ke]) })
		return
	}
	for i := 1; i < len(tags); i++ {
		for j := i; j > 0 && keyLess(b[tags[j].ks:tags[j].ke], b[tags[j-1].ks:tags[j-1].ke]); j-- {
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
