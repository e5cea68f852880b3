package cluster

// The raft transport of every group (the controller and each replicated
// partition). It is hashicorp/raft's NetworkTransport over the group's
// mux stream layer with two changes:
//
//   - Heartbeats are coalesced per destination broker. An idle raft leader
//     sends each follower of each group a heartbeat every tenth of the
//     heartbeat timeout; with hundreds of groups that was most of a
//     broker's idle CPU (a CPU profile of an idle broker with 300 groups:
//     two thirds in the per-RPC write/read syscalls, msgpack encoding and
//     the scheduler wake-ups of NetworkTransport's heartbeat RPCs). Here a
//     heartbeat is queued on its destination broker's link; the link's
//     goroutine sends everything queued in one frame at most every
//     Config.HeartbeatWindow and answers each group's call from the
//     frame's reply. The receiving broker hands each heartbeat to its
//     group's raft through the heartbeat fast path (SetHeartbeatHandler),
//     exactly as NetworkTransport would, and replies with all answers in
//     one frame. Every other RPC (entries, votes, snapshots) is
//     unchanged.
//   - Heartbeats of a data group are paced: raft's leader sends one to
//     each follower every tenth of the heartbeat timeout (hard-wired in
//     hashicorp/raft), but a heartbeat to a follower that answered the
//     group's previous one less than groupTransport.hbEvery ago (a
//     quarter of the timeout) in the same term is held until that much
//     time has passed, and goes out with the link's next frame. Raft's
//     heartbeat goroutine waits in the call meanwhile, so an idle group
//     costs about four heartbeats a second per follower instead of six
//     to ten, and since the held heartbeats of all groups come due
//     together, a link sends a few large frames a second instead of one
//     per window (most of an idle broker's CPU was the wake-ups and
//     syscalls of those frames). The first heartbeat of a term, and one
//     after a failure, go out at once. The gap a follower sees stays
//     under a quarter of the timeout plus the round trip, well inside
//     its election timeout (one to two timeouts) and the leader's lease.
//   - An idle data group's empty AppendEntries are answered here. Raft's
//     leader sends each follower one every CommitTimeout (see group.go)
//     whether or not anything changed; one that repeats what the follower
//     already acknowledged in the same term (the same previous entry, no
//     newer commit index) tells it nothing, so the transport answers it
//     from the follower's last answer instead of sending it (each was an
//     RPC of its own over the session, most of an idle broker's CPU once
//     heartbeats were coalesced). One goes out anyway every
//     idleAppendEvery, and the next after any failure or after a broker
//     was seen to go away or come back (a restarted follower learns the
//     commit index again). Entries, and a newer commit index, always go
//     out at once.
//   - A data group with nothing to replicate goes quiet (quiet.go): its
//     leader's heartbeats are answered here from the follower's last
//     answer while the link to the follower's broker answers, and the
//     links send an empty frame after a quarter of a heartbeat timeout
//     without one, so each broker knows the other is there.
//   - The transport owns raft's RPC channel, so the node can hand a group
//     a TimeoutNow when it knows the group's leader is dead (see
//     watch.go): the follower starts an election at once instead of
//     waiting out its heartbeat timeout.
//
// Heartbeat frames (connection kind 3, both directions length-prefixed as
// in writeFrame; a frame may have no heartbeats):
//
//	request:  count u32, then per heartbeat: group u64, term u64,
//	          protocol version u8, id, addr, leader (each u16 length + bytes)
//	response: count u32, then per heartbeat: status u8 (0 ok, 1 error);
//	          ok: term u64, last log u64, flags u8 (1 success, 2 no retry
//	          backoff), protocol version u8, id, addr;
//	          error: message (u16 length + bytes)
//
// The answers are in the order of the request.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

const kindHeartbeat byte = 3 // a link carrying coalesced heartbeats

// maxHeartbeatsPerFrame bounds one frame (and what a peer can make us
// allocate while decoding one).
const maxHeartbeatsPerFrame = 1 << 16

// errHeartbeatLinkClosed is returned to heartbeats pending when the node
// shuts down.
var errHeartbeatLinkClosed = errors.New("heartbeat link closed")

