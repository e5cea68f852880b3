package lineproto

import (
	"fmt"
	"testing"
	"time"
)

func TestAppendRawTags(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string // key=value@start:end ..., as sent
	}{
		{"CPUTime,job=31,step=-5,task=0,host=n1 value=0.00 1796480783", "job=31@7:14 step=-5@14:22 task=0@22:29 host=n1@29:37"},
		{"  m,b=1 x=1\n", "b=1@3:7"},
		{"m x=1", ""},
		{`m\,job=1,a\ b=c\,d\=e x=1`, `a\ b=c\,d\=e@8:21`},
		{`m,a=1,b=x\\,job=2 x=1`, `a=1@1:5`}, // the comma is escaped, then '=' is not allowed
		{"m,job=1,bad,c=d x=1", "job=1@1:7"}, // stops at the malformed tag
		{"m,job= x=1", ""},
		{"m,j\x01b=1 x=1", ""},
		{",job=1 x=1", ""},
		{"# m,job=1 x=1", ""},
	} {
		got := ""
		for i, tg := range AppendRawTags(nil, []byte(tc.line)) {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%s=%s@%d:%d", tg.Key, tg.Value, tg.Start, tg.End)
		}
		if got != tc.want {
			t.Errorf("AppendRawTags(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
	if got := string(AppendUnescapedTag(nil, []byte(`a\ b\,c\=d\x`))); got != `a b,c=d\x` {
		t.Errorf("AppendUnescapedTag: %q", got)
	}
}

func TestSampleOwn(t *testing.T) {
	n, err := NewNormalizer(DefaultTags{Host: "h", Job: "1", Step: "0", Run: "r"})
	if err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string]uint8{
		"m x=1":                              0,
		"m,job=2 x=1":                        OwnJob,
		"m,run=a,job=2 x=1":                  OwnJob | OwnRun,
		"m,step=-5,host=n1,a=b x=1":          OwnHost | OwnStep,
		`m,jo\b=2,job\ =3,runs=4 x=1`:        0,
		"m,host=a,job=b,run=c,step=d x=1 12": OwnHost | OwnJob | OwnRun | OwnStep,
	} {
		_, s, err := n.Normalize(nil, []byte(line), Nanosecond, time.Unix(1, 0))
		if err != nil || s.Own != want {
			t.Errorf("%q: Own %04b, %v; want %04b", line, s.Own, err, want)
		}
	}
}
