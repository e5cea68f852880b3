package lineproto

import (
	"math"
	"strings"
	"testing"
)

func TestAppendLine(t *testing.T) {
	got, err := AppendLine([]byte("x\n"), "my meas,x", map[string]string{"run": "r 1", "host": "h=1,2", "empty": ""},
		map[string]any{"f": 1.5, "i": int64(-3), "u": uint64(4), "b": true, "s": "say \"hi\"\\ \n ok", "whole": 2.0, "big": 1e21},
		1700000000123456789)
	if err != nil {
		t.Fatal(err)
	}
	want := "x\n" + `my\ meas\,x,host=h\=1\,2,run=r\ 1 b=true,big=1e+21,f=1.5,i=-3i,s="say \"hi\"\\ ` + "\n" + ` ok",u=4u,whole=2 1700000000123456789`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	for _, c := range []struct {
		m      string
		tags   map[string]string
		fields map[string]any
		err    string
	}{
		{"", nil, map[string]any{"f": 1.0}, "invalid measurement name"},
		{`m\`, nil, map[string]any{"f": 1.0}, "invalid measurement name"},
		{"m", map[string]string{"t": "a\nb"}, map[string]any{"f": 1.0}, `invalid tag "t"="a\nb"`},
		{"m", map[string]string{"": "a"}, map[string]any{"f": 1.0}, `invalid tag ""="a"`},
		{"m", nil, map[string]any{"f\x00": 1.0}, `invalid field key "f\x00"`},
		{"m", nil, map[string]any{"f": math.NaN()}, `field "f" is NaN, which line protocol cannot carry`},
		{"m", nil, map[string]any{"f": math.Inf(-1)}, `field "f" is -Inf, which line protocol cannot carry`},
		{"m", nil, map[string]any{"f": "\xff"}, `field "f" is not UTF-8`},
		{"m", nil, map[string]any{"f": 1}, `field "f" has unsupported type int`},
		{"m", map[string]string{"t": "a"}, nil, "no field values"},
	} {
		out, err := AppendLine([]byte("keep"), c.m, c.tags, c.fields, 1)
		if err == nil || err.Error() != c.err || string(out) != "keep" {
			t.Errorf("AppendLine(%q, %v, %v) = %q, %v; want dst unchanged and %q", c.m, c.tags, c.fields, out, err, c.err)
		}
	}
}

func TestEncoder(t *testing.T) {
	var e Encoder
	e.SetBuffer([]byte("old\n"))
	e.StartLine("cpu load")
	e.AddTag("cpu", "cpu0")
	e.AddTag("host", "a b")
	e.AddFloat("idle", 99.5)
	e.AddInt("n", -3)
	e.EndLine(17)
	e.StartLine("m")
	e.AddFloat("x", 1e21)
	e.EndLine(18)
	want := "old\n" + `cpu\ load,cpu=cpu0,host=a\ b idle=99.5,n=-3i 17` + "\nm x=1e+21 18\n"
	if string(e.Bytes()) != want || e.Err() != nil {
		t.Fatalf("got %q, %v; want %q", e.Bytes(), e.Err(), want)
	}

	// Each bad line is dropped whole; the first error is kept.
	for _, c := range []struct {
		line func(*Encoder)
		err  string
	}{
		{func(e *Encoder) { e.StartLine("m,x\\"); e.AddInt("f", 1) }, `invalid measurement "m,x\\"`},
		{func(e *Encoder) { e.StartLine("m"); e.AddTag("b", "1"); e.AddTag("a", "1"); e.AddInt("f", 1) }, `tag key "a" out of order (previous key "b")`},
		{func(e *Encoder) { e.StartLine("m"); e.AddTag("a", "1"); e.AddTag("a", "2"); e.AddInt("f", 1) }, `tag key "a" out of order`},
		{func(e *Encoder) { e.StartLine("m"); e.AddTag("a", ""); e.AddInt("f", 1) }, `invalid tag "a"=""`},
		{func(e *Encoder) { e.StartLine("m"); e.AddInt("f", 1); e.AddTag("a", "1") }, `tag "a" outside the tags of a line`},
		{func(e *Encoder) { e.StartLine("m"); e.AddInt("f", 1); e.AddFloat("g", math.NaN()) }, `field "g" is NaN`},
		{func(e *Encoder) { e.StartLine("m"); e.AddInt("f\n", 1) }, `invalid field key "f\n"`},
		{func(e *Encoder) { e.StartLine("m"); e.AddTag("a", "1") }, `line of "m,a=1" has no fields`},
	} {
		e.SetBuffer([]byte("keep\n"))
		c.line(&e)
		e.EndLine(1)
		e.StartLine("ok")
		e.AddInt("f", 1)
		e.EndLine(2)
		if got := string(e.Bytes()); got != "keep\nok f=1i 2\n" || e.Err() == nil || !strings.Contains(e.Err().Error(), c.err) {
			t.Errorf("got %q, %v; want the bad line dropped and %q", got, e.Err(), c.err)
		}
	}
	e.SetBuffer(nil)
	e.AddInt("f", 1)
	if e.Err() == nil || len(e.Bytes()) != 0 {
		t.Errorf("a field outside a line: %q, %v", e.Bytes(), e.Err())
	}

	// What the Encoder writes decodes to what was put in.
	e.SetBuffer(nil)
	e.StartLine(`a\b,c d=e`)
	e.AddTag("k=1", "v,2 \\x")
	e.AddInt("i", math.MinInt64)
	e.AddFloat("f=", -0.25)
	e.EndLine(-5)
	var d Decoder
	out := e.Bytes()
	if err := d.Decode(out[:len(out)-1]); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	got := decodeOf(&d)
	if w := (decoded{`a\b,c d=e`, []string{`k=1=v,2 \x`}, []string{"i=integer:-9223372036854775808", "f==float:-0.25"}, "-5"}); !equalDecoded(got, w) {
		t.Errorf("%q decodes as %+v, want %+v", out, got, w)
	}
}

func equalDecoded(a, b decoded) bool {
	return a.m == b.m && strings.Join(a.tags, "\x00") == strings.Join(b.tags, "\x00") &&
		strings.Join(a.fields, "\x00") == strings.Join(b.fields, "\x00") && a.ts == b.ts
}

func TestEncoderAllocs(t *testing.T) {
	var e Encoder
	buf := make([]byte, 0, 4096)
	n := testing.AllocsPerRun(100, func() {
		e.SetBuffer(buf[:0])
		e.StartLine("cpu")
		e.AddTag("cpu", "cpu0")
		e.AddFloat("usage_idle", 97.25)
		e.AddInt("n", 3)
		e.EndLine(1700000000000000000)
	})
	if n != 0 {
		t.Errorf("a line costs %.0f allocations", n)
	}
}
