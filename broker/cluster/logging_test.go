package cluster

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// lines decodes the JSON lines logged into buf since the last call.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range bytes.Lines(buf.Bytes()) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	buf.Reset()
	return out
}

// TestRaftLogRepeatsThinned: the raft instances of a node, one logger
// each, log a failure per group against the same peer; one line of the
// kind goes out per window and the next says how many were left out.
// Another peer, another message and lines below warning go out as they
// come.
func TestRaftLogRepeatsThinned(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
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
	got := lines(t, &buf)
	if len(got) != 5 {
		t.Fatalf("%d lines went out, want 5 (one failure per peer, the vote, two info lines): %v", len(got), got)
	}
	if _, ok := got[0]["repeated"]; ok {
		t.Fatalf("the first line of its kind says it repeats: %v", got[0])
	}

	clock = clock.Add(5 * time.Second)
	groups[0].Error("failed to heartbeat to", "peer", "10.0.0.2:9093", "error", "connection refused")
	if got := lines(t, &buf); len(got) != 0 {
		t.Fatalf("a line within the window went out: %v", got)
	}
	clock = clock.Add(6 * time.Second)
	groups[7].Error("failed to heartbeat to", "peer", "10.0.0.2:9093", "error", "connection refused")
	got = lines(t, &buf)
	if len(got) != 1 {
		t.Fatalf("%d lines after the window, want 1: %v", len(got), got)
	}
	// Left out: the first burst but its first line, and the line at 5 s.
	if got[0]["repeated"] != 1000.0 || got[0]["level"] != "ERROR" {
		t.Fatalf("after the window: %v, want level ERROR and repeated 1000", got[0])
	}
}
