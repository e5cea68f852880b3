package replay

import (
	"reflect"
	"testing"
)

func TestAppendLineTypesAndEscapes(t *testing.T) {
	s := Sample{Measurement: "my meas,x", Tags: map[string]string{"run": "r 1", "host": "h=1,2", "empty": ""},
		Fields: map[string]any{"f": 1.5, "i": int64(-3), "u": uint64(4), "b": true, "s": "say \"hi\"\\ \n ok", "whole": 2.0},
		Time:   1700000000123456789}
	got, err := AppendLine(nil, &s)
	if err != nil {
		t.Fatal(err)
	}
	want := `my\ meas\,x,host=h\=1\,2,run=r\ 1 b=true,f=1.5,i=-3i,s="say \"hi\"\\ ` + "\n" + ` ok",u=4u,whole=2 1700000000123456789`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	back, err := ParseLine(got)
	if err != nil {
		t.Fatal(err)
	}
	delete(s.Tags, "empty")
	if !reflect.DeepEqual(back, s) {
		t.Errorf("round trip: got %+v, want %+v", back, s)
	}
	if _, err := AppendLine(nil, &Sample{Measurement: "m", Time: 1}); err == nil {
		t.Error("a sample without fields encoded")
	}
	if _, err := ParseLine([]byte("m f=1")); err == nil {
		t.Error("a line without a timestamp parsed")
	}
}

func FuzzLineRoundTrip(f *testing.F) {
	for _, s := range []string{
		"cpu,host=a,run=r1 usage=1.5,n=3i,u=4u,ok=t,s=\"x\" 1700000000000000000",
		`m\ x,t\=1=v\,2 s="a \"b\" \\c" -5`,
		"m f=1e300 0",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		s, err := ParseLine(line)
		if err != nil {
			return
		}
		out, err := AppendLine(nil, &s)
		if err != nil {
			return // e.g. a tag the encoder refuses; never a crash
		}
		back, err := ParseLine(out)
		if err != nil {
			t.Fatalf("re-parse of %q (from %q): %v", out, line, err)
		}
		for k, v := range s.Tags {
			if v == "" {
				delete(s.Tags, k)
			}
		}
		if !reflect.DeepEqual(back, s) {
			t.Fatalf("round trip of %q: got %+v, want %+v", line, back, s)
		}
	})
}

// A line another producer spelled its own way (tags out of order, a
// trailing newline) is read as the same sample as its canonical form; a
// line without a timestamp is refused either way.
func TestParseLineReadsOtherSpellings(t *testing.T) {
	want, err := ParseLine([]byte(`cpu,host=a,run=r1 busy=0.5,n=3i 1700000000000000000`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseLine([]byte("cpu,run=r1,host=a n=3i,busy=0.5 1700000000000000000\n"))
	if err != nil {
		t.Fatalf("a valid line in another spelling was refused: %v", err)
	}
	if got.String() != want.String() {
		t.Fatalf("got %s, want %s", got.String(), want.String())
	}
	for _, line := range []string{"cpu,host=a busy=0.5", "cpu,run=r1,host=a busy=0.5\n", "not a line"} {
		if _, err := ParseLine([]byte(line)); err == nil {
			t.Errorf("%q: accepted", line)
		}
	}
}
