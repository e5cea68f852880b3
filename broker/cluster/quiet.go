package cluster

// Quiet groups. Coalesced and paced heartbeats (transport.go) still cost
// each idle data group a heartbeat to each follower a few times a second:
// a round trip through the link, the follower's raft heartbeat handler
// and the scheduler wake-ups on both brokers, most of an idle broker's
// CPU with hundreds of groups (a CPU profile of an idle broker with 300
// groups: serveHeartbeats, raft's heartbeat loop, the link's syscalls
// and the scheduler). A group with nothing to replicate goes quiet:
//
//   - Follower side: a replica that has had no news (entries, a newer
//     commit index, a vote request, a TimeoutNow, a snapshot) for
//     quietAfter heartbeat timeouts, while its leader's broker is heard
//     from (its heartbeat link sent a frame within a heartbeat timeout),
//     reloads its raft with quietTimeout heartbeat and election timeouts.
//     It wakes (the normal timeouts, and raft checks its last contact at
//     once) on news, when it stops being a follower, when it has no
//     leader, and when the leader's broker has not been heard from for
//     one to two heartbeat timeouts (random, as raft's follower timer):
//     a SIGSTOPped or cut-off leader is replaced as fast as before, by an
//     ordinary raft election.
//   - Leader side: once a follower has answered in the same term, over
//     the same link connection, with no broker seen to go or come back,
//     for quietAfter+quietLeaderExtra heartbeat timeouts, and nothing new
//     was sent to it for as long, the transport answers the group's
//     heartbeats to it with the follower's last answer while the link to
//     its broker answers frames (so the leader's lease holds exactly
//     while the follower's broker is reachable), at most every half
//     heartbeat timeout, and sends a real one every quietReal timeouts.
//     The extra wait makes sure the follower has gone quiet first (it
//     counts from an earlier moment: it received what the leader then
//     saw acknowledged).
//   - Every link sends an empty frame when it has sent nothing for a
//     quarter of a heartbeat timeout: that is how both ends know the
//     other broker is there while its groups are quiet.
//
// Safety is raft's: nothing here grants a vote or commits an entry; a
// leader only keeps its lease while the follower's broker answers, and a
// follower only waits longer before electing while the leader's broker
// is heard from.

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// In heartbeat timeouts of the group.
const (
	quietAfter       = 5
	quietLeaderExtra = 3
	quietTimeout     = 20
	quietReal        = 5
)

// heard records that broker addr's heartbeat link sent a frame now.
func (n *Node) heard(addr string) {
	now := time.Now()
	n.heardFrom.Lock()
	if n.heardFrom.m == nil {
		n.heardFrom.m = map[string]time.Time{}
	}
	n.heardFrom.m[addr] = now
	n.heardFrom.Unlock()
}

// heardWithin: broker addr's heartbeat link sent a frame within d before
// now.
func (n *Node) heardWithin(addr string, d time.Duration, now time.Time) bool {
	n.heardFrom.Lock()
	at, ok := n.heardFrom.m[addr]
	n.heardFrom.Unlock()
	return ok && now.Sub(at) < d
}

// quietLoop quiets and wakes the follower replicas of this broker (see
// the file comment) until done is closed. It looks at every group once a
// second, and every quietTick while a broker heard from before has been
// silent for a heartbeat timeout (its quiet followers must wake in
// time); with thousands of groups a pass is not free. In between it
// sleeps until the first moment a broker could count as silent, so an
// idle broker whose peers are heard from wakes about once a second.
func (n *Node) quietLoop(done <-chan struct{}) {
	t := time.NewTimer(quietTick)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		now := time.Now()
		silent, next := n.silence(now)
		if silent || now.Sub(last) >= time.Second {
			last = now
			for _, gt := range n.transports() {
				gt.checkQuiet(now)
			}
		}
		wait := quietTick
		if !silent {
			wake := last.Add(time.Second)
			if !next.IsZero() && next.Before(wake) {
				wake = next
			}
			wait = max(wake.Sub(now), quietTick)
		}
		t.Reset(wait)
	}
}

// quietTick bounds how late a quiet follower wakes after its leader's
// broker went silent.
const quietTick = 100 * time.Millisecond

// silence reports whether a broker heard from within the last
// quietTimeout heartbeat timeouts has not been heard from for one (the
// shortest of the groups'), and else when the first of them will have
// been unheard that long (zero: none); the older ones are forgotten (a
// broker gone for good).
func (n *Node) silence(now time.Time) (silent bool, next time.Time) {
	hb := time.Duration(n.quietHB.Load())
	if hb <= 0 {
		return false, time.Time{}
	}
	n.heardFrom.Lock()
	defer n.heardFrom.Unlock()
	for addr, at := range n.heardFrom.m {
		switch d := now.Sub(at); {
		case d >= quietTimeout*hb:
			delete(n.heardFrom.m, addr)
		case d >= hb:
			silent = true
		default:
			if due := at.Add(hb); next.IsZero() || due.Before(next) {
				next = due
			}
		}
	}
	return silent, next
}