// groupTransport is one raft group's transport; see the file comment.
type groupTransport struct {
	*raft.NetworkTransport
	group uint64
	hub   *heartbeatHub
	node  *Node // nil in tests of the transport alone
	// hbEvery paces the group's heartbeats (see the file comment); 0:
	// every heartbeat goes out with the next frame.
	hbEvery time.Duration
	// answered is, per follower, when and in which term it last
	// answered a heartbeat with success.
	answered struct {
		sync.Mutex
		m map[raft.ServerAddress]heartbeatMark
	}
	// appended is, per follower, what it last acknowledged to an
	// AppendEntries (see the file comment); only with hbEvery > 0.
	appended struct {
		sync.Mutex
		m map[raft.ServerAddress]appendMark
	}

	consumer chan raft.RPC
	// votes are the vote RPCs that came on vote streams (votes.go).
	votes chan raft.RPC
	hbFn  atomic.Pointer[func(raft.RPC)]
	// leaderCommit: see insync.go.
	leaderCommit atomic.Uint64
	raft         atomic.Pointer[raft.Raft]

	// quiet: see quiet.go.
	quiet quietState

	// dormant is set while the group's raft is shut down by Sleep
	// (dormant.go); an RPC then calls wakeFn before raft gets it. slept
	// tells an RPC waiting for the old instance that it is gone.
	// keepOpen makes Close a no-op while Sleep shuts raft down (raft
	// closes its transport).
	dormant, keepOpen atomic.Bool
	wakeFn            atomic.Pointer[func()]
	sleepFn           atomic.Pointer[func(term, last uint64, leader raft.ServerID) bool]
	owner             atomic.Pointer[Group] // nil for the controller and in tests of the transport
	slept             chan struct{}

	closeOnce sync.Once
	closed    chan struct{}
	// detached is closed by detach (before raft shuts down).
	detachOnce sync.Once
	detached   chan struct{}
	// hurry is closed while Sleep shuts raft down, which waits for the
	// heartbeat goroutines: their heartbeats then go at once instead of
	// being paced or answered late (answerQuiet).
	hurry atomic.Pointer[chan struct{}]
	wg    sync.WaitGroup

	stream *StreamLayer // nil in tests of the transport alone
}

// detach closes the group's stream layer: RPCs in flight fail at once and
// no new ones start. Called before raft shuts down, which waits for its
// RPCs (a peer may hold one for up to its mux's hold time).
func (t *groupTransport) detach() {
	t.detachOnce.Do(func() { close(t.detached) })
	if t.stream != nil {
		_ = t.stream.Close()
	}
	if t.hub != nil {
		// Raft's shutdown waits for its heartbeat goroutines too.
		t.hub.sendHeld(t.group)
	}
}

// makeGroupTransport wraps a NetworkTransport for group; hub may be nil
// (heartbeats then go over the NetworkTransport as usual). It forwards
// nothing to raft before start, so the caller sets what that reads first.
func makeGroupTransport(inner *raft.NetworkTransport, group uint64, hub *heartbeatHub) *groupTransport {
	t := &groupTransport{NetworkTransport: inner, group: group, hub: hub, consumer: make(chan raft.RPC), votes: make(chan raft.RPC), closed: make(chan struct{}), detached: make(chan struct{}),
		slept: make(chan struct{}, 1)}
	t.quiet.busy = time.Now()
	hurry := make(chan struct{})
	t.hurry.Store(&hurry)
	return t
}

// hurryHeartbeats sends the group's held heartbeats now and makes new
// ones go at once until calmHeartbeats.
func (t *groupTransport) hurryHeartbeats() {
	close(*t.hurry.Load())
	if t.hub != nil {
		t.hub.sendHeld(t.group)
	}
}

func (t *groupTransport) calmHeartbeats() {
	hurry := make(chan struct{})
	t.hurry.Store(&hurry)
}

// hurried reports whether the group's heartbeats go at once.
func (t *groupTransport) hurried() bool {
	select {
	case <-*t.hurry.Load():
		return true
	default:
		return false
	}
}

// start starts the goroutine that forwards the NetworkTransport's RPCs
// and the vote streams' to raft.
func (t *groupTransport) start() {
	inner := t.NetworkTransport
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		in := inner.Consumer()
		for {
			var rpc raft.RPC
			select {
			case rpc = <-in:
			case rpc = <-t.votes:
			case <-t.closed:
				return
			}
			if a, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && a.LeaderCommitIndex > 0 {
				t.noteLeaderCommit(a.LeaderCommitIndex)
				capLeaderCommit(a)
			}
			news, elect := t.rpcNews(rpc)
			var pre leaderMark
			if elect {
				t.wake(true, t.leaderNow())
			} else if news {
				t.noteBusy()
				pre = t.leaderNow()
			}
		send:
			for {
				t.wakeIfDormant()
				select {
				case t.consumer <- rpc:
					break send
				case <-t.slept:
				case <-t.closed:
					return
				}
			}
			if news && !elect {
				t.wake(false, pre)
			}
		}
	}()
}

// capLeaderCommit keeps the commit index raft takes from an AppendEntries
// within the entries that request proves match the leader's log: up to
// its previous entry and the entries it carries. hashicorp/raft sets a
// follower's commit index to min(leader's commit, the follower's own last
// index); a follower whose log ends in entries of an old term (a replica
// restarted after it led) would then apply them when an AppendEntries
// with no entries and a higher commit index reaches it before the one
// that truncates them. The Raft paper's rule is min(leader's commit,
// index of the last new entry), which is what this makes of it; the
// in-sync check keeps the leader's own figure (noteLeaderCommit).
func capLeaderCommit(a *raft.AppendEntriesRequest) {
	a.LeaderCommitIndex = min(a.LeaderCommitIndex, a.PrevLogEntry+uint64(len(a.Entries)))
}

// Consumer is raft's RPC channel: the NetworkTransport's RPCs and the
// injected TimeoutNow.
func (t *groupTransport) Consumer() <-chan raft.RPC { return t.consumer }

