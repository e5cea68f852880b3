package lineproto

import (
	"strings"
	"testing"
)

// TestSampleFields: every value spelling gets the type InfluxDB gives it (a
// plain 1 is a float, 1i an integer, 1u unsigned), keys come unescaped from
// AppendKey, and duplicate keys are kept in order.
func TestSampleFields(t *testing.T) {
	tests := []struct {
		in   string
		want string // key:type, space-separated
	}{
		{"m a=1.5,b=1,c=-.5,d=1e3,e=1.", "a:float b:float c:float d:float e:float"},
		{"m a=1i,b=-3i,c=0000000000000000000000012i", "a:integer b:integer c:integer"},
		{"m a=1u,b=18446744073709551615u", "a:unsigned b:unsigned"},
		{`m a="1",b="",c="x y,z=\"q\""`, "a:string b:string c:string"},
		{"m a=t,b=FALSE,c=True", "a:boolean b:boolean c:boolean"},
		{"m a=1,a=1i,a=\"x\"", "a:float a:integer a:string"},
		{`m f\ x=1i,g\,h=t,i\=j="s",k\y=2`, `f x:integer g,h:boolean i=j:string k\y:float`},
		{"m,host=h value=2.5 1700000000000000000", "value:float"},
	}
	n := newTestNormalizer(t, testDefaults)
	for _, tt := range tests {
		_, s, err := n.Normalize(nil, []byte(tt.in), Nanosecond, testNow)
		if err != nil {
			t.Fatalf("Normalize(%q): %v", tt.in, err)
		}
		var got []string
		for _, f := range s.Fields {
			got = append(got, string(f.AppendKey(nil))+":"+f.Type.String())
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("Normalize(%q): fields %q, want %q", tt.in, g, tt.want)
		}
	}
	// A refused line leaves no fields in its Sample.
	if _, s, err := n.Normalize(nil, []byte("m a=1,b=x"), Nanosecond, testNow); err == nil || s.Fields != nil {
		t.Errorf("bad line: error %v, fields %v", err, s.Fields)
	}
}