// quietState is a data group's part in quieting (groupTransport.quiet).
type quietState struct {
	// hb is the group's heartbeat timeout; 0: the group never goes quiet.
	hb time.Duration
	mu sync.Mutex
	// busy is when the group last had news; on is set while raft runs
	// with the quiet timeouts (follower side).
	busy time.Time
	on   bool
	// silence is how long the leader's broker may go unheard before a
	// quiet follower wakes: random between one and two heartbeat
	// timeouts, as raft's own follower timer, so the followers of a
	// group whose leader went silent do not all stand at once and
	// split the vote.
	silence time.Duration
}

func (t *groupTransport) noteBusy() {
	t.quiet.mu.Lock()
	t.quiet.busy = time.Now()
	t.quiet.mu.Unlock()
}

func (t *groupTransport) busyAt() time.Time {
	t.quiet.mu.Lock()
	defer t.quiet.mu.Unlock()
	return t.quiet.busy
}

// checkQuiet quiets the follower replica or wakes it; see the file
// comment.
func (t *groupTransport) checkQuiet(now time.Time) {
	hb := t.quiet.hb
	r := t.raft.Load()
	if hb <= 0 || r == nil || t.node == nil {
		return
	}
	if g := t.owner.Load(); g != nil {
		if as, dormant := g.sleptState(); dormant {
			// A dormant follower whose leader's broker went silent
			// wakes, and the first of the other voters by node id
			// stands at once (the others vote for it), as the
			// watcher's elections go (watch.go).
			self := raft.ServerID(strconv.Itoa(int(t.node.cfg.NodeID)))
			if as.leader != self && (as.leaderAddr == "" || !t.node.heardWithin(string(as.leaderAddr), hb+rand.N(hb), now)) {
				g.wakeForRPC()
				if firstVoter(as.voters, as.leader) == self {
					t.timeoutNow()
				}
			}
			return
		}
	}
	t.quiet.mu.Lock()
	on, busy, silence := t.quiet.on, t.quiet.busy, t.quiet.silence
	t.quiet.mu.Unlock()
	if r.State() != raft.Follower {
		if on {
			t.setQuiet(false)
		}
		return
	}
	addr, _ := r.LeaderWithID()
	switch {
	case on && (addr == "" || !t.node.heardWithin(string(addr), silence, now)):
		t.setQuiet(false)
	case !on && addr != "" && t.node.heardWithin(string(addr), hb, now) && now.Sub(busy) >= quietAfter*hb:
		t.setQuiet(true)
	}
}

// setQuiet reloads the group's raft with the quiet timeouts (on) or the
// normal ones. Waking makes raft check its last contact at once.
func (t *groupTransport) setQuiet(on bool) {
	r := t.raft.Load()
	if t.quiet.hb <= 0 || r == nil {
		return
	}
	t.quiet.mu.Lock()
	defer t.quiet.mu.Unlock()
	if t.quiet.on == on {
		return
	}
	rc := r.ReloadableConfig()
	d := t.quiet.hb
	if on {
		d *= quietTimeout
	}
	rc.HeartbeatTimeout, rc.ElectionTimeout = d, d
	if err := r.ReloadConfig(rc); err != nil {
		return
	}
	t.quiet.on = on
	t.quiet.silence = t.quiet.hb + rand.N(t.quiet.hb)
}

// leaderMark is a follower's term and leader at one moment.
type leaderMark struct {
	term     uint64
	addr, id string
}

func (t *groupTransport) leaderNow() leaderMark {
	r := t.raft.Load()
	if r == nil {
		return leaderMark{}
	}
	addr, id := r.LeaderWithID()
	return leaderMark{term: r.CurrentTerm(), addr: string(addr), id: string(id)}
}