// SetHeartbeatHandler keeps raft's heartbeat fast path for the coalesced
// heartbeats and passes it on for heartbeats that arrive as single RPCs.
func (t *groupTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		t.hbFn.Store(nil)
	} else {
		t.hbFn.Store(&cb)
	}
	t.NetworkTransport.SetHeartbeatHandler(cb)
}

// isHeartbeat: the shape of the AppendEntries raft sends from its
// heartbeat loop (the same test as NetworkTransport's fast path).
func isHeartbeat(a *raft.AppendEntriesRequest) bool {
	return a.Term != 0 && (a.Leader != nil || a.Addr != nil) && a.PrevLogEntry == 0 && a.PrevLogTerm == 0 &&
		len(a.Entries) == 0 && a.LeaderCommitIndex == 0
}

// AppendEntries sends heartbeats over the coalescing link, the rest as
// NetworkTransport RPCs.
func (t *groupTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.hub != nil && isHeartbeat(args) {
		if t.answerQuiet(target, args, resp) {
			return nil
		}
		var due time.Time
		if t.hbEvery > 0 && !t.hurried() {
			t.answered.Lock()
			if m, ok := t.answered.m[target]; ok && m.term == args.Term {
				due = m.at.Add(t.hbEvery)
			}
			t.answered.Unlock()
		}
		gen, err := t.hub.call(target, t.group, due, args, resp)
		if t.hbEvery > 0 {
			t.answered.Lock()
			if err == nil && resp.Success {
				if t.answered.m == nil {
					t.answered.m = map[raft.ServerAddress]heartbeatMark{}
				}
				now := time.Now()
				m := heartbeatMark{at: now, last: now, since: now, term: args.Term, gen: gen, peers: t.peerChanges(), resp: *resp}
				if p, ok := t.answered.m[target]; ok && p.term == m.term && p.gen == m.gen && p.peers == m.peers {
					m.since = p.since
				}
				t.answered.m[target] = m
			} else {
				delete(t.answered.m, target)
			}
			t.answered.Unlock()
		}
		return err
	}
	if t.hbEvery > 0 {
		if t.answerIdle(target, args, resp) {
			return nil
		}
		if t.appendNews(target, args) {
			t.noteBusy()
		}
	}
	if t.node != nil && t.node.awaitPeerUp(id, t) {
		// Raft made this request before the peer came back: its commit
		// index is from then, and the follower would take it for the
		// leader's current one (insync.go) and report in sync while it
		// still lags. Without it the follower learns the commit index
		// from the next AppendEntries, which raft makes after this one.
		args.LeaderCommitIndex = 0
	}
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if t.hbEvery > 0 {
		t.noteAppend(target, args, resp, err)
	}
	return err
}

// idleAppendEvery: an idle group's empty AppendEntries still goes out to
// a follower this often (a safety net: the follower's state is otherwise
// only assumed, see the file comment).
const idleAppendEvery = 15 * time.Second

// appendMark is what a follower acknowledged to its last successful
// AppendEntries: it holds the log up to last (of lastTerm) in term and
// knows the commit index commit.
type appendMark struct {
	at                   time.Time
	term, last, lastTerm uint64
	commit               uint64
	peers                uint64 // Node.peerChanges then
	resp                 raft.AppendEntriesResponse
}

func (t *groupTransport) peerChanges() uint64 {
	if t.node == nil {
		return 0
	}
	return t.node.peerChanges.Load()
}

// answerIdle answers an empty AppendEntries that would tell target nothing
// new from its last answer; false: it must be sent.
func (t *groupTransport) answerIdle(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if len(args.Entries) > 0 {
		return false
	}
	t.appended.Lock()
	defer t.appended.Unlock()
	m, ok := t.appended.m[target]
	if !ok || !t.repeats(m, args) || time.Since(m.at) >= idleAppendEvery {
		return false
	}
	*resp = m.resp
	return true
}

// repeats: an empty args tells a follower that acknowledged m nothing new.
func (t *groupTransport) repeats(m appendMark, args *raft.AppendEntriesRequest) bool {
	return len(args.Entries) == 0 && m.term == args.Term && m.last == args.PrevLogEntry && m.lastTerm == args.PrevLogTerm &&
		args.LeaderCommitIndex <= m.commit && m.peers == t.peerChanges()
}

// appendNews: args (about to be sent) tells target something new, so
// the group is busy (quiet.go); the idle ones sent every idleAppendEvery
// are not.
func (t *groupTransport) appendNews(target raft.ServerAddress, args *raft.AppendEntriesRequest) bool {
	t.appended.Lock()
	defer t.appended.Unlock()
	m, ok := t.appended.m[target]
	return !ok || !t.repeats(m, args)
}

