package tune

import (
	"bytes"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestStartProcs: no governor when MaxProcs is 0 or GOMAXPROCS is set in
// the environment (which is kept, and said so); otherwise one that starts
// the process on one processor.
func TestStartProcs(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(orig)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	if g := StartProcs(Config{Logger: log}); g != nil {
		t.Errorf("MaxProcs 0: got a governor, want none")
	}
	t.Setenv("GOMAXPROCS", "3")
	if g := StartProcs(Config{MaxProcs: 2, Logger: log}); g != nil {
		t.Errorf("GOMAXPROCS in the environment: got a governor, want none")
	}
	if !strings.Contains(logs.String(), "GOMAXPROCS is set in the environment") {
		t.Errorf("GOMAXPROCS in the environment was not logged: %q", logs.String())
	}
	if got := runtime.GOMAXPROCS(0); got != orig {
		t.Errorf("GOMAXPROCS %d, want %d kept", got, orig)
	}
	t.Setenv("GOMAXPROCS", "")
	if g := StartProcs(Config{MaxProcs: 2, Logger: log}); g == nil {
		t.Fatal("MaxProcs 2: no governor")
	}
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("GOMAXPROCS %d once the governor started, want 1", got)
	}
}

// TestAfterStart: the zero Config does nothing; a monitor slack is set or
// its failure logged, exactly one of the two.
func TestAfterStart(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	AfterStart(Config{Logger: log})
	if logs.Len() != 0 {
		t.Fatalf("the zero Config logged %q, want nothing", logs.String())
	}
	AfterStart(Config{MonitorSlack: 50 * time.Microsecond, Logger: log})
	raised := strings.Count(logs.String(), "raised the timer slack")
	kept := strings.Count(logs.String(), "keeps its default timer slack")
	if raised+kept != 1 || strings.Count(logs.String(), "\n") != 1 {
		t.Errorf("got %q, want one line saying the slack was raised or kept", logs.String())
	}
}
