package lineproto

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

var testNow = time.Unix(1700000000, 123456789)

var testDefaults = DefaultTags{Host: "node1", Job: "42", Step: "0", Run: "r1"}

func newTestNormalizer(t testing.TB, tags DefaultTags, opts ...Option) *Normalizer {
	t.Helper()
	n, err := NewNormalizer(tags, opts...)
	if err != nil {
		t.Fatalf("NewNormalizer: %v", err)
	}
	return n
}

// added is what testDefaults append to a line that has none of them.
const added = ",host=node1,job=42,run=r1,step=0"

func TestNormalizeValid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		prec Precision
		want string
		meas string // want Sample.Measurement; "" means "m"
		run  string // want Sample.Run; "" means "r1"
		host string // want Sample.Host; "" means "node1"
	}{
		{name: "typical", in: "cpu,host=a,cpu=cpu0 usage_user=1.5,usage_system=0.3 1700000000000000000",
			want: "cpu,cpu=cpu0,host=a,job=42,run=r1,step=0 usage_user=1.5,usage_system=0.3 1700000000000000000",
			meas: "cpu", host: "a"},
		{name: "floats", in: "m a=1,b=-1.5,c=.5,d=1.,e=1e10,f=1E-3,g=-0,h=1e+5,i=0.000001 1",
			want: "m" + added + " a=1,b=-1.5,c=.5,d=1.,e=1e10,f=1E-3,g=-0,h=1e+5,i=0.000001 1"},
		{name: "integers", in: "m a=3i,b=-3i,c=0i,d=9223372036854775807i,e=-9223372036854775808i 1",
			want: "m" + added + " a=3i,b=-3i,c=0i,d=9223372036854775807i,e=-9223372036854775808i 1"},
		{name: "integer boundaries", in: "m a=999999999999999999i,b=-999999999999999999i,c=-9223372036854775807i,d=0000000000000000000000012i 1",
			want: "m" + added + " a=999999999999999999i,b=-999999999999999999i,c=-9223372036854775807i,d=0000000000000000000000012i 1"},
		{name: "unsigned boundaries", in: "m a=9999999999999999999u,b=10000000000000000000u,c=000000000000000000000000001u 1",
			want: "m" + added + " a=9999999999999999999u,b=10000000000000000000u,c=000000000000000000000000001u 1"},
		{name: "long float", in: "m a=1" + strings.Repeat("0", 299) + ",b=0." + strings.Repeat("0", 400) + "1,c=1" + strings.Repeat("0", 307) + ".5 1",
			want: "m" + added + " a=1" + strings.Repeat("0", 299) + ",b=0." + strings.Repeat("0", 400) + "1,c=1" + strings.Repeat("0", 307) + ".5 1"},
		{name: "long timestamp", in: "m f=1 0000000000000000000000042", want: "m" + added + " f=1 42"},
		{name: "long negative timestamp", in: "m f=1 -0000000000000000000000042", want: "m" + added + " f=1 -42"},
		{name: "unsigned", in: "m a=0u,b=18446744073709551615u 1",
			want: "m" + added + " a=0u,b=18446744073709551615u 1"},
		{name: "booleans", in: "m a=t,b=T,c=true,d=True,e=TRUE,f=f,g=F,h=false,i=False,j=FALSE 1",
			want: "m" + added + " a=t,b=T,c=true,d=True,e=TRUE,f=f,g=F,h=false,i=False,j=FALSE 1"},
		{name: "strings", in: `m a="",b="x",c="say \"hi\"",d="back\\slash\\",e="a,b c=d",f="tab	and \n" 1`,
			want: "m" + added + ` a="",b="x",c="say \"hi\"",d="back\\slash\\",e="a,b c=d",f="tab	and \n" 1`},
		{name: "string with raw newline", in: "m s=\"two\nrows\" 1",
			want: "m" + added + " s=\"two\nrows\" 1"},
		{name: "string then more fields", in: `m s="x",n=1i,b=t 1`,
			want: "m" + added + ` s="x",n=1i,b=t 1`},
		{name: "escaped measurement", in: `my\ meas\,x f=1 1`,
			want: `my\ meas\,x` + added + " f=1 1", meas: "my meas,x"},
		{name: "measurement with equals and quote", in: `a=b"c f=1 1`,
			want: `a=b"c` + added + " f=1 1", meas: `a=b"c`},
		{name: "backslash not before special", in: `m\x,t=a\b f\y=1 1`,
			want: `m\x,host=node1,job=42,run=r1,step=0,t=a\b f\y=1 1`, meas: `m\x`},
		{name: "double backslashes", in: `a\\ b,t=x\\,y f=1 1`,
			want: `a\\ b,host=node1,job=42,run=r1,step=0,t=x\\,y f=1 1`, meas: `a\ b`},
		{name: "escaped tag key and value", in: `m,t\ k\=\,=v\=1\,2\ x f=1 1`,
			want: `m,host=node1,job=42,run=r1,step=0,t\ k\=\,=v\=1\,2\ x f=1 1`},
		{name: "escaped field key", in: `m f\=x\,y\ z=1 1`,
			want: "m" + added + ` f\=x\,y\ z=1 1`},
		{name: "tags sorted", in: "m,z=1,a=2,m=3 f=1 1",
			want: "m,a=2,host=node1,job=42,m=3,run=r1,step=0,z=1 f=1 1"},
		{name: "sender wins", in: "m,step=9,run=mine,job=7,host=h2 f=1 1",
			want: "m,host=h2,job=7,run=mine,step=9 f=1 1", run: "mine", host: "h2"},
		{name: "sender wins in any order", in: "m,host=h2,zz=1 f=1 1",
			want: "m,host=h2,job=42,run=r1,step=0,zz=1 f=1 1", host: "h2"},
		{name: "escaped run and host", in: `m,run=a\ b,host=x\,y f=1 1`,
			want: `m,host=x\,y,job=42,run=a\ b,step=0 f=1 1`, run: "a b", host: "x,y"},
		{name: "escaped key is not a default", in: `m,ho\st=a f=1 1`,
			want: `m,ho\st=a,host=node1,job=42,run=r1,step=0 f=1 1`},
		{name: "unicode", in: "température,pièce=salon valeur=21.5 1",
			want: "température,host=node1,job=42,pièce=salon,run=r1,step=0 valeur=21.5 1", meas: "température"},
		{name: "duplicate fields allowed", in: "m f=1,f=2 1", want: "m" + added + " f=1,f=2 1"},
		{name: "white space", in: "  m,t=a   f=1   5  \r\n", want: "m,host=node1,job=42,run=r1,step=0,t=a f=1 5"},
		{name: "lf", in: "m f=1 5\n", want: "m" + added + " f=1 5"},
		{name: "cr", in: "m f=1 5\r", want: "m" + added + " f=1 5"},
		{name: "leading zeros in timestamp", in: "m f=1 0005", want: "m" + added + " f=1 5"},
		{name: "negative timestamp", in: "m f=1 -1", want: "m" + added + " f=1 -1"},
		{name: "minus zero timestamp", in: "m f=1 -0", want: "m" + added + " f=1 0"},
		{name: "largest timestamp", in: "m f=1 9223372036854775806",
			want: "m" + added + " f=1 9223372036854775806"},
		{name: "smallest timestamp", in: "m f=1 -9223372036854775806",
			want: "m" + added + " f=1 -9223372036854775806"},
		{name: "precision us", in: "m f=1 1700000000000000", prec: Microsecond,
			want: "m" + added + " f=1 1700000000000000000"},
		{name: "precision ms", in: "m f=1 1700000000000", prec: Millisecond,
			want: "m" + added + " f=1 1700000000000000000"},
		{name: "precision s", in: "m f=1 1700000000", prec: Second,
			want: "m" + added + " f=1 1700000000000000000"},
		{name: "precision s negative", in: "m f=1 -5", prec: Second,
			want: "m" + added + " f=1 -5000000000"},
		{name: "precision m", in: "m f=1 2", prec: Minute,
			want: "m" + added + " f=1 120000000000"},
		{name: "precision h", in: "m f=1 2", prec: Hour,
			want: "m" + added + " f=1 7200000000000"},
		{name: "no timestamp", in: "m f=1",
			want: "m" + added + " f=1 1700000000123456789"},
		{name: "no timestamp, trailing space", in: "m f=1 ",
			want: "m" + added + " f=1 1700000000123456789"},
		{name: "no timestamp us", in: "m f=1", prec: Microsecond,
			want: "m" + added + " f=1 1700000000123456000"},
		{name: "no timestamp ms", in: "m f=1", prec: Millisecond,
			want: "m" + added + " f=1 1700000000123000000"},
		{name: "no timestamp s", in: "m f=1", prec: Second,
			want: "m" + added + " f=1 1700000000000000000"},
		{name: "no timestamp after string", in: `m s="x y"`,
			want: "m" + added + ` s="x y" 1700000000123456789`},
	}
	n := newTestNormalizer(t, testDefaults)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("previous\n")
			out, s, err := n.Normalize(prefix, []byte(tt.in), tt.prec, testNow)
			if err != nil {
				t.Fatalf("Normalize(%q): %v", tt.in, err)
			}
			if got := string(out); got != "previous\n"+tt.want {
				t.Errorf("Normalize(%q)\n got dst %q\nwant dst %q", tt.in, got, "previous\n"+tt.want)
			}
			if got := string(s.Line); got != tt.want {
				t.Errorf("Normalize(%q)\n got line %q\nwant line %q", tt.in, got, tt.want)
			}
			wantMeas, wantRun, wantHost := or(tt.meas, "m"), or(tt.run, "r1"), or(tt.host, "node1")
			wantTime, _ := strconv.ParseInt(tt.want[strings.LastIndexByte(tt.want, ' ')+1:], 10, 64)
			if string(s.Measurement) != wantMeas || string(s.Run) != wantRun || string(s.Host) != wantHost || s.Time != wantTime {
				t.Errorf("Normalize(%q): got measurement %q run %q host %q time %d, want %q %q %q %d",
					tt.in, s.Measurement, s.Run, s.Host, s.Time, wantMeas, wantRun, wantHost, wantTime)
			}

			// The canonical line is a fixed point.
			out2, s2, err := n.Normalize(nil, s.Line, Nanosecond, testNow.Add(time.Hour))
			if err != nil {
				t.Fatalf("Normalize(canonical %q): %v", s.Line, err)
			}
			if string(out2) != tt.want || string(s2.Run) != wantRun || s2.Time != wantTime {
				t.Errorf("Normalize(canonical %q) = %q, run %q, time %d; want it unchanged", tt.want, out2, s2.Run, s2.Time)
			}
		})
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func TestNormalizeNoDefaults(t *testing.T) {
	n := newTestNormalizer(t, DefaultTags{})
	_, s, err := n.Normalize(nil, []byte("m,b=1,a=2 f=1 1"), Nanosecond, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(s.Line), "m,a=2,b=1 f=1 1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if s.Run != nil || s.Host != nil {
		t.Errorf("got run %q host %q, want both empty", s.Run, s.Host)
	}
}