// noteAppend records target's answer to an AppendEntries that was sent.
func (t *groupTransport) noteAppend(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error) {
	t.appended.Lock()
	defer t.appended.Unlock()
	if err != nil || !resp.Success || resp.Term != args.Term {
		delete(t.appended.m, target)
		return
	}
	m := appendMark{at: time.Now(), term: args.Term, last: args.PrevLogEntry, lastTerm: args.PrevLogTerm,
		commit: args.LeaderCommitIndex, peers: t.peerChanges(), resp: *resp}
	if n := len(args.Entries); n > 0 {
		m.last, m.lastTerm = args.Entries[n-1].Index, args.Entries[n-1].Term
	}
	if t.appended.m == nil {
		t.appended.m = map[raft.ServerAddress]appendMark{}
	}
	t.appended.m[target] = m
}

// timeoutNow hands raft a TimeoutNow as if the leader had sent one: a
// follower becomes a candidate at once and asks for votes with the
// leadership-transfer flag (voters grant it even while they still
// remember the old leader). It reports whether raft took it.
func (t *groupTransport) timeoutNow() bool {
	r := t.raft.Load()
	if r == nil {
		return false
	}
	// The normal election timeout for the election it starts.
	t.wake(true, t.leaderNow())
	_, id := r.LeaderWithID()
	rpc := raft.RPC{
		Command:  &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id)}},
		RespChan: make(chan raft.RPCResponse, 1),
	}
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	select {
	case t.consumer <- rpc:
		return true
	case <-t.closed:
	case <-timer.C:
	}
	return false
}

// wakeIfDormant wakes the group for an RPC if it sleeps (dormant.go).
func (t *groupTransport) wakeIfDormant() {
	if t.dormant.Load() {
		if fn := t.wakeFn.Load(); fn != nil {
			(*fn)()
		}
	}
}

// Close stops the forwarding goroutine and the NetworkTransport (not
// while the group goes dormant).
func (t *groupTransport) Close() error {
	if t.keepOpen.Load() {
		return nil
	}
	t.closeOnce.Do(func() { close(t.closed) })
	err := t.NetworkTransport.Close()
	t.wg.Wait()
	return err
}

// heartbeatHub is a node's side of the coalescing links: one per
// destination broker (by raft address), each with its own goroutine.
type heartbeatHub struct {
	mux     *Mux
	window  time.Duration
	timeout time.Duration
	stats   *transportStats

	mu struct {
		sync.Mutex
		peers  map[raft.ServerAddress]*heartbeatLink
		closed bool
	}
	// ping: a link sends an empty frame after this long without one
	// (0: never; setPing).
	ping   time.Duration
	closed chan struct{}
	wg     sync.WaitGroup
}

// heartbeatMark is a follower's last successful heartbeat answer: at
// (when), term, the link connection it came over (gen), Node.peerChanges
// then, and the answer; since is when the answers began to come in that
// term, connection and peerChanges; last is when a heartbeat was last
// answered, by the follower or from resp (quiet.go).
type heartbeatMark struct {
	at, last, since time.Time
	term, gen       uint64
	peers           uint64
	resp            raft.AppendEntriesResponse
}

type heartbeatCall struct {
	group uint64
	// due: the call is held until then (zero: not held).
	due  time.Time
	req  *raft.AppendEntriesRequest
	resp *raft.AppendEntriesResponse
	err  error
	gen  uint64 // the link connection that answered
	done chan struct{}
}

type heartbeatLink struct {
	addr raft.ServerAddress
	kick chan struct{}

	mu sync.Mutex
	// pending heartbeats, sent with the next frame; held ones go out
	// with the first frame at or after their due time.
	pending []*heartbeatCall
	held    []*heartbeatCall
	// heldKick wakes the goroutine when a call is held that is due
	// before every other held call.
	heldKick chan struct{}
	// conn is the open link (closed by heartbeatHub.close to unblock a
	// frame in flight); stopped is set when the goroutine has exited.
	conn    net.Conn
	stopped bool
	// gen counts the connections dialed; lastOK is when a frame was last
	// answered (quiet.go).
	gen    uint64
	lastOK time.Time
}

func newHeartbeatHub(mux *Mux, window time.Duration, stats *transportStats) *heartbeatHub {
	h := &heartbeatHub{mux: mux, window: window, timeout: 10 * time.Second, stats: stats, closed: make(chan struct{})}
	h.mu.peers = map[raft.ServerAddress]*heartbeatLink{}
	return h
}

