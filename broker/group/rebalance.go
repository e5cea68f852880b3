package group

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file holds the transitions of the state machine described in
// doc.go. Every function here runs with c.mu held and never blocks.

// attachJoinLocked registers resp as m's blocked JoinGroup call. A call
// still attached from an earlier JoinGroup of the same member (a client
// that gave up and retried on another connection) is answered with
// REBALANCE_IN_PROGRESS so that it does not linger.
func (c *Coordinator) attachJoinLocked(m *member, resp *kmsg.JoinGroupResponse) *joinWaiter {
	c.finishJoinLocked(m, kerr.RebalanceInProgress.Code)
	return attachLocked(&m.join, m, resp)
}

// attachSyncLocked is attachJoinLocked for SyncGroup.
func (c *Coordinator) attachSyncLocked(m *member, resp *kmsg.SyncGroupResponse) *syncWaiter {
	c.finishSyncLocked(m, kerr.RebalanceInProgress.Code)
	return attachLocked(&m.sync, m, resp)
}

// attachLocked makes resp the blocked call of m in slot (m.join or
// m.sync), which the caller has emptied.
func attachLocked[R any](slot **waiter[R], m *member, resp R) *waiter[R] {
	w := &waiter[R]{m: m, resp: resp, done: make(chan struct{})}
	*slot = w
	return w
}

// finishJoinLocked answers m's blocked JoinGroup with an error.
func (c *Coordinator) finishJoinLocked(m *member, code int16) {
	if w := detachLocked(&m.join); w != nil {
		w.resp.ErrorCode, w.resp.MemberID = code, m.id
		close(w.done)
	}
}

// finishSyncLocked answers m's blocked SyncGroup with an error.
func (c *Coordinator) finishSyncLocked(m *member, code int16) {
	if w := detachLocked(&m.sync); w != nil {
		w.resp.ErrorCode = code
		close(w.done)
	}
}

// detachLocked empties slot (m.join or m.sync) and returns the call it
// held, nil if none.
func detachLocked[R any](slot **waiter[R]) *waiter[R] {
	w := *slot
	*slot = nil
	return w
}

