package lineproto

import (
	"bytes"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
)

// The fuzz targets hold Normalize to lineprotocol/v2, the decoder of
// InfluxDB's own tools, as an oracle: what we accept it must accept with the
// same meaning, and what it accepts we must accept unless we are stricter by
// design (see stricterByDesign).

// entry is one line as the oracle decodes it.
type entry struct {
	meas   string
	tags   map[string]string
	fields []string // key=value, values in lineprotocol's encoding
	types  []string // key:type, types as FieldType names them
	time   int64
}

// oracleTypes names lineprotocol's value kinds as FieldType does.
var oracleTypes = map[lineprotocol.ValueKind]FieldType{
	lineprotocol.Float: Float, lineprotocol.Int: Integer, lineprotocol.Uint: Unsigned,
	lineprotocol.String: String, lineprotocol.Bool: Boolean,
}

// oracleDecode decodes body with lineprotocol/v2, giving lines without a
// timestamp the time now.
func oracleDecode(body []byte, now time.Time) ([]entry, error) {
	d := lineprotocol.NewDecoderWithBytes(body)
	var out []entry
	for d.Next() {
		m, err := d.Measurement()
		if err != nil {
			return out, err
		}
		e := entry{meas: string(m), tags: map[string]string{}}
		for {
			k, v, err := d.NextTag()
			if err != nil {
				return out, err
			}
			if k == nil {
				break
			}
			e.tags[string(k)] = string(v)
		}
		for {
			k, v, err := d.NextField()
			if err != nil {
				return out, err
			}
			if k == nil {
				break
			}
			e.fields = append(e.fields, string(k)+"="+v.String())
			e.types = append(e.types, string(k)+":"+oracleTypes[v.Kind()].String())
		}
		t, err := d.Time(lineprotocol.Nanosecond, now)
		if err != nil {
			return out, err
		}
		e.time = t.UnixNano()
		out = append(out, e)
	}
	return out, nil
}

// stricterByDesign reports whether err, for a line lineprotocol/v2 accepts,
// is one of the documented cases where we follow InfluxDB rather than it.
func stricterByDesign(err error, e entry) bool {
	var se *SyntaxError
	if !errors.As(err, &se) {
		return false
	}
	switch {
	case errors.Is(err, ErrDuplicateTags), errors.Is(err, ErrLineTooLong):
		return true
	case errors.Is(err, ErrInvalidNumber):
		return strings.Contains(se.Detail, "not a decimal float") // hex floats
	case errors.Is(err, ErrInvalidTimestamp):
		return e.time < minNanoTime || e.time > maxNanoTime
	}
	return false
}

// checkSame fails unless got (the oracle's reading of our output) says what
// in (its reading of our input) says, plus the default tags in lacked.
func checkSame(t *testing.T, what string, got, in entry, s Sample) {
	t.Helper()
	if got.meas != in.meas || got.meas != string(s.Measurement) {
		t.Fatalf("%s: measurement: output %q, input %q, Sample %q", what, got.meas, in.meas, s.Measurement)
	}
	if !slices.Equal(got.fields, in.fields) {
		t.Fatalf("%s: fields: output %q, input %q", what, got.fields, in.fields)
	}
	var types []string
	for _, f := range s.Fields {
		types = append(types, string(f.AppendKey(nil))+":"+f.Type.String())
	}
	if !slices.Equal(types, in.types) {
		t.Fatalf("%s: Sample fields %q, lineprotocol reads %q", what, types, in.types)
	}
	if got.time != in.time || got.time != s.Time {
		t.Fatalf("%s: time: output %d, input %d, Sample %d", what, got.time, in.time, s.Time)
	}
	want := maps.Clone(in.tags)
	for k, v := range map[string]string{"host": testDefaults.Host, "job": testDefaults.Job, "step": testDefaults.Step, "run": testDefaults.Run} {
		if _, ok := want[k]; !ok {
			want[k] = v
		}
	}
	if !maps.Equal(got.tags, want) {
		t.Fatalf("%s: tags: output %q, want %q", what, got.tags, want)
	}
	if got.tags["run"] != string(s.Run) || got.tags["host"] != string(s.Host) {
		t.Fatalf("%s: Sample run %q host %q, output tags %q", what, s.Run, s.Host, got.tags)
	}
}

