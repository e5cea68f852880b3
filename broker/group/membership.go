package group

import (
	"bytes"
	"context"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinParams is a JoinGroupRequest normalized for its version.
type joinParams struct {
	version  int16
	memberID string
	joinSpec
}

// JoinGroup handles a JoinGroup request (v0-v9). It blocks until the
// group's join phase completes, the ctx is cancelled (REBALANCE_IN_PROGRESS)
// or the coordinator closes (COORDINATOR_NOT_AVAILABLE). The client id and
// host are taken from ctx (see WithClient).
func (c *Coordinator) JoinGroup(ctx context.Context, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.MemberID = req.MemberID
	fail := func(e *kerr.Error) *kmsg.JoinGroupResponse {
		resp.ErrorCode = e.Code
		return resp
	}
	if req.Group == "" {
		return fail(kerr.InvalidGroupID)
	}
	ci := clientFrom(ctx)
	p := &joinParams{
		version:  req.Version,
		memberID: strings.Clone(req.MemberID),
		joinSpec: joinSpec{
			clientID:       ci.id,
			clientHost:     ci.host,
			sessionTimeout: time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
			protocolType:   strings.Clone(req.ProtocolType),
		},
	}
	if p.sessionTimeout < c.minSession || p.sessionTimeout > c.maxSession {
		return fail(kerr.InvalidSessionTimeout)
	}
	// v0 has no rebalance timeout: Kafka uses the session timeout.
	p.rebalanceTimeout = p.sessionTimeout
	if req.Version >= 1 && req.RebalanceTimeoutMillis > 0 {
		p.rebalanceTimeout = time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	}
	if req.Version >= 5 && req.InstanceID != nil {
		p.instanceID = strings.Clone(*req.InstanceID)
	}
	// The broker may decode requests without copying (strings and
	// slices aliasing its read buffer) and reuse that buffer once we
	// return, while the group keeps what it is given: copy it all.
	for _, rp := range req.Protocols {
		p.protocols = append(p.protocols, protocol{name: strings.Clone(rp.Name), metadata: bytes.Clone(rp.Metadata)})
	}

	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return fail(kerr.CoordinatorNotAvailable)
	}
	g := c.mu.groups[req.Group]
	if g == nil {
		if p.memberID != "" {
			c.mu.Unlock()
			return fail(kerr.UnknownMemberID)
		}
		g = newGroup(strings.Clone(req.Group))
		c.mu.groups[g.name] = g
	}
	w := c.joinLocked(g, p, resp)
	if w == nil && g.pristineLocked() {
		// The join that created the group failed: do not leave an
		// empty group behind for ListGroups to show.
		delete(c.mu.groups, g.name)
	}
	c.mu.Unlock()
	c.kickJanitor()
	if w == nil {
		return resp
	}

	select {
	case <-w.done:
		return resp
	case <-ctx.Done():
		return c.abandonJoin(g, w, kerr.RebalanceInProgress.Code)
	case <-c.closing:
		return c.abandonJoin(g, w, kerr.CoordinatorNotAvailable.Code)
	}
}

// abandonJoin detaches a JoinGroup call whose caller stops waiting. The
// race with completion is settled under mu: completion detaches the waiter
// and closes done under mu, so if done is still open here nobody else will
// touch resp and the call can answer with code; if it is closed, resp is
// complete and is returned as is.
func (c *Coordinator) abandonJoin(g *group, w *joinWaiter, code int16) *kmsg.JoinGroupResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.answered() {
		return w.resp
	}
	m := w.m
	m.join = nil
	w.resp.ErrorCode = code
	close(w.done)
	// A member that never made it into a generation has nothing to come
	// back to: drop it now instead of letting it hold up the rebalance
	// until the deadline. (Still a member of g: a removal would have
	// closed done.)
	if m.isNew && !c.mu.closed && g.members[m.id] == m {
		c.removeMemberLocked(g, m, "join abandoned by client")
	}
	return w.resp
}

