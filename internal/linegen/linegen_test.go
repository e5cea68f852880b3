package linegen

import (
	"bytes"
	"testing"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
)

// TestLineSet checks the pre-rendered lines with a line protocol parser
// other than the agent's: every line valid, with its timestamp, the
// lengths NextLen promises, and the mix and size the README describes.
func TestLineSet(t *testing.T) {
	s := New(4096, 64, 1)
	var body []byte
	const n = 10_000
	ts := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano()
	for i := range n {
		want := s.NextLen()
		l := len(body)
		body = s.AppendLine(body, ts+int64(i))
		if got := len(body) - l; got != want {
			t.Fatalf("line %d: %d bytes, NextLen said %d", i, got, want)
		}
	}
	if mean := float64(len(body)) / n; mean < 85 || mean > 115 {
		t.Errorf("mean line is %.1f bytes, want about 100", mean)
	}
	dec := lineprotocol.NewDecoderWithBytes(body)
	kinds := map[string]int{}
	ranks := map[string]bool{}
	for i := 0; dec.Next(); i++ {
		m, err := dec.Measurement()
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		kinds[string(m)]++
		for {
			k, v, err := dec.NextTag()
			if err != nil {
				t.Fatalf("line %d: %v", i, err)
			}
			if k == nil {
				break
			}
			if string(k) == "rank" {
				ranks[string(v)] = true
			}
		}
		fields := 0
		for {
			k, _, err := dec.NextField()
			if err != nil {
				t.Fatalf("line %d: %v", i, err)
			}
			if k == nil {
				break
			}
			fields++
		}
		if fields < 3 {
			t.Errorf("line %d has %d fields", i, fields)
		}
		tm, err := dec.Time(lineprotocol.Nanosecond, time.Time{})
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if tm.UnixNano() != ts+int64(i) {
			t.Fatalf("line %d: time %d, want %d", i, tm.UnixNano(), ts+int64(i))
		}
	}
	if err := dec.Err(); err != nil {
		t.Fatal(err)
	}
	if kinds["sim_step"] != n*3/4 || kinds["gpu"] != n/4 {
		t.Errorf("got %v, want three sim_step lines to each gpu line", kinds)
	}
	if len(ranks) != 64 {
		t.Errorf("got %d ranks, want 64", len(ranks))
	}
	// The same seed renders the same lines.
	if a, b := New(16, 8, 7), New(16, 8, 7); !bytes.Equal(bytes.Join(a.prefixes, nil), bytes.Join(b.prefixes, nil)) {
		t.Error("two line sets with one seed differ")
	}
}