var fuzzSeeds = []string{
	"cpu,host=a,cpu=cpu0 usage_user=1.5,usage_system=0.3 1700000000000000000",
	"m a=1,b=-1.5,c=.5,d=1.,e=1e10,f=1E-3,g=-0,h=1e+5 1",
	"m a=3i,b=-3i,u=18446744073709551615u 1",
	"m a=t,b=T,c=true,d=True,e=TRUE,f=f,g=F,h=false,i=False,j=FALSE",
	`m a="",b="x",c="say \"hi\"",d="back\\slash\\" 1`,
	"m s=\"two\nrows\" 1",
	`my\ meas\,x,t\ k\=\,=v\=1\,2\ x f\=x=1 1`,
	`m\x,t=a\b f\y=1 1`,
	"m,z=1,a=2,m=3 f=1 1",
	"m,step=9,run=mine,job=7,host=h2 f=1 1",
	`m,run=a\ b,host=x\,y f=1 1`,
	"  m,t=a   f=1   5  \r\n",
	"m f=1 -9223372036854775806",
	"m f=1 9223372036854775807",
	"m,t=a,t=b f=1",
	"m f=0x1p4",
	"m f=1e400",
	`m f="abc\"`,
	"m f=1 123 456",
	"température,pièce=salon valeur=21.5",
	"#c f=1",
	"m f=1\r\r",
	`a\\ b,t=x\\,y f=1 1`,
	`a\\\ b,t\\\==x\\\,y f\\\ =1 1`,
	"m\\\x01 f=1",
	`m,t=a\ f=1`,
	`m f=1,g="x\\\"",h="\\" 1`,
}

func FuzzNormalize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := newTestNormalizer(t, testDefaults)
		out, s, err := n.Normalize(nil, data, Nanosecond, testNow)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Normalize(%q): error %v is not a *SyntaxError", data, err)
			}
			if out != nil || s.Line != nil {
				t.Fatalf("Normalize(%q) failed but returned output %q", data, out)
			}
			// Lines never hands over a line with a newline outside a
			// string; with newlines the oracle would read several lines.
			if bytes.ContainsAny(data, "\r\n") {
				return
			}
			if es, oerr := oracleDecode(data, testNow); oerr == nil && len(es) == 1 && !stricterByDesign(err, es[0]) {
				t.Fatalf("Normalize(%q): %v; lineprotocol accepts it as %+v", data, err, es[0])
			}
			return
		}
		if !bytes.Equal(out, s.Line) {
			t.Fatalf("Normalize(%q): out %q != Sample.Line %q", data, out, s.Line)
		}
		if bytes.HasSuffix(s.Line, []byte(" ")) || bytes.HasSuffix(s.Line, []byte("\n")) || bytes.HasSuffix(s.Line, []byte("\r")) {
			t.Fatalf("Normalize(%q) = %q: trailing white space", data, s.Line)
		}

		// A fixed point, whatever the time.
		out2, s2, err := n.Normalize(nil, s.Line, Nanosecond, testNow.Add(time.Hour))
		if err != nil {
			t.Fatalf("Normalize(%q) = %q, which Normalize refuses: %v", data, s.Line, err)
		}
		if !bytes.Equal(out2, s.Line) || !bytes.Equal(s2.Measurement, s.Measurement) ||
			!bytes.Equal(s2.Run, s.Run) || !bytes.Equal(s2.Host, s.Host) || s2.Time != s.Time {
			t.Fatalf("Normalize(%q) = %q, but normalizing that gives %q (%+v)", data, s.Line, out2, s2)
		}

		// The oracle reads the output as one line meaning what the input meant.
		got, err := oracleDecode(s.Line, time.Time{})
		if err != nil || len(got) != 1 {
			t.Fatalf("Normalize(%q) = %q, which lineprotocol reads as %d lines, error %v", data, s.Line, len(got), err)
		}
		in, err := oracleDecode(data, testNow)
		if err != nil || len(in) != 1 {
			t.Fatalf("Normalize accepts %q, which lineprotocol reads as %d lines, error %v", data, len(in), err)
		}
		checkSame(t, string(data), got[0], in[0], s)
	})
}