func TestNormalizeEscapedDefaults(t *testing.T) {
	n := newTestNormalizer(t, DefaultTags{Host: "my host", Run: "a=b,c"})
	_, s, err := n.Normalize(nil, []byte("m f=1 1"), Nanosecond, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(s.Line), `m,host=my\ host,run=a\=b\,c f=1 1`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if string(s.Run) != "a=b,c" || string(s.Host) != "my host" {
		t.Errorf("got run %q host %q, want %q %q", s.Run, s.Host, "a=b,c", "my host")
	}
}

func TestNewNormalizerRejectsBadDefaults(t *testing.T) {
	for _, tags := range []DefaultTags{{Host: "a\nb"}, {Run: `x\`}, {Job: "\xff"}} {
		if _, err := NewNormalizer(tags); err == nil {
			t.Errorf("NewNormalizer(%+v): got no error, want one", tags)
		}
	}
}

func TestNormalizeManyTags(t *testing.T) {
	// Enough tags to take the general sort, given in reverse order.
	var b strings.Builder
	b.WriteString("m")
	for i := 40; i > 0; i-- {
		fmt.Fprintf(&b, ",k%02d=v", i)
	}
	b.WriteString(" f=1 1")
	n := newTestNormalizer(t, DefaultTags{})
	_, s, err := n.Normalize(nil, []byte(b.String()), Nanosecond, testNow)
	if err != nil {
		t.Fatal(err)
	}
	keys := strings.Split(strings.Fields(string(s.Line))[0], ",")[1:]
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Fatalf("tags not sorted: %q before %q", keys[i-1], keys[i])
		}
	}
	if len(keys) != 40 {
		t.Errorf("got %d tags, want 40", len(keys))
	}
	if _, _, err := n.Normalize(nil, []byte(strings.Replace(b.String(), "k02", "k03", 1)), Nanosecond, testNow); !errors.Is(err, ErrDuplicateTags) {
		t.Errorf("duplicate among many tags: got %v, want %v", err, ErrDuplicateTags)
	}
}

func TestNormalizeErrors(t *testing.T) {
	tests := []struct {
		in   string
		prec Precision
		want error
	}{
		{"", 0, ErrInvalidMeasurement},
		{"   ", 0, ErrInvalidMeasurement},
		{",t=1 f=1", 0, ErrInvalidMeasurement},
		{"#c f=1", 0, ErrInvalidMeasurement},
		{"m\x01 f=1", 0, ErrInvalidMeasurement},
		{"m\tf=1", 0, ErrInvalidMeasurement},
		{"\tm f=1", 0, ErrInvalidMeasurement},
		{"m\xff f=1", 0, ErrInvalidUTF8},
		{"m f=\"\xc3\x28\"", 0, ErrInvalidUTF8},
		{"m", 0, ErrMissingFields},
		{"m ", 0, ErrMissingFields},
		{"m,t=1", 0, ErrMissingFields},
		{"m,t=1 ", 0, ErrMissingFields},
		{`m\ f=1`, 0, ErrMissingFields},
		{"m,=1 f=1", 0, ErrInvalidTagKey},
		{"m, f=1", 0, ErrInvalidTagKey},
		{"m,t f=1", 0, ErrInvalidTagKey},
		{"m,t,u=1 f=1", 0, ErrInvalidTagKey},
		{"m,t", 0, ErrInvalidTagKey},
		{"m,t\x00=1 f=1", 0, ErrInvalidTagKey},
		{"m,t= f=1", 0, ErrInvalidTagValue},
		{"m,t=,u=1 f=1", 0, ErrInvalidTagValue},
		{"m,t=a=b f=1", 0, ErrInvalidTagValue},
		{"m,t=a\nb f=1", 0, ErrInvalidTagValue},
		{"m,t=a,t=b f=1", 0, ErrDuplicateTags},
		{"m,host=a,z=1,host=b f=1", 0, ErrDuplicateTags},
		{"m f", 0, ErrInvalidField},
		{"m f=", 0, ErrInvalidField},
		{"m f= 1", 0, ErrInvalidField},
		{"m =1", 0, ErrInvalidField},
		{"m f=1,", 0, ErrInvalidField},
		{"m f=1,,g=2", 0, ErrInvalidField},
		{"m f=1,g", 0, ErrInvalidField},
		{"m f=abc", 0, ErrInvalidField},
		{"m f=+1", 0, ErrInvalidField},
		{"m f=1\nm f=2", 0, ErrInvalidField},
		{"m f=1\r\r", 0, ErrInvalidField},
		{"m\\\x01 f=1", 0, ErrInvalidMeasurement},
		{"m,t\\\x01=1 f=1", 0, ErrInvalidTagKey},
		{`m f="a"x`, 0, ErrInvalidField},
		{`m f="a""b"`, 0, ErrInvalidField},
		{"m f\x7f=1", 0, ErrInvalidField},
		{"m f=1.2.3", 0, ErrInvalidNumber},
		{"m f=-", 0, ErrInvalidNumber},
		{"m f=.", 0, ErrInvalidNumber},
		{"m f=0x10", 0, ErrInvalidNumber},
		{"m f=0x1p4", 0, ErrInvalidNumber},
		{"m f=1_000", 0, ErrInvalidNumber},
		{"m f=-inf", 0, ErrInvalidNumber},
		{"m f=-Infinity", 0, ErrInvalidNumber},
		{"m f=1e400", 0, ErrInvalidNumber},
		{"m f=12a", 0, ErrInvalidNumber},
		{"m f=1\t", 0, ErrInvalidNumber},
		{"m f=1.5i", 0, ErrInvalidNumber},
		{"m f=1e3i", 0, ErrInvalidNumber},
		{"m f=i", 0, ErrInvalidField},
		{"m f=-i", 0, ErrInvalidNumber},
		{"m f=9223372036854775808i", 0, ErrInvalidNumber},
		{"m f=-9223372036854775809i", 0, ErrInvalidNumber},
		{"m f=-1u", 0, ErrInvalidNumber},
		{"m f=18446744073709551616u", 0, ErrInvalidNumber},
		{"m f=1" + strings.Repeat("0", 309), 0, ErrInvalidNumber},
		{"m f=1" + strings.Repeat("0", 309) + ".5", 0, ErrInvalidNumber},
		{"m f=1.5e", 0, ErrInvalidNumber},
		{"m f=1.5e+", 0, ErrInvalidNumber},
		{"m f=1.5.e3", 0, ErrInvalidNumber},
		{"m f=1e3.5", 0, ErrInvalidNumber},
		{"m f=1-2", 0, ErrInvalidNumber},
		{"m f=--1", 0, ErrInvalidNumber},
		{"m f=-.", 0, ErrInvalidNumber},
		{"m f=.e1", 0, ErrInvalidNumber},
		{"m f=1 -00000000000000000000000x", 0, ErrInvalidTimestamp},
		{"m f=1.5u", 0, ErrInvalidNumber},
		{"m f=tru", 0, ErrInvalidBoolean},
		{"m f=tRUE", 0, ErrInvalidBoolean},
		{"m f=yes", 0, ErrInvalidField},
		{"m f=t1", 0, ErrInvalidBoolean},
		{`m f="abc`, 0, ErrUnterminatedString},
		{`m f="abc\"`, 0, ErrUnterminatedString},
		{`m f="`, 0, ErrUnterminatedString},
		{`m f="a\\\" 1`, 0, ErrUnterminatedString},
		{"m f=1 abc", 0, ErrInvalidTimestamp},
		{"m f=1 1.5", 0, ErrInvalidTimestamp},
		{"m f=1 123 456", 0, ErrInvalidTimestamp},
		{"m f=1 --1", 0, ErrInvalidTimestamp},
		{"m f=1 -", 0, ErrInvalidTimestamp},
		{"m f=1 1e9", 0, ErrInvalidTimestamp},
		{"m f=1 99999999999999999999", 0, ErrInvalidTimestamp},
		{"m f=1 9223372036854775807", 0, ErrInvalidTimestamp},
		{"m f=1 -9223372036854775808", 0, ErrInvalidTimestamp},
		{"m f=1 -9223372036854775807", 0, ErrInvalidTimestamp},
		{"m f=1 10000000000", Second, ErrInvalidTimestamp},
		{"m f=1 -10000000000", Second, ErrInvalidTimestamp},
		{"m f=1 9223372036854776", Microsecond, ErrInvalidTimestamp},
		{"m f=1 1\t", 0, ErrInvalidTimestamp},
	}
	n := newTestNormalizer(t, testDefaults)
	for _, tt := range tests {
		dst := []byte("keep")
		out, s, err := n.Normalize(dst, []byte(tt.in), tt.prec, testNow)
		if !errors.Is(err, tt.want) {
			t.Errorf("Normalize(%q): got error %v (line %q), want %v", tt.in, err, s.Line, tt.want)
			continue
		}
		var se *SyntaxError
		if !errors.As(err, &se) || se.Column < 1 || se.Column > len(tt.in)+1 {
			t.Errorf("Normalize(%q): got %#v, want a *SyntaxError with a column in the line", tt.in, err)
		}
		if string(out) != "keep" || s.Line != nil {
			t.Errorf("Normalize(%q) failed but returned dst %q and line %q, want dst unchanged", tt.in, out, s.Line)
		}
	}
}

func TestNormalizeErrorText(t *testing.T) {
	n := newTestNormalizer(t, testDefaults)
	tests := []struct{ in, want string }{
		{"m f=1.2.3", `invalid number at column 5: field "f": "1.2.3": invalid float syntax`},
		{"m,t=1", "missing fields at column 6"},
		{"m f=1 x", `invalid timestamp at column 7: "x" is not an integer`},
		{`m f="x`, `unterminated string at column 5: value of field "f"`},
		{"m,a=1,a=2 f=1", `duplicate tags at column 2: tag "a"`},
	}
	for _, tt := range tests {
		_, _, err := n.Normalize(nil, []byte(tt.in), Nanosecond, testNow)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Normalize(%q): got error %v, want %q", tt.in, err, tt.want)
		}
	}
}

func TestNormalizeLineTooLong(t *testing.T) {
	n := newTestNormalizer(t, testDefaults, WithMaxLineBytes(20))
	ok := "m f=1 1234567890123" // 19 bytes
	if _, _, err := n.Normalize(nil, []byte(ok), Nanosecond, testNow); err != nil {
		t.Errorf("Normalize(%d bytes) with limit 20: %v", len(ok), err)
	}
	if _, _, err := n.Normalize(nil, []byte(ok+"45"), Nanosecond, testNow); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("Normalize(%d bytes) with limit 20: got %v, want %v", len(ok)+2, err, ErrLineTooLong)
	}
	n = newTestNormalizer(t, testDefaults)
	huge := "m f=\"" + strings.Repeat("x", DefaultMaxLineBytes) + "\""
	if _, _, err := n.Normalize(nil, []byte(huge), Nanosecond, testNow); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("Normalize(%d bytes): got %v, want %v", len(huge), err, ErrLineTooLong)
	}
}