// joinLocked runs the join state machine. It returns a waiter if the call
// must block, or nil if resp is already complete.
func (c *Coordinator) joinLocked(g *group, p *joinParams, resp *kmsg.JoinGroupResponse) *joinWaiter {
	if g.state == stateDead {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return nil
	}
	if !g.supportsProtocolsLocked(p.protocolType, p.protocols) {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return nil
	}
	if p.memberID == "" {
		return c.joinNewMemberLocked(g, p, resp)
	}
	return c.joinKnownMemberLocked(g, p, resp)
}

func (c *Coordinator) joinNewMemberLocked(g *group, p *joinParams, resp *kmsg.JoinGroupResponse) *joinWaiter {
	if p.instanceID != "" {
		id := newMemberID(p.instanceID)
		if old, ok := g.static[p.instanceID]; ok {
			return c.replaceStaticMemberLocked(g, old, id, p, resp)
		}
		// Static members skip MEMBER_ID_REQUIRED: the instance id
		// already identifies them across retries.
		return c.addMemberLocked(g, id, p, resp)
	}
	id := newMemberID(p.clientID)
	if p.version >= 4 {
		// KIP-394: hand out the id and make the client come back with
		// it, so that clients retrying joins do not pile up members.
		g.pending[id] = c.now().Add(p.sessionTimeout)
		resp.MemberID = id
		resp.ErrorCode = kerr.MemberIDRequired.Code
		return nil
	}
	return c.addMemberLocked(g, id, p, resp)
}

func (c *Coordinator) joinKnownMemberLocked(g *group, p *joinParams, resp *kmsg.JoinGroupResponse) *joinWaiter {
	if _, ok := g.pending[p.memberID]; ok {
		delete(g.pending, p.memberID)
		if p.instanceID != "" {
			if _, taken := g.static[p.instanceID]; taken {
				resp.ErrorCode = kerr.FencedInstanceID.Code
				c.maybeCompleteJoinLocked(g)
				return nil
			}
		}
		return c.addMemberLocked(g, p.memberID, p, resp)
	}
	var inst *string
	if p.instanceID != "" {
		inst = &p.instanceID
	}
	if g.staticFencedLocked(inst, p.memberID) {
		resp.ErrorCode = kerr.FencedInstanceID.Code
		return nil
	}
	m := g.members[p.memberID]
	if m == nil || (inst != nil && g.static[p.instanceID] == "") {
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return nil
	}
	switch g.state {
	case statePreparingRebalance:
		c.updateMemberLocked(m, p)
		w := c.attachJoinLocked(m, resp)
		c.maybeCompleteJoinLocked(g)
		return w
	case stateCompletingRebalance:
		if m.matches(p.protocols) {
			// The member lost our JoinGroup response and asks again:
			// answer with the generation being completed.
			m.lastSeen = c.now()
			g.fillJoinLocked(m, resp)
			return nil
		}
		c.updateMemberLocked(m, p)
		w := c.attachJoinLocked(m, resp)
		c.prepareRebalanceLocked(g, "member changed protocols")
		return w
	case stateStable:
		if m.id != g.leader && m.matches(p.protocols) {
			// A follower with nothing new: it only needs the
			// current generation to SyncGroup again.
			m.lastSeen = c.now()
			g.fillJoinLocked(m, resp)
			return nil
		}
		// The leader rejoining forces a rebalance even with the same
		// metadata: it is how a consumer leader reacts to changes
		// that metadata does not show (new partitions, topics
		// matching its regex).
		c.updateMemberLocked(m, p)
		w := c.attachJoinLocked(m, resp)
		reason := "member changed protocols"
		if m.id == g.leader {
			reason = "leader rejoined"
		}
		c.prepareRebalanceLocked(g, reason)
		return w
	default:
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return nil
	}
}

