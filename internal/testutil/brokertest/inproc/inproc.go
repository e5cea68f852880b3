// Package inproc runs a simtel broker in the test's own process: the real
// broker code, no binary to build, started in milliseconds. It is the
// broker of the tests of packages that may link the broker (the broker's
// own, and those above it: sink, lake, learner, rollup, scheduler, slurm,
// bench, cmd/simtel, internal/admin).
//
// The tests of packages below the broker (agent/...) must not link it
// (internal/layering checks this); they start `simtel broker` processes
// with brokertest.Start. A test that kills, pauses or restarts its broker
// needs a process too, whatever its package.
//
// Options are brokertest's: Topic, DataDir, HTTP and GroupDelay apply;
// Args, Listen and LogDir, which are a process's, fail the test.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// Start starts a broker in this process on free loopback ports and
// creates the topics given with brokertest.Topic. It stops when the test
// ends; Stop stops it sooner (its data directory can then be given to
// another Start with brokertest.DataDir).
func Start(t testing.TB, opts ...brokertest.Option) *brokertest.Broker {
	t.Helper()
	return StartConfig(t, nil, opts...)
}

// StartConfig is Start with mod changing the broker's configuration
// (after the options) before it starts; mod may be nil.
func StartConfig(t testing.TB, mod func(*broker.Config), opts ...brokertest.Option) *brokertest.Broker {
	t.Helper()
	return brokertest.StartWith(t, func(t testing.TB, b *brokertest.Broker, s brokertest.Settings) func(time.Duration) error {
		return run(t, b, s, mod)
	}, opts...)
}

// run starts the broker of s and returns what stops it.
func run(t testing.TB, b *brokertest.Broker, s brokertest.Settings, mod func(*broker.Config)) func(time.Duration) error {
	t.Helper()
	cfg := broker.Config{DataDir: s.Dir, Listen: "127.0.0.1:0", Logger: testutil.Logger()}
	if s.HTTP {
		cfg.HTTPListen = "127.0.0.1:0"
	}
	if d := s.GroupDelay; d != nil {
		cfg.GroupInitialRebalanceDelay, cfg.GroupInitialRebalanceDelaySet = *d, true
	}
	if mod != nil {
		mod(&cfg)
	}
	br, err := broker.New(cfg)
	if err != nil {
		t.Fatalf("cannot start broker: %v", err)
	}
	b.ID = int(cfg.NodeID)
	b.Addr = br.Addr().String()
	if a := br.HTTPAddr(); a != nil {
		b.HTTPAddr = a.String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	return func(d time.Duration) error {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("broker stopped with an error: %w", err)
			}
			return nil
		case <-time.After(d):
			var buf strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			return fmt.Errorf("broker did not stop within %v; goroutines:\n%s", d, &buf)
		}
	}
}