func TestNormalizeInvalidPrecision(t *testing.T) {
	n := newTestNormalizer(t, testDefaults)
	if _, _, err := n.Normalize(nil, []byte("m f=1"), Precision(42), testNow); err == nil {
		t.Error("Normalize with Precision(42): got no error, want one")
	}
}

func TestNormalizeDoesNotKeepAliases(t *testing.T) {
	// Run, Host and Measurement point into dst or the Normalizer, never
	// into the input line, which the caller may reuse at once.
	n := newTestNormalizer(t, testDefaults)
	in := []byte(`me\ as,run=r\ x,host=h f=1 1`)
	_, s, err := n.Normalize(nil, in, Nanosecond, testNow)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 'X'
	}
	if string(s.Measurement) != "me as" || string(s.Run) != "r x" || string(s.Host) != "h" {
		t.Errorf("after overwriting the input: got %q %q %q, want %q %q %q", s.Measurement, s.Run, s.Host, "me as", "r x", "h")
	}
}

func TestParsePrecision(t *testing.T) {
	tests := []struct {
		in   string
		want Precision
	}{
		{"", Nanosecond}, {"n", Nanosecond}, {"ns", Nanosecond},
		{"u", Microsecond}, {"us", Microsecond}, {"µs", Microsecond},
		{"ms", Millisecond}, {"s", Second}, {"m", Minute}, {"h", Hour},
	}
	for _, tt := range tests {
		got, err := ParsePrecision(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParsePrecision(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"x", "NS", "sec", "mu", " s"} {
		if _, err := ParsePrecision(in); err == nil {
			t.Errorf("ParsePrecision(%q): got no error, want one", in)
		}
	}
}

func TestLineError(t *testing.T) {
	err := &SyntaxError{Err: ErrInvalidNumber, Column: 5, Detail: "x"}
	le := NewLineError(3, []byte("m f=abc"), err)
	if got, want := le.Error(), "line 3: unable to parse 'm f=abc': invalid number at column 5: x"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(le, ErrInvalidNumber) {
		t.Errorf("errors.Is(%v, ErrInvalidNumber) = false, want true", le)
	}
	long := []byte(strings.Repeat("a", MaxErrorText-1) + "é" + "tail")
	le = NewLineError(1, long, err)
	if want := strings.Repeat("a", MaxErrorText-1) + "..."; le.Text != want {
		t.Errorf("got text %q, want %q (cut before the 2-byte rune)", le.Text, want)
	}
}

// TestDefaultRank compares defaultRank with string comparisons against
// every default key.
func TestDefaultRank(t *testing.T) {
	keys := []string{"a", "h", "ho", "hos", "host", "hosts", "hosu", "hosa", "hz", "i", "j", "jo", "job",
		"job_", "jobs", "joa", "k", "r", "ra", "rank", "ru", "run", "runa", "rz", "s", "st", "ste", "step",
		"step_time", "stea", "steq", "t", "z", "\xff", "!", "Host"}
	for _, k := range keys {
		want, wantDef := uint8(0), false
		for _, d := range defaultKeys {
			if d < k {
				want++
			}
			wantDef = wantDef || d == k
		}
		if got, def := defaultRank([]byte(k)); got != want || def != wantDef {
			t.Errorf("defaultRank(%q) = %d, %v; want %d, %v", k, got, def, want, wantDef)
		}
	}
}
