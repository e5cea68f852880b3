package cluster

// Election backoff. A raft candidate whose round gets no quorum of votes
// within its election timeout starts another round at once, with new
// vote requests to every peer, for as long as it gets no leader. When
// thousands of groups elect at once because their brokers are starved of
// CPU (leaders stepping down when heartbeat answers come late), every
// round of every group adds vote requests that the same starved brokers
// have to answer, and the groups elected again and again (tens of
// thousands of rounds a minute at 3,000 partitions on a loaded machine).
// So a data group that has been a candidate for a while gets a longer
// election timeout: doubled after every backoffAfter heartbeat timeouts
// of candidacy, up to backoffMax times the normal one, and the normal one
// again as soon as it sees a leader (itself or another replica). Only
// when raft stands again changes: its votes and what it accepts are
// raft's, so safety is too. The heartbeat timeout (when a follower
// stands) is not changed; a group's first election keeps its long
// timeouts (holdFirstElection), and a quiet follower's are longer still.

import (
	"time"

	"github.com/hashicorp/raft"
)

const (
	// backoffAfter: the election timeout doubles after this many
	// heartbeat timeouts of candidacy.
	backoffAfter = 3
	// backoffMax bounds the election timeout, in heartbeat timeouts.
	backoffMax = 8
)

// electionState is a candidate group's backoff.
type electionState struct {
	// since is when the group was first seen asking for votes since it
	// last saw a leader; raised is the election timeout set then (0:
	// none).
	since  time.Time
	raised time.Duration
}

// backoffElection is called when the group's raft asks a peer for a vote
// or pre-vote: it lengthens the candidate's election timeout after
// backoffAfter heartbeat timeouts of candidacy.
func (t *groupTransport) backoffElection(now time.Time) {
	normal := t.quiet.hb
	r := t.raft.Load()
	if normal <= 0 || r == nil || t.group == ControllerGroup || r.State() != raft.Candidate {
		return
	}
	t.quiet.mu.Lock()
	defer t.quiet.mu.Unlock()
	if t.elect.since.IsZero() {
		t.elect.since = now
		return
	}
	steps := max(0, min(int(now.Sub(t.elect.since)/(backoffAfter*normal)), 3))
	want := normal << steps
	if want > backoffMax*normal {
		want = backoffMax * normal
	}
	rc := r.ReloadableConfig()
	if want <= normal || rc.ElectionTimeout >= want {
		return
	}
	rc.ElectionTimeout = want
	if r.ReloadConfig(rc) == nil {
		t.elect.raised = want
	}
}

// electionOver gives the group the normal election timeout back when it
// sees a leader (called from raft's observer).
func (t *groupTransport) electionOver() {
	t.quiet.mu.Lock()
	defer t.quiet.mu.Unlock()
	raised := t.elect.raised
	t.elect = electionState{}
	r := t.raft.Load()
	if raised == 0 || r == nil {
		return
	}
	rc := r.ReloadableConfig()
	if rc.ElectionTimeout != raised {
		// Changed since (quiet.go, holdFirstElection).
		return
	}
	rc.ElectionTimeout = t.quiet.hb
	_ = r.ReloadConfig(rc)
}