func (c *Coordinator) updateMemberLocked(m *member, p *joinParams) {
	m.protocols = p.protocols
	m.protocolType = p.protocolType
	m.sessionTimeout = p.sessionTimeout
	m.rebalanceTimeout = p.rebalanceTimeout
	if p.clientID != "" || p.clientHost != "" {
		m.clientID, m.clientHost = p.clientID, p.clientHost
	}
	m.lastSeen = c.now()
}

// addMemberLocked adds a new member and rebalances (or, if a rebalance is
// already under way, joins it).
func (c *Coordinator) addMemberLocked(g *group, id string, p *joinParams, resp *kmsg.JoinGroupResponse) *joinWaiter {
	m := &member{id: id, joinSpec: joinSpec{instanceID: p.instanceID}, seq: g.nextSeq, isNew: true}
	g.nextSeq++
	c.updateMemberLocked(m, p)
	if len(g.members) == 0 {
		g.protocolType = p.protocolType
	}
	g.members[id] = m
	if m.static() {
		g.static[m.instanceID] = id
	}
	if g.leader == "" {
		g.leader = id
	}
	c.logger.Info("group member added", "group", g.name, "member", id, "instance", m.instanceID,
		"client", m.clientID, "host", m.clientHost)
	w := c.attachJoinLocked(m, resp)
	if g.state == statePreparingRebalance {
		g.newMemberAdded = true
		c.maybeCompleteJoinLocked(g)
	} else {
		c.prepareRebalanceLocked(g, "new member joined")
	}
	return w
}

// replaceStaticMemberLocked handles a known instance id joining with an
// empty member id: a restarted static member. It takes over the old
// member's place (and assignment) under a new member id; the old id is
// fenced. In a Stable group whose selected protocol would not change this
// needs no rebalance, which is the point of static membership (KIP-345).
func (c *Coordinator) replaceStaticMemberLocked(g *group, oldID, newID string, p *joinParams, resp *kmsg.JoinGroupResponse) *joinWaiter {
	old := g.members[oldID]
	if old == nil {
		// The static map should never point at a missing member;
		// repair it rather than fail the join forever.
		delete(g.static, p.instanceID)
		return c.addMemberLocked(g, newID, p, resp)
	}
	prevLeader := g.leader
	c.finishJoinLocked(old, kerr.FencedInstanceID.Code)
	c.finishSyncLocked(old, kerr.FencedInstanceID.Code)
	m := &member{
		id:         newID,
		joinSpec:   joinSpec{instanceID: p.instanceID},
		seq:        old.seq,
		assignment: old.assignment,
		isNew:      old.isNew,
	}
	c.updateMemberLocked(m, p)
	delete(g.members, oldID)
	g.members[newID] = m
	g.static[p.instanceID] = newID
	if g.leader == oldID {
		g.leader = newID
	}
	if _, ok := g.pendingSync[oldID]; ok {
		delete(g.pendingSync, oldID)
		g.pendingSync[newID] = struct{}{}
	}
	c.logger.Info("group static member replaced", "group", g.name, "instance", p.instanceID,
		"old_member", oldID, "member", newID)

	switch g.state {
	case stateStable:
		if g.selectProtocolLocked() == g.protocol {
			g.fillJoinLocked(m, resp)
			// Report the leader as it was before the replacement: a
			// replaced leader that saw its own id as leader would
			// compute an assignment that a Stable group never
			// distributes. As a follower it just syncs and gets its
			// old assignment back.
			resp.LeaderID = prevLeader
			resp.Members = nil
			c.saveLocked(g)
			return nil
		}
		w := c.attachJoinLocked(m, resp)
		c.prepareRebalanceLocked(g, "static member rejoined with different protocols")
		return w
	case stateCompletingRebalance:
		// The leader may be assigning the old member id: rebalance so
		// that the assignment names the new one.
		w := c.attachJoinLocked(m, resp)
		c.prepareRebalanceLocked(g, "static member rejoined during rebalance")
		return w
	default:
		w := c.attachJoinLocked(m, resp)
		c.maybeCompleteJoinLocked(g)
		return w
	}
}

