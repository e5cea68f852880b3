package lineproto

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// refNormalizer is Normalize as it was before its fast paths: it appends
// the default tags, sorts all tags with insertion sort, checks duplicates in
// a separate pass and validates UTF-8 up front. The tests hold Normalize to
// it byte for byte: output, Sample and error text. It is a deliberately
// independent copy: some of its lines (escapes, the timestamp) read as
// Normalize's do, but sharing them would check Normalize against itself.
type refNormalizer struct {
	maxLine int
	defKey  [refNumDefaults][]byte
	defVal  [refNumDefaults][]byte
	defRaw  [refNumDefaults][]byte
	tags    []refTag
	scratch []byte
}

// The default tags in the order of DefaultTags.
const (
	refHost = iota
	refJob
	refStep
	refRun
	refNumDefaults
)

var refDefaultKeys = [refNumDefaults]string{"host", "job", "step", "run"}

type refTag struct {
	key, val []byte
	raw      []byte
	esc      bool
	which    int8
}

func newRefNormalizer(tags DefaultTags, maxLine int) *refNormalizer {
	n := &refNormalizer{maxLine: maxLine}
	for i, v := range [refNumDefaults]string{tags.Host, tags.Job, tags.Step, tags.Run} {
		n.defKey[i] = []byte(refDefaultKeys[i])
		if v != "" {
			n.defVal[i] = appendEscaped(nil, v, clsKeyStop)
			n.defRaw[i] = []byte(v)
		}
	}
	return n
}

