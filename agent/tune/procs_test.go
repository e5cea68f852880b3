package tune

import (
	"log/slog"
	"runtime"
	"testing"
	"time"
)

// TestProcsGovernor: one processor at low rates, the most allowed once a
// fast rate has lasted procsMinSpan, one again when the rate falls.
func TestProcsGovernor(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(orig)
	if orig < 2 {
		t.Skip("needs GOMAXPROCS of at least 2")
	}
	t0 := time.Now()
	g := NewProcs(8, slog.New(slog.DiscardHandler), t0)
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d after start, want 1", got)
	}
	// 10k lines a second for two seconds: stays at one.
	for i := 1; i <= 20; i++ {
		g.Add(t0.Add(time.Duration(i)*100*time.Millisecond), 1000)
	}
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d at 10k samples/s, want 1", got)
	}
	// A step to a million a second: 50 ms are not enough to tell...
	t1 := t0.Add(2 * time.Second)
	g.Add(t1.Add(50*time.Millisecond), 50_000)
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d 50 ms into the step, want 1", got)
	}
	// ...150 ms are.
	g.Add(t1.Add(150*time.Millisecond), 100_000)
	if got, want := runtime.GOMAXPROCS(0), min(8, orig); got != want {
		t.Fatalf("GOMAXPROCS %d at a million samples/s, want %d (the most, bounded by the runtime's %d)", got, want, orig)
	}
	// Between the thresholds: no change.
	for i := 1; i <= 30; i++ {
		g.Add(t1.Add(150*time.Millisecond+time.Duration(i)*100*time.Millisecond), 20_000)
	}
	if got, want := runtime.GOMAXPROCS(0), min(8, orig); got != want {
		t.Fatalf("GOMAXPROCS %d at 200k samples/s, want %d still", got, want)
	}
	// Down to 10k a second: one again.
	t2 := t1.Add(3200 * time.Millisecond)
	for i := 1; i <= 30; i++ {
		g.Add(t2.Add(time.Duration(i)*100*time.Millisecond), 1000)
	}
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d after the rate fell to 10k samples/s, want 1", got)
	}
	// Off: a nil governor does nothing.
	var off *Procs
	off.Add(t2, 1<<30)
}
