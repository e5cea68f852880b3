package cluster

// Dormant groups. A quiet group (quiet.go) still runs hashicorp/raft's
// per-group goroutines and timers: the leader's heartbeat and
// replication goroutines per follower, its lease check, the snapshot
// check. With hundreds of groups that is most of an idle broker's CPU,
// and raft offers no way to stop the timers of a running instance. A
// dormant group has no raft instance: Sleep takes a snapshot of what the
// state machine applied, shuts raft down and keeps the group's stores,
// transport and state machine; Wake starts a new instance on them. That
// is what a broker restart does for every group, so raft's safety is
// untouched: a replica may sleep and wake at any moment, as a process
// may stop and start. What dormancy costs is availability: a dormant
// replica answers nothing until it wakes, so a raft RPC for a dormant
// group (an AppendEntries, a heartbeat, a vote request) wakes it first,
// and a new instance elects before it leads.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// groupLife is what Sleep, Wake and Close decide under one lock.
type groupLife struct {
	sync.Mutex
	dormant, closed bool
	// slept is the group as the replica last saw it awake.
	slept sleptAs
	// observers are registered on every raft instance of the group.
	observers []*raft.Observer
}

// sleptAs is a dormant group's leader, term and voters when it slept.
type sleptAs struct {
	leader     raft.ServerID
	leaderAddr raft.ServerAddress
	term       uint64
	voters     []raft.ServerID
}

// sleptState is the group's sleptAs; ok false while it is awake.
func (g *Group) sleptState() (sleptAs, bool) {
	g.life.Lock()
	defer g.life.Unlock()
	return g.life.slept, g.life.dormant && !g.life.closed
}

// ErrGroupClosed: the group was closed.
var ErrGroupClosed = errors.New("raft group closed")

// newRaft starts a raft instance with rc on the group's stores, transport
// and state machine.
func (g *Group) newRaft(rc *raft.Config) (*raft.Raft, error) {
	logs := newLogCache(g.logStore, groupLogCache, groupLogCacheBytes)
	r, err := raft.NewRaft(rc, g.fsm, logs, g.store, g.snaps, g.trans)
	if err != nil {
		return nil, fmt.Errorf("cannot start raft group %d: %w", g.id, err)
	}
	g.raft.Store(r)
	g.node.started(g.trans, r)
	for _, o := range g.life.observers {
		r.RegisterObserver(o)
	}
	return r, nil
}

// RegisterObserver registers o on the group's raft, and on every raft
// instance the group starts when it wakes.
func (g *Group) RegisterObserver(o *raft.Observer) {
	g.life.Lock()
	defer g.life.Unlock()
	g.life.observers = append(g.life.observers, o)
	g.Raft().RegisterObserver(o)
}

// DeregisterObserver undoes RegisterObserver.
func (g *Group) DeregisterObserver(o *raft.Observer) {
	g.life.Lock()
	defer g.life.Unlock()
	for i, x := range g.life.observers {
		if x == o {
			g.life.observers = append(g.life.observers[:i], g.life.observers[i+1:]...)
			break
		}
	}
	g.Raft().DeregisterObserver(o)
}

// Dormant reports whether the group's raft is shut down by Sleep.
func (g *Group) Dormant() bool {
	g.life.Lock()
	defer g.life.Unlock()
	return g.life.dormant && !g.life.closed
}

// DormantLeader is the leader (a node id) and term a dormant group had
// when it slept; ok is false while the group is awake or slept without
// a leader.
func (g *Group) DormantLeader() (leader int32, term uint64, ok bool) {
	g.life.Lock()
	defer g.life.Unlock()
	if !g.life.dormant || g.life.closed || g.life.slept.leader == "" {
		return -1, 0, false
	}
	id, err := strconv.Atoi(string(g.life.slept.leader))
	if err != nil {
		return -1, 0, false
	}
	return int32(id), g.life.slept.term, true
}