func (n *refNormalizer) normalize(dst, line []byte, prec Precision, now time.Time) ([]byte, Sample, error) {
	unit := int64(prec.Duration())
	if len(line) > n.maxLine || unit == 0 {
		return dst, Sample{}, lineError(len(line), n.maxLine, prec)
	}
	b, i := trimLine(line)
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
	i, mEsc, bad := refScanEsc(b, i, clsMeasStop)
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
	var have [refNumDefaults]bool
	for i < len(b) && b[i] == ',' {
		i++
		ks := i
		ke, kEsc, err := refKey(b, i, ErrInvalidTagKey, "tag", "control character %q")
		if err != nil {
			return fail(err)
		}
		vs := ke + 1
		ve, vEsc, bad := refScanEsc(b, vs, clsKeyStop)
		if bad >= 0 {
			return fail(syntaxErr(ErrInvalidTagValue, bad, "control character %q", b[bad]))
		}
		if ve == vs {
			return fail(syntaxErr(ErrInvalidTagValue, vs, "missing value of tag %q", b[ks:ke]))
		}
		if ve < len(b) && b[ve] == '=' {
			return fail(syntaxErr(ErrInvalidTagValue, ve, "unescaped '=' in value of tag %q", b[ks:ke]))
		}
		t := refTag{key: b[ks:ke], val: b[vs:ve], esc: vEsc, which: -1}
		if !kEsc { // an escaped key cannot spell a default key
			switch string(t.key) {
			case "host":
				t.which = refHost
			case "job":
				t.which = refJob
			case "step":
				t.which = refStep
			case "run":
				t.which = refRun
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
		ke, _, err := refKey(b, i, ErrInvalidField, "field", "control character %q in field key")
		if err != nil {
			return fail(err)
		}
		key := b[ks:ke]
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

	ns, tsText, err := lineTime(b, i, now, unit, prec)
	if err != nil {
		return fail(err)
	}

	// Default tags, then canonical order.
	for k := range refNumDefaults {
		if !have[k] && n.defVal[k] != nil {
			tags = append(tags, refTag{key: n.defKey[k], val: n.defVal[k], raw: n.defRaw[k], which: int8(k)})
		}
	}
	refSortTags(tags)
	for j := 1; j < len(tags); j++ {
		if bytes.Equal(tags[j-1].key, tags[j].key) {
			return fail(syntaxErr(ErrDuplicateTags, mStart+len(meas), "tag %q", tags[j].key))
		}
	}

	// Output. Positions are recorded as offsets because dst and scratch
	// may move while growing.
	start := len(dst)
	dst = append(dst, meas...)
	var runAt, hostAt refSpan
	scratch := n.scratch[:0]
	for _, t := range tags {
		dst = append(dst, ',')
		dst = append(dst, t.key...)
		dst = append(dst, '=')
		at := refSpan{src: refSrcDst, off: len(dst), end: len(dst) + len(t.val)}
		dst = append(dst, t.val...)
		switch {
		case t.which != refRun && t.which != refHost:
			continue
		case t.raw != nil:
			at = refSpan{src: refSrcRaw, raw: t.raw}
		case t.esc:
			at.src, at.off = refSrcScratch, len(scratch)
			scratch = appendUnescaped(scratch, t.val, clsKeyStop)
			at.end = len(scratch)
		}
		if t.which == refRun {
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

	measAt := refSpan{src: refSrcDst, off: start, end: start + len(meas)}
	if mEsc {
		measAt = refSpan{src: refSrcScratch, off: len(scratch)}
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
func (n *refNormalizer) keep(tags []refTag) {
	clear(tags)
	n.tags = tags[:0]
}

// refSpan locates a value in dst, in the scratch buffer, or in a default.
type refSpan struct {
	src      uint8
	off, end int
	raw      []byte
}

const (
	refSrcNone = iota
	refSrcDst
	refSrcScratch
	refSrcRaw
)

func (s refSpan) get(dst, scratch []byte) []byte {
	switch s.src {
	case refSrcDst:
		return dst[s.off:s.end:s.end]
	case refSrcScratch:
		return scratch[s.off:s.end:s.end]
	case refSrcRaw:
		return s.raw
	}
	return nil
}

// refSortTags sorts by key (escaped bytes, as InfluxDB does). Lines usually
// come with few tags, often sorted already, where insertion sort is fastest;
// the general sort bounds the cost of lines with thousands of tags.
func refSortTags(tags []refTag) {
	if len(tags) > 16 {
		slices.SortFunc(tags, func(a, b refTag) int { return bytes.Compare(a.key, b.key) })
		return
	}
	for i := 1; i < len(tags); i++ {
		for j := i; j > 0 && bytes.Compare(tags[j].key, tags[j-1].key) < 0; j-- {
			tags[j], tags[j-1] = tags[j-1], tags[j]
		}
	}
}

// refKey scans the tag or field key (name) that starts at b[i] up to its
// '=', and fails with class where there is none: control is the text for a
// control character in it.
func refKey(b []byte, i int, class error, name, control string) (end int, esc bool, err error) {
	end, esc, bad := refScanEsc(b, i, clsKeyStop)
	switch {
	case bad >= 0:
		return 0, false, syntaxErr(class, bad, control, b[bad])
	case end == i:
		return 0, false, syntaxErr(class, i, "missing %s key", name)
	case end == len(b) || b[end] != '=':
		return 0, false, syntaxErr(class, end, "missing '=' after %s key %q", name, b[i:end])
	}
	return end, esc, nil
}

// refScanEsc scans an escaped token (measurement: stop = clsMeasStop; tag key,
// tag value, field key: stop = clsKeyStop) from b[i:]. It returns the index
// of the first unescaped stop byte (or len(b)), whether the token holds an
// escape sequence, and the index of the first control character that ended
// it (or -1).
//
// A backslash escapes the following byte only when that byte is of the stop
// class; otherwise the backslash is an ordinary byte (so `a\\ b` is `a\`
// followed by an escaped space), exactly as in lineprotocol/v2.
func refScanEsc(b []byte, i int, stop uint8) (end int, esc bool, bad int) {
	for i < len(b) {
		k := class[b[i]]
		if k == 0 {
			i++
			continue
		}
		if k&stop != 0 {
			return i, esc, -1
		}
		if k&clsNonPrint != 0 {
			return i, esc, i
		}
		if k&clsBackslash != 0 && i+1 < len(b) && class[b[i+1]]&stop != 0 {
			esc = true
			i += 2
			continue
		}
		i++
	}
	return i, esc, -1
}

// refCases are lines that take each fast path of Normalize and each way
// out of it, for the comparison with refNormalizer.
var refCases = []string{
	// Tags sorted, unsorted, equal, around and equal to the default keys.
	"m,a=1 f=1 1", "m,a=1,b=2 f=1 1", "m,b=2,a=1 f=1 1", "m,a=1,a=1 f=1 1", "m,a=1,b=2,a=3 f=1 1",
	"m,host=h f=1 1", "m,host=h,job=j,run=r,step=s f=1 1", "m,step=s,run=r,job=j,host=h f=1 1",
	"m,hos=1,host=2,hostx=3,j=4,job=5,jobs=6,r=7,run=8,runs=9,s=10,step=11,steps=12,z=13 f=1 1",
	"m,zz=1,host=2,aa=3 f=1 1", "m,run=a,run=b f=1 1", "m,host=a,host=a f=1 1",
	"m,h=1,i=2,k=3,q=4,ru=5,rv=6,st=7,su=8 f=1 1", "m,H=1,Host=2,_=3,~=4 f=1 1",
	`m,ho\ st=1,host=2 f=1 1`, `m,host\ =1 f=1 1`, `m,run=a\,b,host=c\ d f=1 1`, `m,run=a\=b f=1 1`,
	"m,host=h,zz=1,aa=2 f=1 1", "m,b=1,a=2,b=3 f=1 1",
	"sim_step,env=cartpole,rank=3 reward=101.234,episode_len=517i,step_time=0.00412 1764460000000000000",
	"gpu,rank=3,device=3 util=0.41,mem_used=12345678901i,temp_c=61,power_w=210.5 1764460000000000000",
	// UTF-8 in each place, valid and not, and before other errors.
	"mé f=1 1", "m,té=1 f=1 1", "m,t=é f=1 1", "m fé=1 1", `m f="é" 1`, "m,b=é,a=1 f=1 1",
	"m\xff f=1 1", "m,t\xff=1 f=1 1", "m,t=\xff f=1 1", "m f\xff=1 1", "m f=\"\xff\" 1", "m f=1\xff 1",
	"m f=1 1\xff", "m f=t\xff", "m f=1 \xff", "\xff", " \xff", "m,t=1,t=2 f=1 \xc3", "m,\xc3=1,\xc3=2 f=1",
	"m f=\"\xc3\" x", "m,t=\xc3\xa9,u=\xe2\x82 f=1", "m f=\"ok\",g=\xc3\xa9", "m\xc3 f", "m,t=a\xc3\x28 f=1",
	// Numbers at the edges of the fast path.
	"m f=123456789012345678i", "m f=1234567890123456789i", "m f=-123456789012345678i", "m f=-9223372036854775808i",
	"m f=9223372036854775807i", "m f=9999999999999999999i", "m f=-9999999999999999999i", "m f=1234567890123456789u", "m f=12345678901234567890u", "m f=18446744073709551615u",
	"m f=18446744073709551616u", "m f=99999999999999999999u", "m f=-1u", "m f=-u", "m f=u", "m f=i", "m f=-i", "m f=.i", "m f=1.i", "m f=1.5u",
	"m f=1" + strings.Repeat("0", 299), "m f=1" + strings.Repeat("0", 300), "m f=." + strings.Repeat("1", 300),
	"m f=." + strings.Repeat("1", 301), "m f=1" + strings.Repeat("0", 308), "m f=1" + strings.Repeat("0", 309),
	"m f=1.", "m f=.5", "m f=-.5", "m f=-.", "m f=.", "m f=-", "m f=--1", "m f=1-", "m f=1..2", "m f=1.2.3",
	"m f=1e5", "m f=1E5,g=2", "m f=1e", "m f=0x10", "m f=1\r", "m f=1\n", "m f=1\t", "m f=1i\t", "m f=1ii",
	"m f=1iu", "m f=1,g=2i,h=3u,i=-4.5,j=.6,k=7. 8", "m f=1 ,g=2", "m f=1,,g=2", "m f=01i,g=00.0,h=-00u",
	// Timestamps at the edges of the fast path, in each precision.
	"m f=1 0", "m f=1 00", "m f=1 01", "m f=1 -0", "m f=1 -1", "m f=1 1234567890123456789",
	"m f=1 9223372036854775806", "m f=1 9223372036854775807", "m f=1 9999999999999999999",
	"m f=1 10000000000000000000", "m f=1 -9223372036854775806", "m f=1 -9223372036854775807",
	"m f=1 1a", "m f=1 a1", "m f=1 1 ", "m f=1  1", "m f=1 1\r\n", "m f=1 +1", "m f=1 9223372036854775",
	"m f=1 9223372036854776", "m f=1 153722867280912930", "m f=1 2562047788015215",
	// Other ways to fail, to compare the errors.
	"", " ", "#c", ",t=1 f=1", "m", "m ", "m,", "m,t", "m,t=", "m,=1 f=1", "m,t=1=2 f=1", "m,t=1", "m f",
	"m f=", "m =1", `m f="x`, `m f="x"y`, "m f=tru", "m f=yes", "m f=1 1 1", "m\x01 f=1", "m,t=\x7f f=1",
	`m\ ,t\,=a\= f\ =1 1`, `m,t=a\ f=1`,
}

// refPrecisions are the precisions the comparison runs with.
var refPrecisions = []Precision{Nanosecond, Microsecond, Millisecond, Second, Minute, Hour}

// refDefaults are the sets of default tags the comparison runs with.
var refDefaults = []DefaultTags{
	testDefaults,
	{},
	{Host: "h"},
	{Run: "r", Step: "s"},
	{Job: "j", Step: "s"},
	{Host: "my host", Job: "a,b", Step: "x=y", Run: `back\slash`},
}

// compareWithRef normalizes line with n and ref and fails on any difference
// in output, Sample or error.
func compareWithRef(t *testing.T, n *Normalizer, ref *refNormalizer, line []byte, prec Precision) {
	t.Helper()
	prefix := []byte("prev\n")
	got, gs, gerr := n.Normalize(slices.Clip(prefix), line, prec, testNow)
	want, ws, werr := ref.normalize(slices.Clip(prefix), line, prec, testNow)
	what := fmt.Sprintf("Normalize(%q, %v) sort %v", line, prec, n.alwaysSort)
	if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
		t.Fatalf("%s: got error %v, want %v", what, gerr, werr)
	}
	if gerr != nil {
		var gse, wse *SyntaxError
		if errors.As(gerr, &gse) != errors.As(werr, &wse) || (gse != nil && (gse.Err != wse.Err || gse.Column != wse.Column)) {
			t.Fatalf("%s: got error %#v, want %#v", what, gerr, werr)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
	if !bytes.Equal(gs.Line, ws.Line) || (gs.Line == nil) != (ws.Line == nil) {
		t.Fatalf("%s: got line %q, want %q", what, gs.Line, ws.Line)
	}
	for _, f := range []struct {
		name      string
		got, want []byte
	}{{"measurement", gs.Measurement, ws.Measurement}, {"run", gs.Run, ws.Run}, {"host", gs.Host, ws.Host}} {
		if !bytes.Equal(f.got, f.want) || (f.got == nil) != (f.want == nil) {
			t.Fatalf("%s: got %s %q (nil %v), want %q (nil %v)", what, f.name, f.got, f.got == nil, f.want, f.want == nil)
		}
	}
	if gs.Time != ws.Time {
		t.Fatalf("%s: got time %d, want %d", what, gs.Time, ws.Time)
	}
}

// Normalize must give what refNormalizer gives, byte for byte, on its fast
// paths and off them, with the tags sorted or not.
func TestNormalizeMatchesReference(t *testing.T) {
	lines := slices.Concat(refCases, fuzzSeeds)
	for _, bl := range benchLines {
		lines = append(lines, bl.line)
	}
	for _, defs := range refDefaults {
		for _, alwaysSort := range []bool{false, true} {
			n := newTestNormalizer(t, defs)
			n.alwaysSort = alwaysSort
			ref := newRefNormalizer(defs, DefaultMaxLineBytes)
			for _, l := range lines {
				for _, prec := range refPrecisions {
					compareWithRef(t, n, ref, []byte(l), prec)
					compareWithRef(t, n, ref, []byte("  "+l+"  \r\n"), prec)
				}
			}
		}
	}
}

// The sorting path must not need a sorted line: lines in every order of
// their tags give one canonical line, or one error.
func TestNormalizeTagOrders(t *testing.T) {
	tags := []string{"a=1", "host=h", "rank=3", "run=x", "zz=2"}
	for _, alwaysSort := range []bool{false, true} {
		n := newTestNormalizer(t, testDefaults)
		n.alwaysSort = alwaysSort
		ref := newRefNormalizer(testDefaults, DefaultMaxLineBytes)
		var first string
		permute(tags, 0, func(p []string) {
			line := []byte("m," + strings.Join(p, ",") + " f=1 1")
			compareWithRef(t, n, ref, line, Nanosecond)
			_, s, err := n.Normalize(nil, line, Nanosecond, testNow)
			if err != nil {
				t.Fatalf("Normalize(%q): %v", line, err)
			}
			if first == "" {
				first = string(s.Line)
			} else if string(s.Line) != first {
				t.Fatalf("Normalize(%q) = %q, but another order gave %q", line, s.Line, first)
			}
		})
		if want := "m,a=1,host=h,job=42,rank=3,run=x,step=0,zz=2 f=1 1"; first != want {
			t.Errorf("got %q, want %q", first, want)
		}
	}
}

// permute calls fn with each permutation of s[k:] (s[:k] fixed).
func permute(s []string, k int, fn func([]string)) {
	if k == len(s) {
		fn(s)
		return
	}
	for i := k; i < len(s); i++ {
		s[k], s[i] = s[i], s[k]
		permute(s, k+1, fn)
		s[k], s[i] = s[i], s[k]
	}
}

func FuzzNormalizeReference(f *testing.F) {
	for _, s := range slices.Concat(refCases, fuzzSeeds) {
		f.Add(byte(0), []byte(s))
	}
	for _, bl := range benchLines {
		f.Add(byte(1), []byte(bl.line))
	}
	f.Fuzz(func(t *testing.T, mode byte, line []byte) {
		// mode picks the precision, the default tags and the sort.
		prec := refPrecisions[int(mode)%len(refPrecisions)]
		defs := refDefaults[int(mode>>3)%len(refDefaults)]
		n := newTestNormalizer(t, defs, WithMaxLineBytes(4096))
		n.alwaysSort = mode&0x80 != 0
		compareWithRef(t, n, newRefNormalizer(defs, 4096), line, prec)
	})
}

// canonicalNanos must agree with strconv on every spelling it accepts, and
// refuse a non-digit in any position of the eight-byte groups.
func TestCanonicalNanos(t *testing.T) {
	var in []string
	for _, base := range []string{"1764460000000000000", "9223372036854775806", "9223372036854775807", "12345678", "123456789", "1234567890123456"} {
		in = append(in, base)
		for i := range len(base) {
			for _, c := range []byte{'/', ':', '?', ' ', '-', '0', 'a', 0x80 | '1', '1' - 0x10, '1' + 0x10} {
				b := []byte(base)
				b[i] = c
				in = append(in, string(b))
			}
		}
	}
	for _, s := range in {
		got, ok := canonicalNanos([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		wantOK := err == nil && want >= 0 && want <= maxNanoTime && strconv.FormatInt(want, 10) == s
		if ok != wantOK || (ok && got != want) {
			t.Errorf("canonicalNanos(%q) = %d, %v; want %d, %v", s, got, ok, want, wantOK)
		}
	}
}

// Normalize keeps the last timestamp it formatted; lines that get the same
// time, or another, in any sequence must still give what the reference
// gives.
func TestNormalizeTimeCache(t *testing.T) {
	n := newTestNormalizer(t, testDefaults)
	ref := newRefNormalizer(testDefaults, DefaultMaxLineBytes)
	steps := []struct {
		line string
		prec Precision
		now  time.Time
	}{
		{"m f=1", Nanosecond, testNow},
		{"m f=2", Nanosecond, testNow},
		{"m f=3", Nanosecond, testNow.Add(1)},
		{"m f=4", Millisecond, testNow.Add(1)},
		{"m f=5 1700000000123", Millisecond, testNow},
		{"m f=6", Millisecond, testNow},
		{"m f=7 0001700000000123000000", Nanosecond, testNow},
		{"m f=8", Nanosecond, time.Unix(0, 5)},
		{"m f=9 0005", Nanosecond, testNow},
		{"m f=10 5", Nanosecond, testNow},
		{"m f=11", Nanosecond, time.Unix(0, 5)},
		{"m f=12 -1", Second, testNow},
		{"m f=13", Nanosecond, time.Unix(-1, 0)},
		{"m f=14", Nanosecond, testNow},
	}
	for _, st := range steps {
		got, gs, gerr := n.Normalize(nil, []byte(st.line), st.prec, st.now)
		want, ws, werr := ref.normalize(nil, []byte(st.line), st.prec, st.now)
		if gerr != nil || werr != nil || !bytes.Equal(got, want) || gs.Time != ws.Time {
			t.Fatalf("Normalize(%q, %v, %v) = %q, %d, %v; want %q, %d, %v", st.line, st.prec, st.now, got, gs.Time, gerr, want, ws.Time, werr)
		}
	}
}
