package tune

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSetMonitorSlack: the thread chosen is one of this process's, it is
// the runtime's monitor (the only thread that sleeps in nanosleep while
// the process idles), and its slack is what was asked, when the test may
// set it.
func TestSetMonitorSlack(t *testing.T) {
	tid, err := monitorThread()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
		t.Fatalf("thread %d is not one of this process's: %v", tid, err)
	}
	// The monitor polls every 20 µs to 10 ms while a goroutine runs, in
	// nanosleep (system call 35 on amd64, 101 on arm64); keep one busy and
	// look at the thread's current system call a few times.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	seen := false
	for i := 0; i < 200 && !seen; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", tid))
		if err != nil {
			t.Skipf("cannot read the thread's system call: %v", err)
		}
		nr := strings.Fields(string(b))[0]
		seen = nr == "35" || nr == "101"
		time.Sleep(time.Millisecond)
	}
	if !seen {
		t.Errorf("thread %d was never seen in nanosleep: not the runtime's monitor", tid)
	}

	got, err := SetMonitorSlack(2 * time.Millisecond)
	if errors.Is(err, fs.ErrPermission) {
		t.Skipf("setting another thread's timer slack needs CAP_SYS_NICE: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got != tid {
		t.Errorf("set thread %d, want %d", got, tid)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/timerslack_ns", tid))
	if err != nil {
		t.Fatal(err)
	}
	if ns, _ := strconv.Atoi(strings.TrimSpace(string(b))); ns != 2_000_000 {
		t.Errorf("timer slack %q ns, want 2000000", strings.TrimSpace(string(b)))
	}
}
