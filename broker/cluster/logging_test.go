package cluster

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// records keeps the records logged through it.
type records struct {
	mu  sync.Mutex
	got []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) take() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

func attr(rec slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	return v, found
}

// TestRaftLogRepeatsThinned: the raft instances of a node, one logger
// each, log a failure per group against the same peer; one line of the
// kind goes out per window and the next says how many were left out.
// Another peer, another message and lines below warning go out as they
// come.
func TestRaftLogRepeatsThinned(t *testing.T) {
	h := &records{}
	l := slog.New(h)
	clock := time.Unix(1000, 0)
	rep := &repeats{window: 10 * time.Second, now: func() time.Time { return clock }}
	groups := make([]interface {
		Error(string, ...any)
		Warn(string, ...any)
		Info(string, ...any)
	}, 50)
	for i := range groups {
		groups[i] = hclogFor(l, "raft", rep)
	}
	for range 20 {
		for _, g := range groups {
			g.Error("failed to heartbeat to", "peer", "10.0.0.2:9093", "error", "connection refused")
		}
	}
	groups[3].Error("failed to heartbeat to", "peer", "10.0.0.3:9093", "error", "connection refused")
	groups[4].Warn("rejecting vote request since we have a leader", "from", "10.0.0.2:9093")
	groups[5].Info("entering follower state", "leader-address", "")
	groups[6].Info("entering follower state", "leader-address", "")
	got := h.take()
	if len(got) != 5 {
		for _, r := range got {
			t.Log(r.Level, r.Message)
		}
		t.Fatalf("%d lines went out, want 5: one failure per peer, the vote, two info lines", len(got))
	}
	if _, ok := attr(got[0], "repeated"); ok {
		t.Fatalf("the first line of its kind says it repeats")
	}

	clock = clock.Add(5 * time.Second)
	groups[0].Error("failed to heartbeat to", "peer", "10.0.0.2:9093", "error", "connection refused")
	if got := h.take(); len(got) != 0 {
		t.Fatalf("a line within the window went out: %v", got[0].Message)
	}
	clock = clock.Add(6 * time.Second)
	groups[7].Error("failed to heartbeat to", "peer", "10.0.0.2:9093", "error", "connection refused")
	got = h.take()
	if len(got) != 1 {
		t.Fatalf("%d lines after the window, want 1", len(got))
	}
	// Left out: the first burst but its first line, and the line at 5 s.
	if v, ok := attr(got[0], "repeated"); !ok || v.Int64() != 1000 {
		t.Fatalf("repeated = %v (%v), want 1000", v, ok)
	}
	if got[0].Level != slog.LevelError {
		t.Fatalf("level %v, want error", got[0].Level)
	}
}