// SyncGroup handles a SyncGroup request (v0-v5). Followers block until the
// leader's assignment arrives, the ctx is cancelled (REBALANCE_IN_PROGRESS)
// or the coordinator closes (COORDINATOR_NOT_AVAILABLE).
func (c *Coordinator) SyncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	fail := func(e *kerr.Error) *kmsg.SyncGroupResponse {
		resp.ErrorCode = e.Code
		return resp
	}
	if req.Group == "" {
		return fail(kerr.InvalidGroupID)
	}
	var inst *string
	if req.Version >= 3 {
		inst = req.InstanceID
	}

	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return fail(kerr.CoordinatorNotAvailable)
	}
	w, code := c.syncLocked(req, inst, resp)
	c.mu.Unlock()
	if code != nil {
		return fail(code)
	}
	if w != nil {
		select {
		case <-w.done:
		case <-ctx.Done():
			resp = c.abandonSync(w, kerr.RebalanceInProgress.Code)
		case <-c.closing:
			resp = c.abandonSync(w, kerr.CoordinatorNotAvailable.Code)
		}
	}
	if c.durableSync && resp.ErrorCode == 0 {
		if e := c.waitSaved(ctx, req.Group, req.Generation); e != nil {
			return fail(e)
		}
	}
	return resp
}

// abandonSync detaches a SyncGroup call whose caller stops waiting; see
// abandonJoin for why this is race free. The member stays: it has a
// generation and its session timeout decides its fate.
func (c *Coordinator) abandonSync(w *syncWaiter, code int16) *kmsg.SyncGroupResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !w.answered() {
		w.m.sync = nil
		w.resp.ErrorCode = code
		close(w.done)
	}
	return w.resp
}

func (c *Coordinator) syncLocked(req *kmsg.SyncGroupRequest, inst *string, resp *kmsg.SyncGroupResponse) (*syncWaiter, *kerr.Error) {
	g := c.mu.groups[req.Group]
	switch {
	case g == nil:
		return nil, kerr.UnknownMemberID
	case g.state == stateDead:
		return nil, kerr.CoordinatorNotAvailable
	case g.staticFencedLocked(inst, req.MemberID):
		return nil, kerr.FencedInstanceID
	}
	m := g.members[req.MemberID]
	switch {
	case m == nil:
		return nil, kerr.UnknownMemberID
	case req.Generation != g.generation:
		return nil, kerr.IllegalGeneration
	case req.Version >= 5 && req.ProtocolType != nil && *req.ProtocolType != g.protocolType:
		return nil, kerr.InconsistentGroupProtocol
	case req.Version >= 5 && req.Protocol != nil && *req.Protocol != g.protocol:
		return nil, kerr.InconsistentGroupProtocol
	}
	switch g.state {
	case statePreparingRebalance:
		return nil, kerr.RebalanceInProgress
	case stateCompletingRebalance:
		delete(g.pendingSync, m.id)
		m.lastSeen = c.now()
		w := c.attachSyncLocked(m, resp)
		if m.id == g.leader {
			c.completeSyncLocked(g, req.GroupAssignment)
		}
		return w, nil
	case stateStable:
		delete(g.pendingSync, m.id)
		m.lastSeen = c.now()
		resp.ProtocolType = kmsg.StringPtr(g.protocolType)
		resp.Protocol = kmsg.StringPtr(g.protocol)
		resp.MemberAssignment = m.assignment
		return nil, nil
	default:
		return nil, kerr.UnknownMemberID
	}
}

