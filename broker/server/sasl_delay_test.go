package server

import (
	"fmt"
	"testing"
	"time"
)

// The delay doubles with each failure from one address, stays bounded,
// starts over after a quiet failureWindow, and is per address.
func TestFailureDelays(t *testing.T) {
	d := newFailureDelays()
	now := time.Unix(1_800_000_000, 0)
	want := []time.Duration{100, 200, 400, 800, 1600, 3000, 3000} // ms
	for i, w := range want {
		if got := d.delay("10.0.0.1", now); got != w*time.Millisecond {
			t.Fatalf("failure %d: delay %v, want %v", i+1, got, w*time.Millisecond)
		}
		now = now.Add(time.Second)
	}
	for range 100 {
		if got := d.delay("10.0.0.1", now); got != failureDelayMax {
			t.Fatalf("delay %v after many failures, want the bound %v", got, failureDelayMax)
		}
	}
	if got := d.delay("10.0.0.2", now); got != failureDelayBase {
		t.Fatalf("another address waits %v, want %v", got, failureDelayBase)
	}
	if got := d.delay("10.0.0.1", now.Add(failureWindow+time.Second)); got != failureDelayBase {
		t.Fatalf("after a quiet minute: %v, want %v", got, failureDelayBase)
	}
	// Past failureHosts addresses, the quiet ones are forgotten.
	later := now.Add(2 * failureWindow)
	for i := range failureHosts {
		d.delay(fmt.Sprint("h", i), now)
	}
	d.delay("new", later)
	if n := len(d.byHost); n > 2 {
		t.Fatalf("%d addresses remembered after pruning, want the new one (and at most one more)", n)
	}
}
