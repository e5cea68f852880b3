package lineproto

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The fuzz targets hold Normalize to the Decoder, which reads lines in
// the strict canonical form: a line the Decoder reads, Normalize must
// accept with the same meaning unless it is stricter by design (see
// stricterByDesign), and what Normalize writes the Decoder must read as
// the input's meaning plus the default tags. (FuzzDecode holds the
// Decoder to Normalize the other way round.)

// entry is one line as the Decoder reads it.
type entry struct {
	meas   string
	tags   map[string]string
	fields []string // key=value, values as fmt prints them
	types  []string // key:type
	time   int64
}

// decodeEntry decodes line, giving a line without a timestamp the time
// now.
func decodeEntry(line []byte, now time.Time) (entry, error) {
	var d Decoder
	if err := d.Decode(line); err != nil {
		return entry{}, err
	}
	e := entry{meas: string(d.Measurement), tags: map[string]string{}, time: now.UnixNano()}
	for _, t := range d.Tags {
		e.tags[string(t.Key)] = string(t.Value)
	}
	for i := range d.Fields {
		f := &d.Fields[i]
		e.fields = append(e.fields, fmt.Sprintf("%s=%v", f.Key, f.Interface()))
		e.types = append(e.types, string(f.Key)+":"+f.Type.String())
	}
	if d.HasTime {
		e.time = d.Time
	}
	return e, nil
}

// stricterByDesign reports whether err, for a line the Decoder reads, is
// one of the documented cases where Normalize refuses what a reader takes.
func stricterByDesign(err error, e entry) bool {
	var se *SyntaxError
	if !errors.As(err, &se) {
		return false
	}
	switch {
	case errors.Is(err, ErrDuplicateTags), errors.Is(err, ErrLineTooLong):
		return true
	case errors.Is(err, ErrInvalidTimestamp):
		return e.time < minNanoTime || e.time > maxNanoTime
	}
	return false
}

// checkSame fails unless got (the Decoder's reading of our output) says
// what in (its reading of our input) says, plus the default tags in
// lacked.
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
		t.Fatalf("%s: Sample fields %q, the Decoder reads %q", what, types, in.types)
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
			if e, derr := decodeEntry(data, testNow); derr == nil && !stricterByDesign(err, e) {
				t.Fatalf("Normalize(%q): %v; the Decoder reads it as %+v", data, err, e)
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

		// The Decoder reads the output as meaning what the input meant;
		// an input not in the strict form is held to the Sample alone.
		got, err := decodeEntry(s.Line, time.Time{})
		if err != nil {
			t.Fatalf("Normalize(%q) = %q, which the Decoder refuses: %v", data, s.Line, err)
		}
		in, err := decodeEntry(data, testNow)
		if err != nil {
			in = got
		}
		checkSame(t, string(data), got, in, s)
	})
}

func FuzzLines(f *testing.F) {
	f.Add([]byte(strings.Join(fuzzSeeds, "\n")))
	f.Add([]byte("a f=1\r\nb f=2\n\n# c\n  \nd s=\"x\ny\" 5\ne f=3"))
	f.Add([]byte("a s=\"x\\\"\ny\"\nb f=1"))
	f.Add([]byte("a s=\"x\nb s=\"y\"\nc f=2"))
	f.Fuzz(func(t *testing.T, body []byte) {
		n := newTestNormalizer(t, testDefaults)
		var outs [][]byte
		last := 0
		err := Lines(body, func(no int, line []byte) error {
			if no <= last {
				t.Fatalf("Lines(%q): line number %d after %d", body, no, last)
			}
			last = no
			if blankOrComment(line) {
				t.Fatalf("Lines(%q) hands over %q", body, line)
			}
			_, s, err := n.Normalize(nil, line, Nanosecond, testNow)
			if err != nil {
				return nil
			}
			in, err := decodeEntry(line, testNow)
			got, gerr := decodeEntry(s.Line, time.Time{})
			if gerr != nil {
				t.Fatalf("Normalize(%q) = %q, which the Decoder refuses: %v", line, s.Line, gerr)
			}
			if err != nil {
				in = got
			}
			checkSame(t, string(line), got, in, s)
			outs = append(outs, bytes.Clone(s.Line))
			return nil
		})
		if err != nil {
			t.Fatalf("Lines: %v", err)
		}
		// The canonical lines, newlines in strings and all, make a body
		// that Lines splits back into them.
		joined := bytes.Join(outs, []byte("\n"))
		var back [][]byte
		if err := Lines(joined, func(_ int, line []byte) error {
			back = append(back, line)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(back) != len(outs) {
			t.Fatalf("body %q: %d canonical lines, which Lines splits into %d", body, len(outs), len(back))
		}
		for i := range back {
			if !bytes.Equal(back[i], outs[i]) {
				t.Fatalf("body %q: canonical line %q comes back from Lines as %q", body, outs[i], back[i])
			}
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
			e, err := decodeEntry(s.Line, time.Time{})
			if err != nil {
				t.Fatalf("AppendStatsD(%q) gives %q, which the Decoder refuses: %v", data, s.Line, err)
			}
			if mt := e.tags["metric_type"]; mt == "" {
				t.Fatalf("AppendStatsD(%q) gives %q without metric_type", data, line)
			}
			if v, ok := valueField(e.fields); !ok || (e.tags["metric_type"] != "set" && math.IsNaN(v)) {
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
