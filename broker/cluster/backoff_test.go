package cluster

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestElectionBackoff: a data group that stays a candidate gets a longer
// election timeout, doubled every backoffAfter heartbeat timeouts up to
// backoffMax, never a shorter one than it has (the held first election),
// and the normal one back when it sees a leader.
func TestElectionBackoff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a raft election")
	}
	nodes := startSettledNodes(t)
	const hb = 200 * time.Millisecond
	// Only this replica opens the group: it stands and never wins.
	grp, err := nodes[0].StartGroup(GroupConfig{Group: 302, Dir: filepath.Join(t.TempDir(), "g"), FSM: NewFSM(),
		Peers: []int32{0, 1, 2}, Bootstrap: true, HeartbeatTimeout: hb, Logger: nodes[0].log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = grp.Close() })
	waitFor(t, "the replica to stand", func() bool { return grp.Raft.State() == raft.Candidate })
	tr := grp.trans
	timeout := func() time.Duration { return grp.Raft.ReloadableConfig().ElectionTimeout }

	// The held first election's timeout is longer than any backoff.
	if got := timeout(); got != heldElectionTimeouts*hb {
		t.Fatalf("election timeout %v, want the held %v", got, heldElectionTimeouts*hb)
	}
	// The group's own vote requests call backoffElection too, with the
	// time now: the test's times are an hour later, so only its own
	// calls back off.
	t0 := time.Now().Add(time.Hour)
	tr.quiet.mu.Lock()
	tr.elect = electionState{since: t0}
	tr.quiet.mu.Unlock()
	tr.backoffElection(t0.Add(100 * hb))
	if got := timeout(); got != heldElectionTimeouts*hb {
		t.Fatalf("backoff changed the held election timeout to %v", got)
	}

	// With the normal timeouts (as after the first leader was seen).
	rc := grp.Raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = hb, hb
	if err := grp.Raft.ReloadConfig(rc); err != nil {
		t.Fatal(err)
	}
	tr.quiet.mu.Lock()
	tr.elect = electionState{since: t0}
	tr.quiet.mu.Unlock()
	for _, step := range []struct {
		after time.Duration
		want  time.Duration
	}{
		{backoffAfter*hb - time.Millisecond, hb},
		{backoffAfter * hb, 2 * hb},
		{2 * backoffAfter * hb, 4 * hb},
		{100 * backoffAfter * hb, backoffMax * hb},
	} {
		tr.backoffElection(t0.Add(step.after))
		if got := timeout(); got != step.want {
			t.Fatalf("%v into the candidacy: election timeout %v, want %v", step.after, got, step.want)
		}
		if got := grp.Raft.ReloadableConfig().HeartbeatTimeout; got != hb {
			t.Fatalf("backoff changed the heartbeat timeout to %v", got)
		}
	}
	tr.electionOver()
	if got := timeout(); got != hb {
		t.Fatalf("election timeout %v after a leader was seen, want %v", got, hb)
	}
}