// call queues one heartbeat for target and waits for its answer; it is
// held until due if that is in the future.
func (h *heartbeatHub) call(target raft.ServerAddress, group uint64, due time.Time, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (uint64, error) {
	h.mu.Lock()
	if h.mu.closed {
		h.mu.Unlock()
		return 0, errHeartbeatLinkClosed
	}
	l := h.mu.peers[target]
	if l == nil {
		l = &heartbeatLink{addr: target, kick: make(chan struct{}, 1), heldKick: make(chan struct{}, 1)}
		h.mu.peers[target] = l
		h.wg.Go(func() { h.run(l) })
	}
	h.mu.Unlock()
	c := &heartbeatCall{group: group, req: req, resp: resp, done: make(chan struct{})}
	held := time.Until(due) > 0
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return 0, errHeartbeatLinkClosed
	}
	first := false
	if held {
		c.due = due
		first = len(l.held) == 0 || due.Before(l.held[0].due)
		if first {
			// held[0] is the earliest; the order of the others does
			// not matter.
			l.held = append(l.held, nil)
			copy(l.held[1:], l.held)
			l.held[0] = c
		} else {
			l.held = append(l.held, c)
		}
	} else {
		l.pending = append(l.pending, c)
	}
	l.mu.Unlock()
	kick := l.kick
	if held {
		kick = nil
		if first {
			kick = l.heldKick
		}
	}
	if kick != nil {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	// The link goroutine answers every call it took, also when it stops,
	// so resp is never written after this returns.
	<-c.done
	return c.gen, c.err
}

// sendHeld sends group's held heartbeats with the links' next frames.
func (h *heartbeatHub) sendHeld(group uint64) {
	h.mu.Lock()
	links := h.linksLocked()
	h.mu.Unlock()
	for _, l := range links {
		l.mu.Lock()
		n := len(l.pending)
		l.pending = l.takeHeld(l.pending, func(c *heartbeatCall) bool { return c.group == group })
		moved := len(l.pending) > n
		l.mu.Unlock()
		if moved {
			select {
			case l.kick <- struct{}{}:
			default:
			}
		}
	}
}

// run is a link's goroutine: wait for a heartbeat, let more gather for
// the window, send them in one frame, hand out the answers.
func (h *heartbeatHub) run(l *heartbeatLink) {
	var conn net.Conn
	var rd *bufio.Reader
	defer func() {
		l.mu.Lock()
		l.stopped = true
		rest := append(l.pending, l.held...)
		l.pending, l.held = nil, nil
		if l.conn != nil {
			l.conn.Close()
		}
		l.mu.Unlock()
		for _, c := range rest {
			c.err = errHeartbeatLinkClosed
			close(c.done)
		}
	}()
	timer := time.NewTimer(h.window)
	timer.Stop()
	heldTimer := time.NewTimer(time.Hour)
	heldTimer.Stop()
	defer heldTimer.Stop()
	pingTimer := time.NewTimer(time.Hour)
	pingTimer.Stop()
	defer pingTimer.Stop()
	lastSent := time.Now()
	for {
		// Sleep until a heartbeat is queued or the earliest held one is
		// due.
		l.mu.Lock()
		var next time.Duration = -1
		if len(l.held) > 0 {
			next = max(time.Until(l.held[0].due), 0)
		}
		l.mu.Unlock()
		var heldC, pingC <-chan time.Time
		if next >= 0 {
			heldTimer.Reset(next)
			heldC = heldTimer.C
		}
		// An empty frame after ping without one (quiet.go).
		if p := h.pingEvery(); p > 0 {
			pingTimer.Reset(max(time.Until(lastSent.Add(p)), 0))
			pingC = pingTimer.C
		}
		ping := false
		select {
		case <-l.kick:
			heldTimer.Stop()
			pingTimer.Stop()
			timer.Reset(h.window)
			select {
			case <-timer.C:
			case <-h.closed:
				return
			}
		case <-heldC:
			pingTimer.Stop()
		case <-pingC:
			heldTimer.Stop()
			ping = true
		case <-l.heldKick:
			heldTimer.Stop()
			pingTimer.Stop()
			continue
		case <-h.closed:
			return
		}
		batch := l.takeBatch(h.window)
		if len(batch) == 0 && !ping {
			continue
		}
		lastSent = time.Now()
		var err error
		if conn == nil {
			// A connection of its own, not a stream of the session:
			// a frame and its answer then wake only the two ends,
			// not also the session's sender and reader on each side
			// (most of an idle broker's wake-ups were these frames).
			if conn, err = h.mux.connect(l.addr, h.timeout, []byte{kindHeartbeat}); err != nil {
				conn = nil
				err = fmt.Errorf("cannot open a heartbeat link to %s: %w", l.addr, err)
			} else {
				rd = bufio.NewReader(conn)
				l.mu.Lock()
				l.conn = conn
				l.gen++
				l.mu.Unlock()
				select {
				case <-h.closed: // close may have missed it
					conn.Close()
				default:
				}
			}
		}
		if err == nil {
			err = h.exchange(conn, rd, batch)
			l.mu.Lock()
			if err != nil {
				conn.Close()
				conn = nil
				l.conn = nil
			} else {
				l.lastOK = time.Now()
			}
			gen := l.gen
			l.mu.Unlock()
			for _, c := range batch {
				c.gen = gen
			}
		}
		for _, c := range batch {
			if err != nil && c.err == nil {
				c.err = err
			}
			close(c.done)
		}
	}
}

// takeBatch takes the pending heartbeats and the held ones due within
// slack (so that those coming due at nearly the same time share a frame).
func (l *heartbeatLink) takeBatch(slack time.Duration) []*heartbeatCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch := l.pending
	l.pending = nil
	if len(l.held) == 0 {
		return batch
	}
	limit := time.Now().Add(slack)
	return l.takeHeld(batch, func(c *heartbeatCall) bool { return !c.due.After(limit) })
}

