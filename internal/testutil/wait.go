package testutil

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// WaitFor calls check until it returns nil, and fails the test with
// check's last error once within has passed. Between calls it sleeps 10 ms
// at first, twice as long each time up to 250 ms: a condition reached at
// once is seen at once, and a long wait does not keep a loaded machine
// busy.
func WaitFor(t testing.TB, within time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := 10 * time.Millisecond
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %v", what, within, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 250*time.Millisecond)
	}
}

// WaitListening waits up to within until addr accepts TCP connections. It
// returns an error, with the process's log, if p (nil for none) exits
// first, and an error if nothing listens in time.
func WaitListening(addr string, p *Proc, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if p != nil && p.Exited() {
			log, _ := os.ReadFile(p.Log)
			return fmt.Errorf("process exited before listening on %s:\n%s", addr, log)
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nothing listening on %s after %v", addr, within)
}
