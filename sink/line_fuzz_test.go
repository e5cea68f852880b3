package sink

import (
	"math"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
)

// FuzzParseLine holds the sink's line scanner to lineprotocol/v2 as an
// oracle: whatever the scanner accepts, the oracle must accept with the same
// measurement, tags, fields and timestamp. (The reverse does not hold: the
// scanner is stricter, e.g. it wants one line with single spaces.)
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"cpu,host=a,cpu=cpu0 usage_user=1.5,usage_system=0.3 1700000000000000000",
		"m a=1,b=-1.5,c=.5,d=1.,e=1e10,f=1E-3,g=-0,h=1e+5 1",
		"m a=3i,b=-3i,u=18446744073709551615u 1",
		"m a=t,b=T,c=true,d=True,e=TRUE,f=f,g=F,h=false,i=False,j=FALSE 1",
		`m a="",b="x",c="say \"hi\"",d="back\\slash\\" 1`,
		"m s=\"two\nrows\" 1",
		`my\ meas\,x,t\ k\=\,=v\=1\,2\ x f\=x=1 1`,
		`m\x,t=a\b f\y=1 1`,
		"m f=1 -9223372036854775808",
		"m f=1 9223372036854775807",
		"m f=0x1p4 1",
		"m f=1e400 1",
		"m f=nan 1",
		`m f="abc\"`,
		"m f=1 123 456",
		"température,pièce=salon valeur=21.5 1",
		"m f=1",
		`a\\ b,t=x\\,y f=1 1`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var p lineParser
		if err := p.parse(line); err != nil {
			return
		}
		d := lineprotocol.NewDecoderWithBytes(line)
		if !d.Next() {
			t.Fatalf("%q: accepted, oracle sees no line", line)
		}
		m, err := d.Measurement()
		if err != nil {
			t.Fatalf("%q: accepted, oracle: %v", line, err)
		}
		if string(m) != string(p.measurement) {
			t.Fatalf("%q: measurement %q, oracle %q", line, p.measurement, m)
		}
		for i := 0; ; i++ {
			k, v, err := d.NextTag()
			if err != nil {
				t.Fatalf("%q: accepted, oracle tag: %v", line, err)
			}
			if k == nil {
				if i != len(p.tags) {
					t.Fatalf("%q: %d tags, oracle %d", line, len(p.tags), i)
				}
				break
			}
			if i >= len(p.tags) || string(p.tags[i].key) != string(k) || string(p.tags[i].val) != string(v) {
				t.Fatalf("%q: tag %d %q=%q differs from ours %v", line, i, k, v, p.tags)
			}
		}
		for i := 0; ; i++ {
			k, v, err := d.NextField()
			if err != nil {
				t.Fatalf("%q: accepted, oracle field: %v", line, err)
			}
			if k == nil {
				if i != len(p.fields) {
					t.Fatalf("%q: %d fields, oracle %d", line, len(p.fields), i)
				}
				break
			}
			if i >= len(p.fields) || string(p.fields[i].key) != string(k) {
				t.Fatalf("%q: field %d %q differs", line, i, k)
			}
			pf := p.fields[i]
			var ours string
			switch pf.kind {
			case kindFloat:
				ours = strconv.FormatFloat(math.Float64frombits(pf.num), 'g', -1, 64)
			case kindInt:
				ours = strconv.FormatInt(int64(pf.num), 10)
			case kindUint:
				ours = strconv.FormatUint(pf.num, 10)
			case kindBool:
				ours = strconv.FormatBool(pf.num != 0)
			case kindString:
				ours = string(pf.str)
			}
			var theirs string
			switch v.Kind() {
			case lineprotocol.Float:
				theirs = strconv.FormatFloat(v.FloatV(), 'g', -1, 64)
			case lineprotocol.Int:
				theirs = strconv.FormatInt(v.IntV(), 10)
			case lineprotocol.Uint:
				theirs = strconv.FormatUint(v.UintV(), 10)
			case lineprotocol.Bool:
				theirs = strconv.FormatBool(v.BoolV())
			case lineprotocol.String:
				theirs = v.StringV()
			}
			if ours != theirs || pf.kind.String() != map[lineprotocol.ValueKind]string{lineprotocol.Float: "float", lineprotocol.Int: "integer", lineprotocol.Uint: "unsigned", lineprotocol.Bool: "boolean", lineprotocol.String: "string"}[v.Kind()] {
				t.Fatalf("%q: field %q = %s %s, oracle %v %s", line, k, pf.kind, ours, v.Kind(), theirs)
			}
		}
		if p.hasTS {
			ts, err := d.Time(lineprotocol.Nanosecond, time.Unix(0, 0))
			if err != nil {
				t.Fatalf("%q: accepted, oracle time: %v", line, err)
			}
			if ts.UnixNano() != p.ts {
				t.Fatalf("%q: time %d, oracle %d", line, p.ts, ts.UnixNano())
			}
		}
		if d.Next() {
			t.Fatalf("%q: one line for us, several for the oracle", line)
		}
	})
}

// FuzzSeriesKey holds the series-key shortcut to the full decoder: a line
// the decoder accepts has its tags end exactly at seriesEnd, and any line
// made of that series key and another line's rest decodes the same way
// (same fields, timestamp and error) whether decoded in full or only from
// the key on.
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
		var p lineParser
		if err := p.parse(a); err != nil {
			return
		}
		k := seriesEnd(a)
		if k != p.tagsEnd {
			t.Fatalf("%q: tags end at %d, seriesEnd says %d", a, p.tagsEnd, k)
		}
		j := seriesEnd(b)
		if j < 0 {
			return
		}
		line := append(append([]byte{}, a[:k]...), b[j:]...)
		var full, fast lineParser
		errFull := full.parse(line)
		fast.begin(line)
		var errFast error
		if !utf8.Valid(line[k:]) {
			errFast = errUTF8
		} else {
			errFast = fast.parseFields(line, k)
		}
		if errFull != errFast {
			t.Fatalf("%q: full decode %v, from the series key %v", line, errFull, errFast)
		}
		if errFull != nil {
			return
		}
		if full.tagsEnd != k || full.ts != fast.ts || full.hasTS != fast.hasTS || len(full.fields) != len(fast.fields) {
			t.Fatalf("%q: full decode and decode from the series key differ", line)
		}
		for i := range full.fields {
			x, y := full.fields[i], fast.fields[i]
			if string(x.key) != string(y.key) || x.kind != y.kind || x.num != y.num || string(x.str) != string(y.str) {
				t.Fatalf("%q: field %d: full %+v, from the series key %+v", line, i, x, y)
			}
		}
	})
}