// fillJoinLocked writes the current generation into resp as member m sees
// it: the leader also gets every member's metadata for the selected
// protocol.
func (g *group) fillJoinLocked(m *member, resp *kmsg.JoinGroupResponse) {
	resp.ErrorCode = 0
	resp.Generation = g.generation
	resp.ProtocolType = kmsg.StringPtr(g.protocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.LeaderID = g.leader
	resp.MemberID = m.id
	resp.Members = nil
	if m.id != g.leader {
		return
	}
	for _, o := range g.sortedMembersLocked() {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = o.id
		if o.static() {
			jm.InstanceID = kmsg.StringPtr(o.instanceID)
		}
		jm.ProtocolMetadata = o.metadataFor(g.protocol)
		resp.Members = append(resp.Members, jm)
	}
}

// prepareRebalanceLocked moves g to PreparingRebalance: every member must
// rejoin. Called from Empty (first member), Stable and CompletingRebalance.
func (c *Coordinator) prepareRebalanceLocked(g *group, reason string) {
	if g.state == stateCompletingRebalance {
		// The generation being assigned is abandoned: members blocked
		// in SyncGroup must rejoin, and the assignment they were about
		// to get is void.
		for _, m := range g.members {
			c.finishSyncLocked(m, kerr.RebalanceInProgress.Code)
			m.assignment = nil
		}
	}
	g.pendingSync = nil
	wasEmpty := g.state == stateEmpty
	g.state = statePreparingRebalance
	now := c.now()
	rt := g.maxRebalanceTimeoutLocked()
	if wasEmpty && c.initialDelay > 0 {
		// Kafka's InitialDelayedJoin: wait initialDelay, then extend
		// by up to initialDelay at a time while new members keep
		// joining, never past the rebalance timeout in total.
		g.delayPhase = true
		g.delayDeadline = now.Add(c.initialDelay)
		g.delayRemaining = max(rt-c.initialDelay, 0)
		g.newMemberAdded = false
	} else {
		g.delayPhase = false
		g.rebalanceDeadline = now.Add(rt)
	}
	c.logger.Info("group preparing rebalance", "group", g.name, "reason", reason,
		"generation", g.generation, "members", len(g.members))
	c.maybeCompleteJoinLocked(g)
}

// maybeCompleteJoinLocked completes the join phase if every member has
// rejoined and no pending member (one that got MEMBER_ID_REQUIRED and is
// about to rejoin) is outstanding. The initial delay phase only ends by
// its timer.
func (c *Coordinator) maybeCompleteJoinLocked(g *group) {
	if g.state != statePreparingRebalance || g.delayPhase || len(g.pending) > 0 {
		return
	}
	for _, m := range g.members {
		if m.join == nil {
			return
		}
	}
	c.completeJoinLocked(g)
}

// completeJoinLocked ends the join phase, by all members having joined or
// by deadline: dynamic members that did not rejoin are dropped (static
// ones stay, their instance may be restarting), a new generation starts
// and every waiting member gets its JoinGroup response.
func (c *Coordinator) completeJoinLocked(g *group) {
	g.delayPhase = false
	for _, m := range g.sortedMembersLocked() {
		if m.join == nil && !m.static() {
			c.logger.Info("group member removed", "group", g.name, "member", m.id,
				"reason", "did not rejoin before the rebalance completed")
			c.dropMemberLocked(g, m, kerr.UnknownMemberID.Code)
		}
	}
	if l := g.members[g.leader]; l == nil || l.join == nil {
		g.leader = ""
		for _, m := range g.sortedMembersLocked() {
			if m.join != nil {
				g.leader = m.id
				break
			}
		}
		if g.leader == "" && len(g.members) > 0 {
			// Only static members that have not rejoined are left:
			// nobody can lead. Wait another rebalance timeout; their
			// sessions expire meanwhile unless they come back.
			g.leader = g.sortedMembersLocked()[0].id
			g.rebalanceDeadline = c.now().Add(g.maxRebalanceTimeoutLocked())
			c.logger.Warn("group rebalance postponed, no member rejoined", "group", g.name,
				"members", len(g.members))
			return
		}
	}
	g.generation = g.nextGenerationLocked()
	if len(g.members) == 0 {
		g.state = stateEmpty
		g.protocol = ""
		g.leader = ""
		c.saveLocked(g)
		c.logger.Info("group is empty", "group", g.name, "generation", g.generation)
		return
	}
	g.protocol = g.selectProtocolLocked()
	g.state = stateCompletingRebalance
	now := c.now()
	g.pendingSync = make(map[string]struct{}, len(g.members))
	g.syncDeadline = now.Add(g.maxRebalanceTimeoutLocked())
	for _, m := range g.members {
		m.isNew = false
		m.lastSeen = now
		g.pendingSync[m.id] = struct{}{}
		if w := m.join; w != nil {
			m.join = nil
			g.fillJoinLocked(m, w.resp)
			close(w.done)
		}
	}
	c.logger.Info("group rebalance completed", "group", g.name, "generation", g.generation,
		"protocol", g.protocol, "leader", g.leader, "members", len(g.members))
}

// dropMemberLocked removes m from g without starting a rebalance; its
// blocked calls are answered with code.
func (c *Coordinator) dropMemberLocked(g *group, m *member, code int16) {
	c.finishJoinLocked(m, code)
	c.finishSyncLocked(m, code)
	delete(g.members, m.id)
	if m.static() && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	delete(g.pendingSync, m.id)
	if g.leader == m.id {
		g.leader = ""
		if ms := g.sortedMembersLocked(); len(ms) > 0 {
			g.leader = ms[0].id
		}
	}
}

// removeMemberLocked removes m and reacts as Kafka does: a Stable or
// CompletingRebalance group rebalances, a rebalancing group may now have
// everyone it waits for.
func (c *Coordinator) removeMemberLocked(g *group, m *member, reason string) {
	c.logger.Info("group member removed", "group", g.name, "member", m.id, "reason", reason)
	c.dropMemberLocked(g, m, kerr.UnknownMemberID.Code)
	switch g.state {
	case stateStable, stateCompletingRebalance:
		c.prepareRebalanceLocked(g, reason)
	case statePreparingRebalance:
		c.maybeCompleteJoinLocked(g)
	}
}

// expireLocked enforces g's deadlines at now; called by the janitor.
func (c *Coordinator) expireLocked(g *group, now time.Time) {
	if g.state == stateDead {
		return
	}
	for id, deadline := range g.pending {
		if now.After(deadline) {
			delete(g.pending, id)
			c.logger.Debug("group pending member expired", "group", g.name, "member", id)
		}
	}

	var expired []*member
	for _, m := range g.members {
		if m.join == nil && m.sync == nil && now.Sub(m.lastSeen) > m.sessionTimeout {
			expired = append(expired, m)
		}
	}
	for _, m := range expired {
		// An earlier removal may have completed the join phase,
		// which drops members that did not rejoin: skip those.
		if g.members[m.id] == m {
			c.removeMemberLocked(g, m, "session timeout")
		}
	}

	switch g.state {
	case statePreparingRebalance:
		switch {
		case g.delayPhase && !now.Before(g.delayDeadline):
			if g.newMemberAdded && g.delayRemaining > 0 {
				d := min(c.initialDelay, g.delayRemaining)
				g.delayDeadline = now.Add(d)
				g.delayRemaining -= d
				g.newMemberAdded = false
			} else {
				c.completeJoinLocked(g)
			}
		case !g.delayPhase && !now.Before(g.rebalanceDeadline):
			c.completeJoinLocked(g)
		default:
			// Pending members may just have expired above.
			c.maybeCompleteJoinLocked(g)
		}
	case stateCompletingRebalance, stateStable:
		if len(g.pendingSync) == 0 || now.Before(g.syncDeadline) {
			return
		}
		for id := range g.pendingSync {
			if m := g.members[id]; m != nil {
				c.logger.Info("group member removed", "group", g.name, "member", id,
					"reason", "no SyncGroup within the rebalance timeout")
				c.dropMemberLocked(g, m, kerr.UnknownMemberID.Code)
			}
		}
		g.pendingSync = nil
		c.prepareRebalanceLocked(g, "members failed to sync")
	}
}