// Sleep makes the group dormant: a snapshot of what the state machine
// applied (unless the newest one has it all), then raft's shutdown. The
// caller chooses the moment (an idle group); any moment is safe: an entry
// applied after the snapshot is applied again after a wake, as after a
// restart.
func (g *Group) Sleep() error {
	g.life.Lock()
	defer g.life.Unlock()
	if g.life.closed {
		return ErrGroupClosed
	}
	if g.life.dormant {
		return nil
	}
	r := g.Raft()
	as := sleptAs{term: r.CurrentTerm()}
	as.leaderAddr, as.leader = r.LeaderWithID()
	if f := r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				as.voters = append(as.voters, s.ID)
			}
		}
	}
	// The new instance takes the newest snapshot as what the state
	// machine has applied (it does not restore it): it must be all of it.
	if err := r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return fmt.Errorf("cannot snapshot raft group %d before it sleeps: %w", g.id, err)
	}
	g.trans.dormant.Store(true)
	g.trans.keepOpen.Store(true)
	g.trans.hurryHeartbeats()
	err := r.Shutdown().Error()
	g.trans.calmHeartbeats()
	g.trans.keepOpen.Store(false)
	g.trans.resetQuiet()
	g.life.dormant, g.life.slept = true, as
	// An RPC that waited for the old instance now wakes the group.
	select {
	case g.trans.slept <- struct{}{}:
	default:
	}
	if err != nil {
		return fmt.Errorf("cannot shut down raft group %d: %w", g.id, err)
	}
	return nil
}

// Wake starts a new raft instance for a dormant group (a no-op for one
// that is awake) and returns the group's raft. The new instance is a
// follower with no leader until an election, which the caller may start
// at once with Elect.
func (g *Group) Wake() (*raft.Raft, error) {
	g.life.Lock()
	defer g.life.Unlock()
	if g.life.closed {
		return g.Raft(), ErrGroupClosed
	}
	if !g.life.dormant {
		return g.Raft(), nil
	}
	r, err := g.newRaft(g.rc)
	if err != nil {
		return g.Raft(), err
	}
	g.life.dormant = false
	g.trans.dormant.Store(false)
	return r, nil
}

// Elect makes the group's replica stand for election at once (as a
// leadership transfer to it would), waking it first; false: raft did not
// take it (not a follower, or closed).
func (g *Group) Elect() bool {
	if _, err := g.Wake(); err != nil {
		return false
	}
	return g.trans.timeoutNow()
}

// wakeForRPC wakes the group for an RPC that arrived while it slept; the
// transport calls it.
func (g *Group) wakeForRPC() {
	if _, err := g.Wake(); err != nil && !errors.Is(err, ErrGroupClosed) {
		g.node.log.Error("cannot wake a dormant raft group for an RPC", "group", g.id, "err", err)
	}
}

// Putting a whole group to sleep. Its leader decides: once every follower
// has acknowledged its whole log and commit index, it sleeps first (a
// follower that slept first would wake for its next heartbeat), then asks
// each follower, on a stream of its own (kindSleep), to sleep as well. A
// follower sleeps only if it still follows that leader in that term with
// the same last entry, all of it applied; one that refuses, or is not
// reached, stays awake and elects after its election timeout, which
// wakes the leader's replica for the vote: an ordinary election.
//
// A sleep stream carries after its kind byte: group u64, term u64, last
// index u64, leader id (u16 length + bytes); the answer is one byte, 1
// if the follower sleeps.

const kindSleep byte = 7

// sleepTimeout bounds one sleep request.
const sleepTimeout = 5 * time.Second

// ErrNotIdle: SleepAll found the group not ready to sleep.
var ErrNotIdle = errors.New("raft group not idle")