// takeHeld appends the held calls that take selects to to and keeps the
// others held, the earliest first; l.mu is held.
func (l *heartbeatLink) takeHeld(to []*heartbeatCall, take func(*heartbeatCall) bool) []*heartbeatCall {
	rest := l.held[:0]
	earliest := 0
	for _, c := range l.held {
		if take(c) {
			to = append(to, c)
			continue
		}
		if len(rest) > 0 && c.due.Before(rest[earliest].due) {
			earliest = len(rest)
		}
		rest = append(rest, c)
	}
	clear(l.held[len(rest):])
	l.held = rest
	if len(rest) > 0 {
		rest[0], rest[earliest] = rest[earliest], rest[0]
	}
	return to
}

// exchange sends one frame of heartbeats and reads the answers into the
// calls (c.err set for a heartbeat the peer could not deliver).
func (h *heartbeatHub) exchange(conn net.Conn, rd *bufio.Reader, batch []*heartbeatCall) error {
	_ = conn.SetDeadline(time.Now().Add(h.timeout))
	reqs := make([]heartbeatReq, len(batch))
	for i, c := range batch {
		reqs[i] = heartbeatReq{group: c.group, req: c.req}
	}
	if err := writeFrame(conn, appendHeartbeatRequests(nil, reqs)); err != nil {
		return fmt.Errorf("cannot send heartbeats to %s: %w", conn.RemoteAddr(), err)
	}
	data, err := readFrame(rd)
	if err != nil {
		return fmt.Errorf("no heartbeat answers from %s: %w", conn.RemoteAddr(), err)
	}
	answers, err := decodeHeartbeatResponses(data)
	if err != nil {
		return fmt.Errorf("bad heartbeat answers from %s: %w", conn.RemoteAddr(), err)
	}
	if len(answers) != len(batch) {
		return fmt.Errorf("heartbeat link to %s: %d answers for %d heartbeats", conn.RemoteAddr(), len(answers), len(batch))
	}
	for i, a := range answers {
		if a.err != "" {
			batch[i].err = errors.New(a.err)
			continue
		}
		*batch[i].resp = a.resp
	}
	if h.stats != nil {
		h.stats.frames.Inc()
		h.stats.heartbeats.Add(float64(len(batch)))
	}
	return nil
}

// linksLocked copies the hub's links, for use once h.mu is released.
func (h *heartbeatHub) linksLocked() []*heartbeatLink {
	links := make([]*heartbeatLink, 0, len(h.mu.peers))
	for _, l := range h.mu.peers {
		links = append(links, l)
	}
	return links
}

func (h *heartbeatHub) close() {
	h.mu.Lock()
	if !h.mu.closed {
		h.mu.closed = true
		close(h.closed)
	}
	links := h.linksLocked()
	h.mu.Unlock()
	for _, l := range links {
		l.mu.Lock()
		if l.conn != nil {
			l.conn.Close()
		}
		l.mu.Unlock()
	}
	h.wg.Wait()
}

// serveHeartbeats answers a peer's heartbeat link until it closes or the
// node shuts down (runs on a mux goroutine).
func (n *Node) serveHeartbeats(conn net.Conn) {
	defer conn.Close()
	stop := n.closeOnShutdown(conn)
	defer stop()
	rd := bufio.NewReader(conn)
	respCh := make(chan raft.RPCResponse, 1)
	// peer is the sending broker's raft address, from the first
	// heartbeat on the link (its empty frames say it is there).
	var peer string
	for {
		data, err := readFrame(rd)
		if err != nil {
			return
		}
		reqs, err := decodeHeartbeatRequests(data)
		if err != nil {
			n.log.Warn("bad heartbeat frame; closing the link", "remote", conn.RemoteAddr().String(), "err", err)
			return
		}
		if peer == "" && len(reqs) > 0 {
			peer = string(reqs[0].req.Addr)
		}
		if peer != "" {
			n.heard(peer)
		}
		// A heartbeat that moves a group to a newer term, or makes a
		// candidate (or a deposed leader) of the group a follower again,
		// writes the term to disk first; it runs on its own goroutine so
		// that the others do not wait for that fsync. They would all be
		// late, their leaders would step down for want of a quorum, and
		// the elections that follow would bring more such heartbeats:
		// on a loaded machine that spread to most groups of a link. The
		// rest, nearly all, run here one after the other.
		answers := make([]heartbeatAnswer, len(reqs))
		var wg sync.WaitGroup
		for i, r := range reqs {
			if t := n.transport(r.group); t != nil {
				if rf := t.raft.Load(); rf != nil && (r.req.Term > rf.CurrentTerm() || rf.State() != raft.Follower) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						answers[i] = n.deliverHeartbeat(r, make(chan raft.RPCResponse, 1))
					}()
					continue
				}
			}
			answers[i] = n.deliverHeartbeat(r, respCh)
		}
		wg.Wait()
		_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := writeFrame(conn, appendHeartbeatResponses(nil, answers)); err != nil {
			return
		}
	}
}

