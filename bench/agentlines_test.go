package bench

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/linegen"
)

func TestPacerSchedule(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		name string
		rate float64
		tick func(i int) time.Duration // time of tick i since start
		n    int                       // ticks
		want int64                     // lines granted in all
	}{
		{"10k/s, 1 ms ticks", 10_000, func(i int) time.Duration { return time.Duration(i) * time.Millisecond }, 1000, 10_000},
		{"1.5 lines per ms", 1_500, func(i int) time.Duration { return time.Duration(i) * time.Millisecond }, 1000, 1_500},
		{"333/s: a line every 3 ms", 333, func(i int) time.Duration { return time.Duration(i) * time.Millisecond }, 3000, 999},
		{"1M/s, late ticks", 1_000_000, func(i int) time.Duration {
			return time.Duration(i)*time.Millisecond + time.Duration(i%8)*120*time.Microsecond
		}, 1000, 1_000_000},
		{"0.5/s", 0.5, func(i int) time.Duration { return time.Duration(i) * time.Second }, 11, 5},
	} {
		p := newPacer(c.rate, 1<<40, t0)
		var got int64
		for i := 0; i <= c.n; i++ {
			n := p.grant(t0.Add(c.tick(i)))
			if n < 0 {
				t.Fatalf("%s: tick %d granted %d", c.name, i, n)
			}
			got += n
		}
		if got != c.want || p.skipped != 0 {
			t.Errorf("%s: got %d lines, %d skipped; want %d, 0", c.name, got, p.skipped, c.want)
		}
	}
}

// TestPacerJitter checks that however the ticks fall, what was granted by
// a time is what the schedule holds then, never more.
func TestPacerJitter(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	p := newPacer(123_456, 1<<40, t0)
	var granted int64
	now := t0
	for range 5000 {
		now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Millisecond))))
		granted += p.grant(now)
		want := int64(float64(now.Sub(t0).Nanoseconds()) * 123_456 / 1e9)
		if granted != want {
			t.Fatalf("at %s: granted %d, want %d", now.Sub(t0), granted, want)
		}
	}
}

func TestPacerBurst(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	p := newPacer(10_000, 1000, t0)
	if n := p.grant(t0.Add(-time.Second)); n != 0 {
		t.Errorf("before the start: got %d, want 0", n)
	}
	if n := p.grant(t0.Add(10 * time.Millisecond)); n != 100 {
		t.Errorf("after 10 ms: got %d, want 100", n)
	}
	// A 2 s stall: the schedule holds 20,000 more lines, the burst lets
	// 1000 through and the rest is skipped, not owed.
	if n := p.grant(t0.Add(2010 * time.Millisecond)); n != 1000 || p.skipped != 19_000 {
		t.Errorf("after a stall: got %d, %d skipped; want 1000, 19000", n, p.skipped)
	}
	if n := p.grant(t0.Add(2011 * time.Millisecond)); n != 10 {
		t.Errorf("a tick after the stall: got %d, want 10", n)
	}
}

// TestBatchBounds checks the batching rule: datagrams of whole lines no
// larger than DatagramBytes, HTTP bodies of exactly Batch lines.
func TestBatchBounds(t *testing.T) {
	for _, c := range []struct {
		transport string
		dgram     int
	}{{"udp", 8192}, {"udp", 512}, {"tcp", 1400}, {"http", 0}} {
		g := &agentGen{cfg: AgentLoadConfig{Transport: c.transport, DatagramBytes: c.dgram, Batch: 100}.withDefaults(),
			lines: linegen.New(4096, 64, 1)}
		b := &lineBatch{}
		var sizes, counts []int
		for i := range 20_000 {
			b.buf = g.lines.AppendLine(b.buf, int64(1e18)+int64(i))
			b.lines++
			if g.full(b) {
				sizes, counts = append(sizes, len(b.buf)), append(counts, b.lines)
				b.reset()
			}
		}
		for i, sz := range sizes {
			switch {
			case c.transport == "http" && counts[i] != 100:
				t.Fatalf("http: batch %d has %d lines, want 100", i, counts[i])
			case c.transport != "http" && sz > c.dgram:
				t.Fatalf("%s %d: batch %d has %d bytes", c.transport, c.dgram, i, sz)
			case c.transport != "http" && sz < c.dgram-130:
				t.Fatalf("%s %d: batch %d left with %d bytes, another line would have fit", c.transport, c.dgram, i, sz)
			}
		}
	}
}