// wake is setQuiet(false) for news. Raft checks its last contact as
// soon as it has the normal timeouts, and a quiet follower last heard
// from its leader up to quietReal timeouts ago. So if the news left its
// term and leader as they were before (pre: leaderNow before raft took
// it), that counts as a heartbeat from the leader first:
//
//   - news such as another replica's pre-vote (the leader's broker heard
//     from) would otherwise make it drop a live leader and stand too;
//   - a TimeoutNow (elect: raft takes it right after, pre is leaderNow
//     then) would otherwise race with that check: when the check came
//     first, raft stood on its own, an ordinary candidate asking for
//     pre-votes that a follower with a live leader refuses, and a
//     candidate ignores a TimeoutNow, so a leadership transfer to a
//     quiet follower failed (leadership transfer timeout). The
//     heartbeat is from the leader it follows, in its own term: it
//     stands at once on the TimeoutNow anyway.
func (t *groupTransport) wake(elect bool, pre leaderMark) {
	t.noteBusy()
	t.quiet.mu.Lock()
	on := t.quiet.on
	t.quiet.mu.Unlock()
	if !on {
		return
	}
	if r := t.raft.Load(); r != nil && t.node != nil {
		now := t.leaderNow()
		if fn := t.hbFn.Load(); fn != nil && now.addr != "" && now == pre && (elect || t.node.heardWithin(now.addr, t.quiet.hb, time.Now())) {
			req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(now.id), Addr: []byte(now.addr)},
				Term: now.term, Leader: []byte(now.addr)}
			(*fn)(raft.RPC{Command: req, RespChan: make(chan raft.RPCResponse, 1)})
		}
	}
	t.setQuiet(false)
}

// rpcNews reports whether an RPC from a peer is news to a follower (see
// the file comment); heartbeats and empty AppendEntries repeating the
// commit index it has are not. elect: a TimeoutNow, which makes it a
// candidate at once (with the normal election timeout, so it wakes
// before raft takes it).
func (t *groupTransport) rpcNews(rpc raft.RPC) (news, elect bool) {
	if t.quiet.hb <= 0 {
		return false, false
	}
	switch c := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		if isHeartbeat(c) || len(c.Entries) > 0 {
			return len(c.Entries) > 0, false
		}
		r := t.raft.Load()
		return r == nil || c.LeaderCommitIndex > r.CommitIndex(), false
	case *raft.TimeoutNowRequest:
		return true, true
	default:
		return true, false
	}
}

// answerQuiet answers a heartbeat of a quiet leader to target from the
// follower's last answer (see the file comment), waiting until half a
// heartbeat timeout after the previous answer; false: send it.
func (t *groupTransport) answerQuiet(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	hb := t.quiet.hb
	if hb <= 0 || t.hub == nil || t.node == nil {
		return false
	}
	quietFor := (quietAfter + quietLeaderExtra) * hb
	ok := func(now time.Time) (heartbeatMark, bool) {
		t.answered.Lock()
		m, found := t.answered.m[target]
		t.answered.Unlock()
		if !found || m.term != args.Term || m.peers != t.peerChanges() || now.Sub(m.at) >= quietReal*hb ||
			now.Sub(m.since) < quietFor || now.Sub(t.busyAt()) < quietFor || !t.hub.alive(target, m.gen, hb, now) {
			return m, false
		}
		return m, true
	}
	hurry := *t.hurry.Load()
	m, good := ok(time.Now())
	if !good || t.hurried() {
		return false
	}
	if wait := time.Until(m.last.Add(hb / 2)); wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-t.detached:
			timer.Stop()
			return false
		case <-hurry:
			timer.Stop()
			return false
		}
		if m2, good := ok(time.Now()); !good || m2.at != m.at {
			return false
		}
	}
	t.answered.Lock()
	cur, found := t.answered.m[target]
	if !found || cur.at != m.at {
		t.answered.Unlock()
		return false
	}
	cur.last = time.Now()
	t.answered.m[target] = cur
	t.answered.Unlock()
	*resp = m.resp
	if t.node.stats != nil {
		t.node.stats.quietHeartbeats.Inc()
	}
	return true
}

// alive: the link to target answered a frame within d before now on
// connection gen.
func (h *heartbeatHub) alive(target raft.ServerAddress, gen uint64, d time.Duration, now time.Time) bool {
	h.mu.Lock()
	l := h.mu.peers[target]
	h.mu.Unlock()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen == gen && !l.lastOK.IsZero() && now.Sub(l.lastOK) < d
}

// setPing makes every link send an empty frame after d without one (the
// shortest asked for wins).
func (h *heartbeatHub) setPing(d time.Duration) {
	h.mu.Lock()
	if h.ping == 0 || d < h.ping {
		h.ping = d
	}
	h.mu.Unlock()
}

func (h *heartbeatHub) pingEvery() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ping
}

// resetQuiet forgets the follower's quiet state: a new raft instance
// (dormant.go) starts with the normal timeouts.
func (t *groupTransport) resetQuiet() {
	t.quiet.mu.Lock()
	t.quiet.on = false
	t.quiet.busy = time.Now()
	t.quiet.mu.Unlock()
}

// firstVoter is the voter with the lowest node id but not.
func firstVoter(voters []raft.ServerID, not raft.ServerID) raft.ServerID {
	var first raft.ServerID
	low := -1
	for _, v := range voters {
		if id, err := strconv.Atoi(string(v)); err == nil && v != not && (low < 0 || id < low) {
			first, low = v, id
		}
	}
	return first
}