// deliverHeartbeat runs one heartbeat through its group's raft heartbeat
// handler (which answers before it returns).
func (n *Node) deliverHeartbeat(r heartbeatReq, respCh chan raft.RPCResponse) heartbeatAnswer {
	t := n.transport(r.group)
	if t == nil {
		return heartbeatAnswer{err: fmt.Sprintf("raft group %d is not running on broker %d", r.group, n.cfg.NodeID)}
	}
	t.wakeIfDormant()
	fn := t.hbFn.Load()
	if fn == nil {
		return heartbeatAnswer{err: fmt.Sprintf("raft group %d on broker %d is not ready", r.group, n.cfg.NodeID)}
	}
	(*fn)(raft.RPC{Command: r.req, RespChan: respCh})
	select {
	case res := <-respCh:
		if res.Error != nil {
			return heartbeatAnswer{err: res.Error.Error()}
		}
		resp, ok := res.Response.(*raft.AppendEntriesResponse)
		if !ok {
			return heartbeatAnswer{err: fmt.Sprintf("raft group %d answered a heartbeat with %T", r.group, res.Response)}
		}
		return heartbeatAnswer{resp: *resp}
	default:
		return heartbeatAnswer{err: fmt.Sprintf("raft group %d on broker %d is shutting down", r.group, n.cfg.NodeID)}
	}
}

// heartbeatReq and heartbeatAnswer are one entry of a frame.
type heartbeatReq struct {
	group uint64
	req   *raft.AppendEntriesRequest
}

type heartbeatAnswer struct {
	resp raft.AppendEntriesResponse
	err  string
}

func appendBytes16(b, s []byte) []byte {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendHeartbeatRequests(b []byte, reqs []heartbeatReq) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(reqs)))
	for _, r := range reqs {
		b = binary.BigEndian.AppendUint64(b, r.group)
		b = binary.BigEndian.AppendUint64(b, r.req.Term)
		b = append(b, byte(r.req.ProtocolVersion))
		b = appendBytes16(b, r.req.ID)
		b = appendBytes16(b, r.req.Addr)
		b = appendBytes16(b, r.req.Leader)
	}
	return b
}

func appendHeartbeatResponses(b []byte, answers []heartbeatAnswer) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(answers)))
	for _, a := range answers {
		if a.err != "" {
			b = append(b, 1)
			b = appendBytes16(b, []byte(a.err))
			continue
		}
		b = append(b, 0)
		b = binary.BigEndian.AppendUint64(b, a.resp.Term)
		b = binary.BigEndian.AppendUint64(b, a.resp.LastLog)
		var flags byte
		if a.resp.Success {
			flags |= 1
		}
		if a.resp.NoRetryBackoff {
			flags |= 2
		}
		b = append(b, flags, byte(a.resp.ProtocolVersion))
		b = appendBytes16(b, a.resp.ID)
		b = appendBytes16(b, a.resp.Addr)
	}
	return b
}

// frameReader decodes the fields of a frame; the first error sticks.
type frameReader struct {
	b   []byte
	err error
}

var errShortFrame = errors.New("heartbeat frame is truncated")

func (r *frameReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = errShortFrame
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *frameReader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *frameReader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *frameReader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// bytes16 returns a copy (nil when empty), so decoded values do not pin
// the frame.
func (r *frameReader) bytes16() []byte {
	v := r.take(2)
	if v == nil {
		return nil
	}
	s := r.take(int(binary.BigEndian.Uint16(v)))
	if len(s) == 0 {
		return nil
	}
	return append([]byte(nil), s...)
}

func (r *frameReader) count() int {
	n := r.u32()
	if r.err == nil && n > maxHeartbeatsPerFrame {
		r.err = fmt.Errorf("heartbeat frame with %d entries is over the limit of %d", n, maxHeartbeatsPerFrame)
	}
	return int(n)
}

func (r *frameReader) finish() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("heartbeat frame has %d bytes after its last entry", len(r.b))
	}
	return r.err
}

func decodeHeartbeatRequests(b []byte) ([]heartbeatReq, error) {
	r := &frameReader{b: b}
	n := r.count()
	var out []heartbeatReq
	for i := 0; i < n && r.err == nil; i++ {
		hr := heartbeatReq{group: r.u64(), req: &raft.AppendEntriesRequest{}}
		hr.req.Term = r.u64()
		hr.req.ProtocolVersion = raft.ProtocolVersion(r.u8())
		hr.req.ID = r.bytes16()
		hr.req.Addr = r.bytes16()
		hr.req.Leader = r.bytes16()
		if r.err == nil && !isHeartbeat(hr.req) {
			r.err = fmt.Errorf("heartbeat %d of the frame (group %d) has no term or leader", i, hr.group)
		}
		out = append(out, hr)
	}
	if err := r.finish(); err != nil {
		return nil, err
	}
	return out, nil
}

