package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
)

func TestRunFromTag(t *testing.T) {
	norm, err := lineproto.NewNormalizer(lineproto.DefaultTags{Host: "node", Run: "agentrun"})
	if err != nil {
		t.Fatal(err)
	}
	rf, err := newRunFromTag("job")
	if err != nil {
		t.Fatal(err)
	}
	b := &ingestBatch{norm: norm, runFrom: rf}
	for _, tc := range []struct{ in, want string }{
		// Slurm's profiler: run from job, the batch step by name, host kept.
		{"CPUTime,job=31,step=-5,task=0,host=n1 value=0.00 1796480783",
			"CPUTime,host=n1,job=31,run=31,step=batch,task=0 value=0.00 1796480783000000000"},
		{"RSS,job=31,step=0,task=1,host=n1 value=1904 1796480783",
			"RSS,host=n1,job=31,run=31,step=0,task=1 value=1904 1796480783000000000"},
		{"RSS,job=31,step=-4,task=0,host=n1 value=1 1", "RSS,host=n1,job=31,run=31,step=extern,task=0 value=1 1000000000"},
		{"RSS,job=31,step=4294967290,task=0 value=1 1", "RSS,host=node,job=31,run=31,step=interactive,task=0 value=1 1000000000"},
		{"RSS,job=31,step=-7,task=0 value=1 1", "RSS,host=node,job=31,run=31,step=-7,task=0 value=1 1000000000"},
		// The value is copied as sent, escapes included.
		{`m,job=a\ b x=1 1`, `m,host=node,job=a\ b,run=a\ b x=1 1000000000`},
		// A run tag of the line's own wins, and its step stays as sent.
		{"m,job=31,run=mine,step=-5 x=1 1", "m,host=node,job=31,run=mine,step=-5 x=1 1000000000"},
		// No job tag: the agent's run; ",job=" elsewhere does not count.
		{"m,step=-5 x=1 1", "m,host=node,run=agentrun,step=-5 x=1 1000000000"},
		{`m,a=1 x=1,job=3 1`, `m,a=1,host=node,run=agentrun x=1,job=3 1000000000`},
		{`m\,job=3,a=1 s="y,job=1" 1`, `m\,job=3,a=1,host=node,run=agentrun s="y,job=1" 1000000000`},
	} {
		b.reset()
		if e := b.add([]byte(tc.in), lineproto.Second, time.Now()); e != nil {
			t.Fatalf("%q: %v", tc.in, e)
		}
		if len(b.spans) != 1 {
			t.Fatalf("%q: %d lines accepted", tc.in, len(b.spans))
		}
		sp := b.spans[0]
		got := string(b.lines[sp.line:sp.lineEnd])
		if got != tc.want {
			t.Errorf("%q\n got %q\nwant %q", tc.in, got, tc.want)
		}
		wantFrom := 0
		if strings.Contains(tc.want, ",job=31,run=31,") || strings.Contains(tc.want, `run=a\ b`) {
			wantFrom = 1
		}
		if b.fromTag != wantFrom {
			t.Errorf("%q: fromTag %d, want %d", tc.in, b.fromTag, wantFrom)
		}
		// The record's key is the final run (unescaped) and host.
		run, _, _ := strings.Cut(tc.want[strings.Index(tc.want, ",run=")+5:], ",")
		run, _, _ = strings.Cut(strings.ReplaceAll(run, `\ `, "_"), " ")
		if key := strings.ReplaceAll(string(b.keys[sp.key:sp.keyEnd]), " ", "_"); !strings.HasPrefix(key, run+"/") {
			t.Errorf("%q: key %q, want run %q", tc.in, key, run)
		}
	}
	// A malformed line is refused as without the mapping.
	b.reset()
	if e := b.add([]byte("m,job=1,job=2 x=1 1\nm,job=1 x= 1"), lineproto.Second, time.Now()); e == nil || b.bad != 2 || len(b.spans) != 0 {
		t.Fatalf("malformed lines: %v, %d bad, %d accepted", e, b.bad, len(b.spans))
	}
}

// A tag other than the default ones is looked for in the line.
func TestRunFromOtherTag(t *testing.T) {
	norm, _ := lineproto.NewNormalizer(lineproto.DefaultTags{Run: "agentrun"})
	rf, err := newRunFromTag("slurm_job")
	if err != nil {
		t.Fatal(err)
	}
	b := &ingestBatch{norm: norm, runFrom: rf}
	b.reset()
	if e := b.add([]byte("m,slurm_job=7,step=-5 x=1 1\nm,job=8 x=1 1\nm x=1,slurm_job=9 1"), lineproto.Second, time.Now()); e != nil {
		t.Fatal(e)
	}
	var got []string
	for _, sp := range b.spans {
		got = append(got, string(b.lines[sp.line:sp.lineEnd]))
	}
	want := []string{"m,run=7,slurm_job=7,step=batch x=1 1000000000", "m,job=8,run=agentrun x=1 1000000000", "m,run=agentrun x=1,slurm_job=9 1000000000"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || b.fromTag != 1 {
		t.Errorf("got %q (%d from the tag), want %q (1)", got, b.fromTag, want)
	}
}

func TestRunFromTagConfig(t *testing.T) {
	for _, key := range []string{"", "run", "a b", "a,b", "a=b"} {
		if _, err := newRunFromTag(key); err == nil {
			t.Errorf("newRunFromTag(%q) accepted", key)
		}
	}
	if rf, err := newRunFromTag(RunFromTagOff); rf != nil || err != nil {
		t.Errorf("newRunFromTag(off) = %v, %v", rf, err)
	}
	c := Config{Brokers: []string{"b"}, SpoolDir: "d", ListenHTTP: "127.0.0.1:0"}
	if err := c.Validate(); err != nil || c.RunFromTag != "job" {
		t.Errorf("default RunFromTag %q, %v; want job", c.RunFromTag, err)
	}
	c.RunFromTag = "run"
	if err := c.Validate(); err == nil {
		t.Error("Validate accepted RunFromTag run")
	}
}
