package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestBoundStop: a broker whose clean stop does not finish within
// --stop-timeout exits (status 1) after logging so and its goroutines;
// one that finishes in time is left alone.
func TestBoundStop(t *testing.T) {
	if os.Getenv("SIMTEL_TEST_BOUND_STOP") == "1" {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		boundStop(ctx, make(chan struct{}), 10*time.Millisecond, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	close(done)
	boundStop(ctx, done, time.Minute, slog.New(slog.NewTextHandler(os.Stderr, nil)))

	cmd := exec.Command(os.Args[0], "-test.run=^TestBoundStop$")
	cmd.Env = append(os.Environ(), "SIMTEL_TEST_BOUND_STOP=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("a stop that does not finish: %v, want exit status 1; output:\n%s", err, out)
	}
	for _, want := range []string{"the clean stop has not finished", "goroutine profile", "boundStop"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the output has no %q:\n%s", want, out)
		}
	}
}
