package linegen

import (
	"bytes"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
)

// TestLineSet checks the pre-rendered lines with the strict Decoder of
// canonical lines rather than the agent's Normalize: every line valid,
// with its timestamp, the
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
	kinds := map[string]int{}
	ranks := map[string]bool{}
	var d lineproto.Decoder
	i := 0
	_ = lineproto.Lines(body, func(_ int, line []byte) error {
		if err := d.Decode(line); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		kinds[string(d.Measurement)]++
		for _, tg := range d.Tags {
			if string(tg.Key) == "rank" {
				ranks[string(tg.Value)] = true
			}
		}
		if len(d.Fields) < 3 {
			t.Errorf("line %d has %d fields", i, len(d.Fields))
		}
		if !d.HasTime || d.Time != ts+int64(i) {
			t.Fatalf("line %d: time %d, want %d", i, d.Time, ts+int64(i))
		}
		i++
		return nil
	})
	if i != n {
		t.Fatalf("%d lines decoded, want %d", i, n)
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
