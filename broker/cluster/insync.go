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
//
// "Applied" is what the state machine has applied, not raft's
// AppliedIndex: raft advances that when it hands entries to its FSM
// goroutine, before they are applied, so a replica read in between
// reported in sync with its high watermark still behind.

import (
	"errors"
	"io"
	"strconv"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// trackedFSM records the index of each command entry once the wrapped
// state machine has applied it, and of each snapshot it restored.
type trackedFSM struct {
	raft.FSM
	applied *atomic.Uint64
	snaps   raft.SnapshotStore
}

func (f trackedFSM) Apply(l *raft.Log) any {
	res := f.FSM.Apply(l)
	f.applied.Store(l.Index)
	return res
}

// Restore: raft restores the newest snapshot in the store (one installed
// from the leader is stored first). The log may still hold commands it
// covers (raft keeps trailing entries behind a snapshot), which were
// never applied one by one.
func (f trackedFSM) Restore(rc io.ReadCloser) error {
	if err := f.FSM.Restore(rc); err != nil {
		return err
	}
	if list, err := f.snaps.List(); err == nil && len(list) > 0 && list[0].Index > f.applied.Load() {
		f.applied.Store(list[0].Index)
	}
	return nil
}

// fsmApplied reports whether the state machine has applied every entry up
// to index c that raft hands it. Raft's own entries (no-op, barrier,
// configuration) never reach it, so the entries after the last one it
// applied are read: any other type is a command still on its way. An
// entry gone from the log was compacted into a snapshot, so applied.
func (g *Group) fsmApplied(c uint64) bool {
	i := g.applied.Load() + 1
	if first, err := g.store.FirstIndex(); err == nil && first > i {
		i = first
	}
	var l raft.Log
	for ; i <= c; i++ {
		if err := g.store.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return false
		}
		switch l.Type {
		case raft.LogNoop, raft.LogBarrier, raft.LogConfiguration, raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated:
		default:
			return false
		}
	}
	return true
}

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
	r := g.Raft()
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
	return c > 0 && r.AppliedIndex() >= c && g.fsmApplied(c)
}