// completeSyncLocked installs the leader's assignment, answers every
// blocked SyncGroup and makes the group Stable. Members the leader left out
// get an empty assignment, as in Kafka.
func (c *Coordinator) completeSyncLocked(g *group, assignments []kmsg.SyncGroupRequestGroupAssignment) {
	for _, m := range g.members {
		m.assignment = []byte{}
	}
	for _, a := range assignments {
		if m := g.members[a.MemberID]; m != nil {
			m.assignment = bytes.Clone(a.MemberAssignment)
		}
	}
	g.state = stateStable
	for _, m := range g.members {
		if w := m.sync; w != nil {
			m.sync = nil
			w.resp.ErrorCode = 0
			w.resp.ProtocolType = kmsg.StringPtr(g.protocolType)
			w.resp.Protocol = kmsg.StringPtr(g.protocol)
			w.resp.MemberAssignment = m.assignment
			close(w.done)
		}
	}
	c.saveLocked(g)
	c.logger.Info("group stable", "group", g.name, "generation", g.generation, "members", len(g.members))
}

// Heartbeat handles a Heartbeat request (v0-v4).
func (c *Coordinator) Heartbeat(req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	var inst *string
	if req.Version >= 3 {
		inst = req.InstanceID
	}
	g, code := c.lockGroup(req.Group)
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	defer c.mu.Unlock()
	var m *member
	if g != nil {
		m = g.members[req.MemberID]
	}
	switch {
	case g == nil:
		resp.ErrorCode = kerr.UnknownMemberID.Code
	case g.state == stateDead:
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
	case g.staticFencedLocked(inst, req.MemberID):
		resp.ErrorCode = kerr.FencedInstanceID.Code
	case m == nil:
		resp.ErrorCode = kerr.UnknownMemberID.Code
	case req.Generation != g.generation:
		resp.ErrorCode = kerr.IllegalGeneration.Code
	case g.state == statePreparingRebalance:
		m.lastSeen = c.now()
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	case g.state == stateCompletingRebalance, g.state == stateStable:
		m.lastSeen = c.now()
	default:
		resp.ErrorCode = kerr.UnknownMemberID.Code
	}
	return resp
}

// LeaveGroup handles a LeaveGroup request: v0-v2 name one member, v3+ a
// batch of members by member id and/or instance id with an error each.
func (c *Coordinator) LeaveGroup(req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	leaving := req.Members
	if req.Version < 3 {
		leaving = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	// For v0-v2 the single member's error is the response's error.
	defer func() {
		if req.Version < 3 {
			if len(resp.Members) > 0 && resp.ErrorCode == 0 {
				resp.ErrorCode = resp.Members[0].ErrorCode
			}
			resp.Members = nil
		}
	}()
	g, code := c.lockGroup(req.Group)
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	defer c.mu.Unlock()
	if g != nil && g.state == stateDead {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	for _, lm := range leaving {
		r := kmsg.NewLeaveGroupResponseMember()
		r.MemberID = lm.MemberID
		r.InstanceID = lm.InstanceID
		r.ErrorCode = c.leaveOneLocked(g, &r)
		resp.Members = append(resp.Members, r)
	}
	return resp
}

// leaveOneLocked removes one leaving member; r carries its identity (the
// member id is filled in when resolved from the instance id).
func (c *Coordinator) leaveOneLocked(g *group, r *kmsg.LeaveGroupResponseMember) int16 {
	if g == nil {
		return kerr.UnknownMemberID.Code
	}
	if r.MemberID == "" && r.InstanceID != nil {
		id, ok := g.static[*r.InstanceID]
		if !ok {
			return kerr.UnknownMemberID.Code
		}
		r.MemberID = id
	}
	if g.staticFencedLocked(r.InstanceID, r.MemberID) {
		return kerr.FencedInstanceID.Code
	}
	if _, ok := g.pending[r.MemberID]; ok {
		delete(g.pending, r.MemberID)
		c.maybeCompleteJoinLocked(g)
		return 0
	}
	m := g.members[r.MemberID]
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	c.removeMemberLocked(g, m, "left the group")
	return 0
}
