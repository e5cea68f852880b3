package lineproto

import (
	"errors"
	"testing"
)

func TestAppendStatsD(t *testing.T) {
	tests := []struct{ in, want string }{
		{"hits:1|c", "hits,metric_type=counter value=1\n"},
		{"hits:3|c|@0.5", "hits,metric_type=counter value=6\n"},
		{"hits:1|c|@0.1", "hits,metric_type=counter value=10\n"},
		{"hits:-2|c", "hits,metric_type=counter value=-2\n"},
		{"hits:1.5|c", "hits,metric_type=counter value=1.5\n"},
		{"hits:1e20|c", "hits,metric_type=counter value=1e+20\n"},
		{"temp:21.5|g", "temp,metric_type=gauge value=21.5\n"},
		{"temp:0|g", "temp,metric_type=gauge value=0\n"},
		{"temp:+3|g", "temp,metric_type=gauge value=3,delta=true\n"},
		{"temp:-3|g", "temp,metric_type=gauge value=-3,delta=true\n"},
		{"temp:5|g|@0.5", "temp,metric_type=gauge value=5\n"},
		{"lat:320|ms", "lat,metric_type=timing value=320\n"},
		{"lat:320|ms|@0.1", "lat,metric_type=timing value=320,sample_rate=0.1\n"},
		{"lat:3.25|h", "lat,metric_type=timing value=3.25\n"},
		{"lat:7|d", "lat,metric_type=timing value=7\n"},
		{"users:alice|s", "users,metric_type=set value=\"alice\"\n"},
		{`users:a"b\c|s`, `users,metric_type=set value="a\"b\\c"` + "\n"},
		{"users:42|s", "users,metric_type=set value=\"42\"\n"},
		{"lat:1:2:3|ms", "lat,metric_type=timing value=1\nlat,metric_type=timing value=2\nlat,metric_type=timing value=3\n"},
		{"a.b.c:1|c", "a.b.c,metric_type=counter value=1\n"},
		{"my metric,x=y:1|c", `my\ metric\,x=y,metric_type=counter value=1` + "\n"},
		{`a\,b:1|c`, `a\\,b,metric_type=counter value=1` + "\n"},
		{"hits:1|c|#env:prod,role:web", "hits,metric_type=counter,env=prod,role=web value=1\n"},
		{"hits:1|c|#bare", "hits,metric_type=counter,bare=true value=1\n"},
		{"hits:1|c|#url:http://x:80/a", "hits,metric_type=counter,url=http://x:80/a value=1\n"},
		{`hits:1|c|#a b:c=d,e\f:g`, `hits,metric_type=counter,a\ b=c\=d,e\f=g value=1` + "\n"},
		{"hits:1|c|#a:1,a:2,b:3", "hits,metric_type=counter,a=1,b=3 value=1\n"},
		{"hits:1|c|#metric_type:x,k:v", "hits,metric_type=counter,k=v value=1\n"},
		{"hits:1|c|#:v,k:,,k2:v2", "hits,metric_type=counter,k2=v2 value=1\n"},
		{"hits:1|c|@0.5|#a:b", "hits,metric_type=counter,a=b value=2\n"},
		{"hits:1|c|#a:b|@0.5", "hits,metric_type=counter,a=b value=2\n"},
		{"hits:1|c|#a:b|T1700000000", "hits,metric_type=counter,a=b value=1 1700000000000000000\n"},
		{"hits:1|c|c:abc123|x:new", "hits,metric_type=counter value=1\n"},
		{"hits:1|c||", "hits,metric_type=counter value=1\n"},
		{"  hits:1|c \r\n", "hits,metric_type=counter value=1\n"},
	}
	for _, tt := range tests {
		got, err := AppendStatsD([]byte("x\n"), []byte(tt.in))
		if err != nil {
			t.Errorf("AppendStatsD(%q): %v", tt.in, err)
			continue
		}
		if string(got) != "x\n"+tt.want {
			t.Errorf("AppendStatsD(%q)\n got %q\nwant %q", tt.in, got[2:], tt.want)
		}
	}
}

func TestAppendStatsDErrors(t *testing.T) {
	tests := []struct {
		in   string
		want error
	}{
		{"", ErrInvalidStatsD},
		{"hits", ErrInvalidStatsD},
		{"hits:1", ErrInvalidStatsD},
		{":1|c", ErrInvalidStatsD},
		{"#x:1|c", ErrInvalidStatsD},
		{`a\:1|c`, ErrInvalidStatsD},
		{"a|b:1|c", ErrInvalidStatsD},
		{"hits:|c", ErrInvalidStatsD},
		{"hits:1::2|c", ErrInvalidStatsD},
		{"hits:1|", ErrInvalidStatsD},
		{"hits:1|x", ErrInvalidStatsD},
		{"hits:1|c:2|c", ErrInvalidStatsD},
		{"hits:abc|c", ErrInvalidStatsD},
		{"hits:0x10|c", ErrInvalidStatsD},
		{"hits:inf|g", ErrInvalidStatsD},
		{"hits:1e400|g", ErrInvalidStatsD},
		{"hits:1|c|@0", ErrInvalidStatsD},
		{"hits:1|c|@2", ErrInvalidStatsD},
		{"hits:1|c|@x", ErrInvalidStatsD},
		{"hits:1|c|#a:b|#c:d", ErrInvalidStatsD},
		{`hits:1|c|#a:b\`, ErrInvalidStatsD},
		{"hits:1|c|T12x", ErrInvalidStatsD},
		{"hits:1|c|T99999999999", ErrInvalidStatsD},
		{"hits:1\x01|c", ErrInvalidStatsD},
		{"hits:1|c\xff", ErrInvalidUTF8},
		{"_e{5,4}:title|text", ErrInvalidStatsD},
		{"_sc|name|0", ErrInvalidStatsD},
	}
	for _, tt := range tests {
		got, err := AppendStatsD([]byte("x"), []byte(tt.in))
		if !errors.Is(err, tt.want) {
			t.Errorf("AppendStatsD(%q): got error %v, want %v", tt.in, err, tt.want)
		}
		if string(got) != "x" {
			t.Errorf("AppendStatsD(%q) failed but appended %q", tt.in, got[1:])
		}
	}
}

// What AppendStatsD makes must be accepted by Normalize, which adds the
// agent's tags and the receive time.
func TestStatsDThroughNormalize(t *testing.T) {
	n := newTestNormalizer(t, testDefaults)
	lp, err := AppendStatsD(nil, []byte("lat:1:2|ms|#host:web1"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = Lines(lp, func(_ int, line []byte) error {
		_, s, err := n.Normalize(nil, line, Nanosecond, testNow)
		got = append(got, string(s.Line))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"lat,host=web1,job=42,metric_type=timing,run=r1,step=0 value=1 1700000000123456789",
		"lat,host=web1,job=42,metric_type=timing,run=r1,step=0 value=2 1700000000123456789",
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %q, want %q", got, want)
	}
}