func FuzzLines(f *testing.F) {
	f.Add([]byte(strings.Join(fuzzSeeds, "\n")))
	f.Add([]byte("a f=1\r\nb f=2\n\n# c\n  \nd s=\"x\ny\" 5\ne f=3"))
	f.Add([]byte("a s=\"x\\\"\ny\"\nb f=1"))
	f.Add([]byte("a s=\"x\nb s=\"y\"\nc f=2"))
	f.Fuzz(func(t *testing.T, body []byte) {
		n := newTestNormalizer(t, testDefaults)
		var mine []entry
		var samples []Sample
		var firstErr error
		last := 0
		err := Lines(body, func(no int, line []byte) error {
			if no <= last {
				t.Fatalf("Lines(%q): line number %d after %d", body, no, last)
			}
			last = no
			_, s, err := n.Normalize(nil, line, Nanosecond, testNow)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return nil
			}
			es, err := oracleDecode(s.Line, time.Time{})
			if err != nil || len(es) != 1 {
				t.Fatalf("Normalize(%q) = %q, which lineprotocol reads as %d lines, error %v", line, s.Line, len(es), err)
			}
			mine = append(mine, es[0])
			s.Measurement, s.Run, s.Host = bytes.Clone(s.Measurement), bytes.Clone(s.Run), bytes.Clone(s.Host)
			s.Fields = slices.Clone(s.Fields) // the keys point into body
			samples = append(samples, s)
			return nil
		})
		if err != nil {
			t.Fatalf("Lines: %v", err)
		}
		theirs, err := oracleDecode(body, testNow)
		if err != nil {
			return // a bad body: both refuse something, and may split it differently
		}
		if firstErr != nil {
			for _, e := range theirs {
				if stricterByDesign(firstErr, e) {
					return
				}
			}
			t.Fatalf("body %q: we refuse a line (%v), lineprotocol accepts all: %+v", body, firstErr, theirs)
		}
		if len(mine) != len(theirs) {
			t.Fatalf("body %q: we read %d lines, lineprotocol %d", body, len(mine), len(theirs))
		}
		for i := range mine {
			checkSame(t, string(body), mine[i], theirs[i], samples[i])
		}
	})
}

func FuzzStatsD(f *testing.F) {
	for _, s := range []string{
		"hits:1|c", "hits:3|c|@0.5", "temp:+3|g", "lat:320|ms|@0.1", "users:a\"b\\c|s",
		"lat:1:2:3|ms", "my metric,x=y:1|c", "hits:1|c|#env:prod,role:web,bare,a:1,a:2",
		"hits:1|c|#a:b|T1700000000", "hits:1|c|c:abc|x", "_e{5,4}:title|text", "hits:1|c|@0",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := AppendStatsD([]byte("x"), data)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || string(out) != "x" {
				t.Fatalf("AppendStatsD(%q): error %v, output %q", data, err, out)
			}
			return
		}
		out = out[1:]
		if len(out) == 0 || out[len(out)-1] != '\n' {
			t.Fatalf("AppendStatsD(%q) = %q: want lines ended by newlines", data, out)
		}
		n := newTestNormalizer(t, testDefaults)
		lines := 0
		err = Lines(out, func(_ int, line []byte) error {
			lines++
			_, s, err := n.Normalize(nil, line, Nanosecond, testNow)
			if err != nil {
				t.Fatalf("AppendStatsD(%q) gives %q, which Normalize refuses: %v", data, line, err)
			}
			es, err := oracleDecode(s.Line, time.Time{})
			if err != nil || len(es) != 1 {
				t.Fatalf("AppendStatsD(%q) gives %q, which lineprotocol reads as %d lines, error %v", data, s.Line, len(es), err)
			}
			if mt := es[0].tags["metric_type"]; mt == "" {
				t.Fatalf("AppendStatsD(%q) gives %q without metric_type", data, line)
			}
			if v, ok := valueField(es[0].fields); !ok || (es[0].tags["metric_type"] != "set" && math.IsNaN(v)) {
				t.Fatalf("AppendStatsD(%q) gives %q without a value field", data, line)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.Count(out, []byte("\n")); lines != want {
			t.Fatalf("AppendStatsD(%q) = %q: Lines sees %d lines, want %d", data, out, lines, want)
		}
	})
}

// valueField finds the value field; for numbers it returns the number,
// otherwise NaN.
func valueField(fields []string) (float64, bool) {
	for _, f := range fields {
		if v, ok := strings.CutPrefix(f, "value="); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return math.NaN(), true
			}
			return x, true
		}
	}
	return 0, false
}
