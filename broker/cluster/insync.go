package cluster

// In sync. Kafka's ISR names the replicas that have everything the leader
// committed; raft has no such list, and hashicorp/raft keeps a follower's
// commit index no higher than its own log, so a follower cannot tell from
// raft alone that it lags. The transport therefore keeps the highest
// commit index a leader sent with an AppendEntries (heartbeats carry
// none), and a replica is in sync when it is a voter and has applied up to
// there. A replica that has heard no leader since it started is not in
// sync: after a restart that is the time until the leader's first
// AppendEntries reaches it.

import (
	"strconv"

	"github.com/hashicorp/raft"
)

// noteLeaderCommit records a commit index a leader sent.
func (t *groupTransport) noteLeaderCommit(c uint64) {
	for {
		old := t.leaderCommit.Load()
		if c <= old || t.leaderCommit.CompareAndSwap(old, c) {
			return
		}
	}
}

// InSync reports whether this broker's replica of the group is a voter
// and has applied every entry its leader last said was committed (a
// leader is in sync by definition).
func (g *Group) InSync() bool {
	r := g.Raft
	if r == nil || g.node == nil || g.trans == nil {
		return false
	}
	self := raft.ServerID(strconv.Itoa(int(g.node.cfg.NodeID)))
	voter := false
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.ID == self {
			voter = s.Suffrage == raft.Voter
		}
	}
	switch {
	case !voter:
		return false
	case r.State() == raft.Leader:
		return true
	}
	c := g.trans.leaderCommit.Load()
	return c > 0 && r.AppliedIndex() >= c
}
