package lineproto

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// decoded is what a Decoder gives for a line, as comparable values.
type decoded struct {
	m      string
	tags   []string // key=value, unescaped
	fields []string // key=type:value, unescaped
	ts     string   // "" when the line has none
}

func decodeOf(d *Decoder) decoded {
	out := decoded{m: string(d.Measurement)}
	for _, t := range d.Tags {
		out.tags = append(out.tags, string(t.Key)+"="+string(t.Value))
	}
	for i := range d.Fields {
		f := &d.Fields[i]
		out.fields = append(out.fields, fmt.Sprintf("%s=%s:%v", f.Key, f.Type, f.Interface()))
	}
	if d.HasTime {
		out.ts = fmt.Sprint(d.Time)
	}
	return out
}

func TestDecode(t *testing.T) {
	for _, c := range []struct {
		line string
		want decoded
		err  error
	}{
		{line: "cpu,host=a,cpu=cpu0 usage_user=1.5,usage_system=0.3 1700000000000000000",
			want: decoded{"cpu", []string{"host=a", "cpu=cpu0"}, []string{"usage_user=float:1.5", "usage_system=float:0.3"}, "1700000000000000000"}},
		{line: "m a=1,b=-1.5,c=.5,d=1.,e=1e10,f=1E-3,g=-0,h=1e+5 1",
			want: decoded{m: "m", fields: []string{"a=float:1", "b=float:-1.5", "c=float:0.5", "d=float:1", "e=float:1e+10", "f=float:0.001", "g=float:-0", "h=float:100000"}, ts: "1"}},
		{line: "m a=3i,b=-3i,u=18446744073709551615u,z=0u -9223372036854775808",
			want: decoded{m: "m", fields: []string{"a=integer:3", "b=integer:-3", "u=unsigned:18446744073709551615", "z=unsigned:0"}, ts: "-9223372036854775808"}},
		{line: "m a=t,b=T,c=true,d=True,e=TRUE,f=f,g=F,h=false,i=False,j=FALSE 9223372036854775807",
			want: decoded{m: "m", fields: []string{"a=boolean:true", "b=boolean:true", "c=boolean:true", "d=boolean:true", "e=boolean:true",
				"f=boolean:false", "g=boolean:false", "h=boolean:false", "i=boolean:false", "j=boolean:false"}, ts: "9223372036854775807"}},
		{line: `m a="",b="x",c="say \"hi\"",d="back\\slash\\",e="a\nb\t" 1`,
			want: decoded{m: "m", fields: []string{"a=string:", "b=string:x", `c=string:say "hi"`, `d=string:back\slash\`, `e=string:a\nb\t`}, ts: "1"}},
		{line: "m s=\"two\nrows, and = signs\" 1",
			want: decoded{m: "m", fields: []string{"s=string:two\nrows, and = signs"}, ts: "1"}},
		{line: `my\ meas\,x,t\ k\=\,=v\=1\,2\ x f\=x=1 1`,
			want: decoded{"my meas,x", []string{`t k=,=v=1,2 x`}, []string{"f=x=float:1"}, "1"}},
		{line: `m\x,t=a\b f\y=1 1`, want: decoded{`m\x`, []string{`t=a\b`}, []string{`f\y=float:1`}, "1"}},
		// `a\` then an escaped space, and `x\` then an escaped comma.
		{line: `a\\ b,t=x\\,y f=1 1`, want: decoded{`a\ b`, []string{`t=x\,y`}, []string{"f=float:1"}, "1"}},
		{line: `a\=b,t\==x\\\,y f=1`, want: decoded{`a\=b`, []string{`t==x\\,y`}, []string{"f=float:1"}, ""}},
		{line: "température,pièce=salon valeur=21.5 1", want: decoded{"température", []string{"pièce=salon"}, []string{"valeur=float:21.5"}, "1"}},
		{line: "m,t=1,t=2 f=1,f=2i", want: decoded{"m", []string{"t=1", "t=2"}, []string{"f=float:1", "f=integer:2"}, ""}},

		{line: "", err: errEmptyLine},
		{line: "m f=\"\xff\" 1", err: errDecUTF8},
		{line: ",t=a f=1", err: errDecMeasurement},
		{line: "#m f=1", err: errDecMeasurement},
		{line: "m,t f=1", err: errDecTag},
		{line: "m,=a f=1", err: errDecTag},
		{line: "m,t= f=1", err: errDecTag},
		{line: "m", err: errDecNoFields},
		{line: "m  f=1", err: errDecNoFields},
		{line: "m f=1,", err: errDecFieldKey},
		{line: "m f", err: errDecFieldKey},
		{line: "m f=", err: errDecFieldValue},
		{line: "m f=1  1", err: errDecTimestamp},
		{line: "m f=0x1p4 1", err: errDecNumber},
		{line: "m f=1e400 1", err: errDecNumber},
		{line: "m f=nan 1", err: errDecNumber},
		{line: "m f=+1 1", err: errDecNumber},
		{line: "m f=1_0 1", err: errDecNumber},
		{line: "m f=9223372036854775808i 1", err: errDecNumber},
		{line: "m f=-1u 1", err: errDecNumber},
		{line: "m f=18446744073709551616u 1", err: errDecNumber},
		{line: "m f=i 1", err: errDecNumber},
		{line: "m f=tru 1", err: errDecNumber},
		{line: `m f="abc\"`, err: errDecString},
		{line: "m f=1 123 456", err: errDecTrailing},
		{line: "m f=1 17x", err: errDecTrailing},
		{line: "m f=1 x", err: errDecTimestamp},
		{line: "m f=1 9223372036854775808", err: errDecTimestamp},
		{line: "m f=1 -", err: errDecTimestamp},
		{line: "m\x01 f=1", err: errDecControl},
		{line: "m,t=\x7f f=1", err: errDecControl},
		{line: "m f=1\n", err: errDecNumber},
	} {
		var d Decoder
		err := d.Decode([]byte(c.line))
		if err != c.err {
			t.Errorf("Decode(%q): error %v, want %v", c.line, err, c.err)
			continue
		}
		if err == nil && !reflect.DeepEqual(decodeOf(&d), c.want) {
			t.Errorf("Decode(%q) = %+v, want %+v", c.line, decodeOf(&d), c.want)
		}
	}
}

// TestDecodeReuse decodes lines with escapes one after another with one
// Decoder: each result must stand for its own line.
func TestDecodeReuse(t *testing.T) {
	var d Decoder
	lines := []string{`a\ b,k\ 1=v\ 1 f\ 1="x\"y" 1`, "m,k=v f=1 2", `c\,d,k=v\,w s="\\" 3`}
	for round := range 2 {
		for _, line := range lines {
			if err := d.Decode([]byte(line)); err != nil {
				t.Fatal(err)
			}
			out, err := AppendLine(nil, string(d.Measurement), tagMap(&d), fieldMap(&d), d.Time)
			if err != nil || string(out) != line {
				t.Fatalf("round %d: %q decodes and encodes as %q (%v)", round, line, out, err)
			}
		}
	}
	b := []byte(lines[0])
	if n := testing.AllocsPerRun(100, func() { _ = d.Decode(b) }); n != 0 {
		t.Errorf("Decode allocates %.0f times per line once its buffers have grown", n)
	}
}

func tagMap(d *Decoder) map[string]string {
	m := map[string]string{}
	for _, t := range d.Tags {
		m[string(t.Key)] = string(t.Value)
	}
	return m
}

func fieldMap(d *Decoder) map[string]any {
	m := map[string]any{}
	for i := range d.Fields {
		m[string(d.Fields[i].Key)] = d.Fields[i].Interface()
	}
	return m
}

// FuzzDecode holds the Decoder to Normalize, which validates what the
// agent ships: a line Normalize accepts decodes from its canonical form to
// the same measurement, fields and time; a line the Decoder accepts is one
// Normalize accepts unless it repeats a tag key or has a timestamp outside
// InfluxDB's range (which a reader takes and the agent refuses), and whose
// canonical form decodes the same. Every decoded line encodes with
// AppendLine to a line that decodes to the same values.
func FuzzDecode(f *testing.F) {
	// Normalize's seeds, and lines that only a reader takes.
	for _, s := range append(slices.Clone(fuzzSeeds), "m,b=1,a=2 f=1,f=2i 5", "m f=1 -9223372036854775808", "m,t=1,t=2 f=1 1", "m f=1 17x") {
		f.Add([]byte(s))
	}
	now := time.Unix(1700000000, 0)
	f.Fuzz(func(t *testing.T, line []byte) {
		n, err := NewNormalizer(DefaultTags{})
		if err != nil {
			t.Fatal(err)
		}
		_, s, nerr := n.Normalize(nil, line, Nanosecond, now)
		if nerr == nil {
			var d Decoder
			if err := d.Decode(s.Line); err != nil {
				t.Fatalf("Normalize(%q) = %q, which does not decode: %v", line, s.Line, err)
			}
			agree(t, line, &d, &s)
		}

		var d Decoder
		if err := d.Decode(line); err != nil {
			return
		}
		switch {
		case nerr == nil:
		case len(line) <= DefaultMaxLineBytes && uniqueTags(&d) && (!d.HasTime || d.Time >= minNanoTime && d.Time <= maxNanoTime):
			t.Fatalf("Decode accepts %q, Normalize refuses it: %v", line, nerr)
		default:
			return
		}
		agree(t, line, &d, &s)

		want := fieldMap(&d)
		out, err := AppendLine(nil, string(d.Measurement), tagMap(&d), want, d.Time)
		if err != nil {
			// Decode gives no empty name, none with a control character or
			// a trailing backslash, no invalid UTF-8, no NaN.
			t.Fatalf("%q decodes to what AppendLine refuses: %v", line, err)
		}
		var back Decoder
		if err := back.Decode(out); err != nil {
			t.Fatalf("%q encodes as %q, which does not decode: %v", line, out, err)
		}
		if string(back.Measurement) != string(d.Measurement) || !reflect.DeepEqual(tagMap(&back), tagMap(&d)) ||
			!sameFields(fieldMap(&back), want) || back.Time != d.Time && d.HasTime {
			t.Fatalf("%q encodes as %q, which decodes differently", line, out)
		}
	})
}

// agree checks that a decoded line and a Sample of the same line agree on
// measurement, field keys, field types and time.
func agree(t *testing.T, line []byte, d *Decoder, s *Sample) {
	t.Helper()
	if string(d.Measurement) != string(s.Measurement) {
		t.Fatalf("%q: measurement %q decoded, %q normalized", line, d.Measurement, s.Measurement)
	}
	if len(d.Fields) != len(s.Fields) {
		t.Fatalf("%q: %d fields decoded, %d normalized", line, len(d.Fields), len(s.Fields))
	}
	for i := range d.Fields {
		if k := s.Fields[i].AppendKey(nil); string(k) != string(d.Fields[i].Key) || s.Fields[i].Type != d.Fields[i].Type {
			t.Fatalf("%q: field %d is %q %s decoded, %q %s normalized", line, i, d.Fields[i].Key, d.Fields[i].Type, k, s.Fields[i].Type)
		}
	}
	if d.HasTime && d.Time != s.Time {
		t.Fatalf("%q: time %d decoded, %d normalized", line, d.Time, s.Time)
	}
}

func uniqueTags(d *Decoder) bool {
	seen := map[string]bool{}
	for _, t := range d.Tags {
		if seen[string(t.Key)] {
			return false
		}
		seen[string(t.Key)] = true
	}
	return true
}

// sameFields compares field maps, with NaN never decoded and -0 equal to
// itself bit for bit.
func sameFields(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok {
			return false
		}
		if fx, ok := x.(float64); ok {
			if fy, ok := y.(float64); !ok || math.Float64bits(fx) != math.Float64bits(fy) {
				return false
			}
			continue
		}
		if x != y {
			return false
		}
	}
	return true
}

// FuzzSeriesKey holds the series-key shortcut to the full decode: a line
// Decode accepts has its tags end exactly at SeriesEnd, and any line made
// of that series key and another line's rest decodes the same way (same
// fields, timestamp and error) whether decoded in full or with
// DecodeFields from the key on.
func FuzzSeriesKey(f *testing.F) {
	seeds := [][2]string{
		{"cpu,host=a,cpu=cpu0 usage_user=1.5 1700000000000000000", "cpu,host=b f=2i,s=\"a b\" 1"},
		{`my\ meas\,x,t\ k\=\,=v\=1\,2\ x f\=x=1 1`, `m f="x\" y" 1`},
		{`a\\ b,t=x\\,y f=1 1`, "m f=1 17x"},
		{`m\ ,t=a\  f=1 1`, "m  f=1 1"},
		{"m,t=é f=1 1", "m f=\"\xff\" 1"},
		{"m,t=a f=1 1", "m"},
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var d Decoder
		if err := d.Decode(a); err != nil {
			return
		}
		k := SeriesEnd(a)
		if k != d.TagsEnd {
			t.Fatalf("%q: tags end at %d, SeriesEnd says %d", a, d.TagsEnd, k)
		}
		j := SeriesEnd(b)
		if j < 0 {
			return
		}
		line := append(append([]byte{}, a[:k]...), b[j:]...)
		var full, fast Decoder
		errFull := full.Decode(line)
		errFast := fast.DecodeFields(line, k)
		if errFull != errFast {
			t.Fatalf("%q: full decode %v, from the series key %v", line, errFull, errFast)
		}
		if errFull != nil {
			return
		}
		if full.TagsEnd != k || full.Time != fast.Time || full.HasTime != fast.HasTime || !reflect.DeepEqual(full.Fields, fast.Fields) {
			t.Fatalf("%q: full decode and decode from the series key differ", line)
		}
	})
}

func TestSeriesEnd(t *testing.T) {
	for line, want := range map[string]int{
		"m f=1":             1,
		`m\ x,t=a\ b f=1 1`: 11,
		`m\\ f=1`:           -1, // `m\` and an escaped space
		"m":                 -1,
		`m\ `:               -1,
	} {
		if got := SeriesEnd([]byte(line)); got != want {
			t.Errorf("SeriesEnd(%q) = %d, want %d", line, got, want)
		}
	}
	if !strings.Contains(errDecTag.Error(), "key=value") {
		t.Error("the dead-letter reason of a bad tag changed")
	}
}

// exactFloatAgrees fails t if exactFloat takes s and answers other than
// strconv (bit for bit, so -0 too).
func exactFloatAgrees(t *testing.T, s string) bool {
	t.Helper()
	x, ok := exactFloat([]byte(s))
	if !ok {
		return false
	}
	want, err := strconv.ParseFloat(s, 64)
	if err != nil || math.Float64bits(x) != math.Float64bits(want) {
		t.Fatalf("exactFloat(%q) = %v, strconv: %v %v", s, x, want, err)
	}
	return true
}

func TestExactFloat(t *testing.T) {
	taken := []string{"0", "-0", "-0.0", "1", "1.", ".5", "-.5", "007.25", "123.456", "-999999.999",
		"9007199254740992", "0.1", "0.3", "1.797693134862315", "0.0000000000000000000001", "000000000000000000000000012.5"}
	for _, s := range taken {
		if !exactFloatAgrees(t, s) {
			t.Errorf("exactFloat(%q) not taken", s)
		}
	}
	// Left to the general way: strconv decides these.
	for _, s := range []string{"", "-", ".", "-.", "1e5", "1.5E-3", "9007199254740993", "1.2.3", "1_0",
		"inf", "NaN", "0x1p3", "+1", "12345678901234567890", "0.00000000000000000000001", "12345678901234567.8", "1.7976931348623157", "1,", "1 "} {
		if s != "" && exactFloatAgrees(t, s) {
			t.Errorf("exactFloat(%q) taken", s)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		m := rng.Uint64N(1 << uint(rng.IntN(60)+1))
		s := strconv.FormatUint(m, 10)
		if p := rng.IntN(len(s) + 2); p <= len(s) {
			s = s[:p] + "." + s[p:]
		}
		if rng.IntN(2) == 0 {
			s = "-" + s
		}
		exactFloatAgrees(t, s)
	}
}

func FuzzExactFloat(f *testing.F) {
	for _, s := range []string{"0", "-1.5", ".25", "123456.789", "9007199254740992.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s != "" {
			exactFloatAgrees(t, s)
		}
	})
}