func decodeHeartbeatResponses(b []byte) ([]heartbeatAnswer, error) {
	r := &frameReader{b: b}
	n := r.count()
	var out []heartbeatAnswer
	for i := 0; i < n && r.err == nil; i++ {
		var a heartbeatAnswer
		switch st := r.u8(); st {
		case 0:
			a.resp.Term = r.u64()
			a.resp.LastLog = r.u64()
			flags := r.u8()
			a.resp.Success = flags&1 != 0
			a.resp.NoRetryBackoff = flags&2 != 0
			a.resp.ProtocolVersion = raft.ProtocolVersion(r.u8())
			a.resp.ID = r.bytes16()
			a.resp.Addr = r.bytes16()
		case 1:
			a.err = string(r.bytes16())
			if r.err == nil && a.err == "" {
				a.err = "heartbeat failed on the peer"
			}
		default:
			if r.err == nil {
				r.err = fmt.Errorf("heartbeat answer %d has unknown status %d", i, st)
			}
		}
		out = append(out, a)
	}
	if err := r.finish(); err != nil {
		return nil, err
	}
	return out, nil
}

// newTransport makes group's transport on the mux and registers it.
//
// setup runs before the transport forwards its first RPC.
func (n *Node) newTransport(group uint64, maxPool int, hl hclog.Logger, setup ...func(*groupTransport)) *groupTransport {
	stream := n.mux.Group(group)
	inner := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: maxPool, Timeout: 10 * time.Second, Logger: hl,
		// No pipelined AppendEntries: hashicorp/raft's pipeline can
		// deadlock a leader's replication to a follower (and then its
		// Shutdown) once the follower rejects an entry, as followers do
		// around elections: the decoder stops reading while the sender
		// waits to hand it the next request on an unbuffered channel.
		// One request at a time per follower is what raft's own
		// documentation of this setting recommends anyway.
		MaxRPCsInFlight: 1,
	})
	t := makeGroupTransport(inner, group, n.hub)
	t.node = n
	t.stream = stream
	for _, f := range setup {
		f(t)
	}
	t.start()
	n.groups.Lock()
	n.groups.m[group] = t
	n.groups.Unlock()
	return t
}

// started records group's raft on its transport (for fast elections) and
// observes its leader changes (LeaderChanges).
func (n *Node) started(t *groupTransport, r *raft.Raft) {
	t.raft.Store(r)
	// The filter runs in raft's goroutine and hands the news out itself;
	// nothing goes to the observer's channel.
	r.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if _, ok := o.Data.(raft.LeaderObservation); ok {
			n.leaderChanges.notify()
		}
		return false
	}))
}

// LeaderChanges returns a new channel that receives a token (without
// blocking raft; tokens coalesce) when any raft group on this node sees a
// new leader or loses its leader, so the broker can make new leaders
// ready, report them and follow coordinators at once instead of at its
// next poll. Every reader takes its own.
func (n *Node) LeaderChanges() <-chan struct{} { return n.leaderChanges.subscribe() }

// unregister removes t from the registry (if it is still group's).
func (n *Node) unregister(group uint64, t *groupTransport) {
	n.groups.Lock()
	if n.groups.m[group] == t {
		delete(n.groups.m, group)
	}
	n.groups.Unlock()
}

func (n *Node) transport(group uint64) *groupTransport {
	n.groups.Lock()
	defer n.groups.Unlock()
	return n.groups.m[group]
}

func (n *Node) transports() []*groupTransport {
	n.groups.Lock()
	defer n.groups.Unlock()
	out := make([]*groupTransport, 0, len(n.groups.m))
	for _, t := range n.groups.m {
		out = append(out, t)
	}
	return out
}

// closeOnShutdown closes conn when the node shuts down; call the returned
// func when done with conn.
func (n *Node) closeOnShutdown(conn net.Conn) func() bool {
	return context.AfterFunc(n.runCtx, func() { conn.Close() })
}

// transportStats are the metrics of the coalescing links and the failure
// detector.
type transportStats struct {
	frames          prometheus.Counter
	heartbeats      prometheus.Counter
	quietHeartbeats prometheus.Counter
	peerDown        prometheus.Counter
	fastElections   prometheus.Counter
}

func newTransportStats() *transportStats {
	return &transportStats{
		frames:          prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_cluster_heartbeat_frames_total", Help: "Frames of coalesced raft heartbeats this broker sent and got answered."}),
		heartbeats:      prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_cluster_heartbeats_total", Help: "Raft heartbeats this broker sent in coalesced frames and got answered."}),
		quietHeartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_cluster_quiet_heartbeats_total", Help: "Raft heartbeats of quiet groups answered by this broker from the follower's last answer while the link to its broker answered (no writes for a while)."}),
		peerDown:        prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_cluster_peer_down_total", Help: "Times this broker saw another broker's process go away (watch connection broke, raft port refused or a new incarnation answered)."}),
		fastElections:   prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_cluster_fast_elections_total", Help: "Raft elections this broker started at once because the group's leader was seen to die."}),
	}
}

func (s *transportStats) register(r prometheus.Registerer) {
	r.MustRegister(s.frames, s.heartbeats, s.quietHeartbeats, s.peerDown, s.fastElections)
}