// SleepAll puts the group to sleep on every replica, this one being its
// leader (see above). It returns how many followers slept; ErrNotIdle
// when this replica does not lead or a follower has not acknowledged
// everything.
func (g *Group) SleepAll() (int, error) {
	r := g.Raft()
	if r.State() != raft.Leader || g.Dormant() {
		return 0, ErrNotIdle
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, err
	}
	self := raft.ServerID(strconv.Itoa(int(g.node.cfg.NodeID)))
	term, last := r.CurrentTerm(), r.LastIndex()
	if r.CommitIndex() < last || r.AppliedIndex() < last {
		return 0, ErrNotIdle
	}
	var followers []raft.Server
	for _, s := range f.Configuration().Servers {
		if s.ID == self {
			continue
		}
		if s.Suffrage != raft.Voter {
			return 0, ErrNotIdle
		}
		if !g.trans.acknowledged(s.Address, term, last) {
			return 0, ErrNotIdle
		}
		followers = append(followers, s)
	}
	if err := g.Sleep(); err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	slept := make([]bool, len(followers))
	for i, s := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := g.trans.askSleep(s.Address, term, last, self)
			if err != nil {
				g.node.log.Debug("a follower was not asked to sleep", "group", g.id, "follower", s.ID, "err", err)
			}
			slept[i] = ok
		}()
	}
	wg.Wait()
	n := 0
	for _, ok := range slept {
		if ok {
			n++
		}
	}
	return n, nil
}

// acknowledged: target's last successful AppendEntries answer holds the
// log up to last in term, and the commit index that covers it.
func (t *groupTransport) acknowledged(target raft.ServerAddress, term, last uint64) bool {
	t.appended.Lock()
	defer t.appended.Unlock()
	m, ok := t.appended.m[target]
	return ok && m.term == term && m.last == last && m.commit >= last
}

// askSleep asks target's replica of the group to sleep.
func (t *groupTransport) askSleep(target raft.ServerAddress, term, last uint64, leader raft.ServerID) (bool, error) {
	if t.stream == nil {
		return false, errors.New("no mux")
	}
	h := []byte{kindSleep}
	h = binary.BigEndian.AppendUint64(h, t.group)
	h = binary.BigEndian.AppendUint64(h, term)
	h = binary.BigEndian.AppendUint64(h, last)
	h = appendBytes16(h, []byte(leader))
	deadline := time.Now().Add(sleepTimeout)
	c, err := t.stream.dial(target, sleepTimeout, h)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	var a [1]byte
	if _, err := io.ReadFull(c, a[:]); err != nil {
		return false, err
	}
	return a[0] == 1, nil
}

// serveSleep answers one sleep stream (runs on a mux goroutine).
func (n *Node) serveSleep(conn net.Conn) {
	defer conn.Close()
	stop := n.closeOnShutdown(conn)
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(sleepTimeout))
	br := bufio.NewReaderSize(conn, 64)
	var h [24]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return
	}
	var l [2]byte
	if _, err := io.ReadFull(br, l[:]); err != nil {
		return
	}
	leader := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(br, leader); err != nil {
		return
	}
	group, term, last := binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:16]), binary.BigEndian.Uint64(h[16:24])
	ok := false
	if t := n.transport(group); t != nil {
		if fn := t.sleepFn.Load(); fn != nil {
			ok = (*fn)(term, last, raft.ServerID(leader))
		}
	}
	answer := []byte{0}
	if ok {
		answer[0] = 1
	}
	_, _ = conn.Write(answer)
}

// sleepAsFollower sleeps if this replica follows leader in term with its
// log ending at last, all of it applied (see SleepAll).
func (g *Group) sleepAsFollower(term, last uint64, leader raft.ServerID) bool {
	r := g.Raft()
	if g.Dormant() || r.State() != raft.Follower || r.CurrentTerm() != term || r.LastIndex() != last ||
		r.CommitIndex() < last || r.AppliedIndex() < last {
		return false
	}
	if _, id := r.LeaderWithID(); id != leader {
		return false
	}
	if err := g.Sleep(); err != nil {
		g.node.log.Warn("a raft group did not sleep", "group", g.id, "err", err)
		return false
	}
	return true
}
