package cluster

// Fast failure detection. A broker killed or crashed on a live machine
// closes its sockets at once: its peers read EOF (or a reset) and a new
// connection to its raft port is refused. Every broker keeps one idle
// watch connection (connection kind 4) to each other broker in the
// metadata; when it breaks, the watcher dials again:
//
//   - refused (nothing listens), or the broker answers with another
//     incarnation (it restarted): the old process is gone. Every raft
//     group on this broker that still follows that broker as its leader
//     starts an election now (groupTransport.timeoutNow) instead of after
//     its heartbeat timeout. To avoid split votes the surviving voters of
//     a group go in turn, by node id: the first at once, the next after
//     Config.ElectionStagger if the group has no new leader by then and
//     it did not vote for the first (which it does not when its own log
//     is newer), and so on.
//   - the same incarnation answers: the connection broke but the broker
//     lives (a proxy, a reset connection); nothing happens.
//   - no answer (timeout, unreachable): inconclusive; raft's own timers
//     decide, as they do for a stopped (SIGSTOP) or partitioned broker
//     whose sockets stay open.
//
// A broker stopping cleanly says so first (Leaving): it writes one byte
// on every watch connection it serves, and its watchers take it as gone
// at once. It then closes its Kafka listener and hands its leaderships
// off, which under load takes seconds; meanwhile the other brokers used
// to name it in FindCoordinator and Metadata answers (their replicas
// still followed it and the controller still had it alive), and a client
// sent there found its port refusing connections: franz-go gives up an
// OffsetFetch at once on a refused dial, which ended a consumer group
// member's session. Seen gone, it is named by nobody: requests wait for
// the new leader or are told to retry (handover.go in the broker).
//
// Being wrong costs an unneeded election, never safety: the election is
// an ordinary raft election (a voter grants its vote only to a candidate
// whose log is at least as up to date as its own; one leader per term).

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

const kindWatch byte = 4 // an idle connection whose end means the peer died

// serveWatch answers a peer's watch connection with this process's
// incarnation and holds it open until either side goes away.
func (n *Node) serveWatch(conn net.Conn) {
	defer conn.Close()
	stop := n.closeOnShutdown(conn)
	defer stop()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n.incarnation)
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(b[:]); err != nil {
		return
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-n.leaving:
			_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			_, _ = conn.Write([]byte{watchLeaving})
		case <-done:
		}
	}()
	_, _ = io.Copy(io.Discard, conn) // until EOF or close
}

// watchLeaving is the byte a broker stopping cleanly writes on the watch
// connections it serves (Leaving).
const watchLeaving byte = 1

// Leaving tells the brokers watching this one that it is stopping: they
// take it as gone (PeerDown) at once. Call it before the broker stops
// serving clients.
func (n *Node) Leaving() {
	n.leavingOnce.Do(func() { close(n.leaving) })
}

// watchPeers keeps a watcher goroutine per other broker of the metadata
// (restarted when its raft address changes) until ctx ends.
func (n *Node) watchPeers(ctx context.Context) {
	type watcher struct {
		addr   string
		cancel context.CancelFunc
		done   chan struct{}
	}
	watchers := map[int32]*watcher{}
	changes := n.fsm.Changes()
	defer func() {
		for _, w := range watchers {
			w.cancel()
			<-w.done
		}
	}()
	for {
		for id, b := range n.Metadata().Brokers {
			if id == n.cfg.NodeID || b.RaftAddr == "" {
				continue
			}
			if w := watchers[id]; w != nil {
				if w.addr == b.RaftAddr {
					continue
				}
				w.cancel()
				<-w.done
			}
			wctx, cancel := context.WithCancel(ctx)
			w := &watcher{addr: b.RaftAddr, cancel: cancel, done: make(chan struct{})}
			watchers[id] = w
			go func() {
				defer close(w.done)
				n.watchPeer(wctx, id, raft.ServerAddress(w.addr))
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}

// watchPeer watches one broker; see the file comment.
func (n *Node) watchPeer(ctx context.Context, id int32, addr raft.ServerAddress) {
	var known uint64 // incarnation seen last; 0 before the first answer
	retry := 250 * time.Millisecond
	for ctx.Err() == nil {
		conn, inc, err := n.dialWatch(ctx, addr)
		if err != nil {
			if isRefused(err) && known != 0 {
				n.peerDown(ctx, id, "its raft port refuses connections")
				known = 0
			}
			sleepCtx(ctx, retry)
			continue
		}
		if known != 0 && inc != known {
			n.peerDown(ctx, id, "it restarted")
		}
		known = inc
		n.setPeerUp(id)
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		if readWatch(conn) {
			n.peerDown(ctx, id, "it is stopping")
			_, _ = io.Copy(io.Discard, conn) // until it is gone
		}
		stop()
		conn.Close()
		if ctx.Err() != nil {
			return
		}
		// The connection ended: find out why, quickly. A dying process
		// may close this socket a moment before its listener, so a few
		// tries before concluding anything. Meanwhile Refused waits for
		// the answer.
		finding := n.findingOut(id)
		for try := 0; try < 5 && ctx.Err() == nil; try++ {
			c, inc2, err := n.dialWatch(ctx, addr)
			if err == nil {
				c.Close()
				if inc2 != known {
					n.peerDown(ctx, id, "it restarted")
					known = inc2
				}
				break
			}
			if isRefused(err) {
				n.peerDown(ctx, id, "its raft port refuses connections")
				known = 0
				break
			}
			sleepCtx(ctx, 20*time.Millisecond)
		}
		finding()
	}
}

// findingOut are, per node, the brokers whose watch connection ended
// and whose watcher is still finding out why (watchPeer).
var findingOut struct {
	sync.Mutex
	m map[*Node]map[int32]int
}

// findingOut marks id as being found out about until the returned func
// is called.
func (n *Node) findingOut(id int32) (done func()) {
	findingOut.Lock()
	defer findingOut.Unlock()
	if findingOut.m == nil {
		findingOut.m = map[*Node]map[int32]int{}
	}
	if findingOut.m[n] == nil {
		findingOut.m[n] = map[int32]int{}
	}
	findingOut.m[n][id]++
	return func() {
		findingOut.Lock()
		defer findingOut.Unlock()
		if findingOut.m[n][id]--; findingOut.m[n][id] <= 0 {
			delete(findingOut.m[n], id)
		}
		if len(findingOut.m[n]) == 0 {
			delete(findingOut.m, n)
		}
	}
}

// beingFoundOut reports whether id's watcher is finding out why its
// watch connection ended.
func (n *Node) beingFoundOut(id int32) bool {
	findingOut.Lock()
	defer findingOut.Unlock()
	return findingOut.m[n][id] > 0
}

// findOutWait bounds how long Refused waits for a watcher finding out:
// a dying process's port refuses the watcher's first or second dial. A
// variable for tests.
var findOutWait = 300 * time.Millisecond

// readWatch waits on a watch connection: true when the peer says it is
// leaving, false when the connection ends.
func readWatch(conn net.Conn) bool {
	var b [1]byte
	for {
		n, err := conn.Read(b[:])
		if n > 0 && b[0] == watchLeaving {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// dialWatch opens a watch connection and reads the peer's incarnation.
func (n *Node) dialWatch(ctx context.Context, addr raft.ServerAddress) (net.Conn, uint64, error) {
	conn, err := n.mux.dial(addr, time.Second, []byte{kindWatch})
	if err != nil {
		return nil, 0, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	var b [8]byte
	// Unbuffered: a leaving peer's next byte is readWatch's.
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		conn.Close()
		return nil, 0, err
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn, binary.BigEndian.Uint64(b[:]), nil
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// PeerDown reports whether this broker saw broker id's process go away
// (its watch connection broke and its raft port refused or answered with
// a new incarnation) and has not reached it since. Metadata answers use
// it to tell clients at once that the partitions it led have no leader.
func (n *Node) PeerDown(id int32) bool {
	n.down.Lock()
	defer n.down.Unlock()
	return n.down.ids[id]
}

func (n *Node) setPeerUp(id int32) {
	n.down.Lock()
	if n.down.ids[id] {
		delete(n.down.ids, id)
		close(n.down.up)
		n.down.up = make(chan struct{})
		n.peerChanges.Add(1)
	}
	n.down.Unlock()
}

// peerDownWait bounds how long an AppendEntries to a broker seen dead
// waits for it to come back.
const peerDownWait = 30 * time.Second

// awaitPeerUp holds a leader's AppendEntries to a broker seen dead until
// the broker is back (or peerDownWait, or this replica stops leading or
// closes). hashicorp/raft counts each failed AppendEntries to a follower
// and waits exponentially longer before the next (up to about 10 s):
// failing fast against a dead broker for a few seconds would leave it
// that far behind for that long after it restarts, and a partition whose
// quorum then needs it could not commit. It reports whether it held the
// request.
func (n *Node) awaitPeerUp(id raft.ServerID, t *groupTransport) (held bool) {
	v, err := strconv.Atoi(string(id))
	if err != nil {
		return false
	}
	deadline := time.NewTimer(peerDownWait)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		n.down.Lock()
		down, up := n.down.ids[int32(v)], n.down.up
		n.down.Unlock()
		if !down {
			return held
		}
		if r := t.raft.Load(); r == nil || r.State() != raft.Leader {
			return held
		}
		held = true
		select {
		case <-up:
		case <-tick.C:
		case <-deadline.C:
			return held
		case <-t.closed:
			return held
		}
	}
}

// peerDown marks id down and makes the groups that follow it as leader
// elect a new one, the surviving voters in turn.
func (n *Node) peerDown(ctx context.Context, id int32, why string) {
	n.down.Lock()
	n.down.ids[id] = true
	n.down.Unlock()
	n.peerChanges.Add(1)
	n.stats.peerDown.Inc()
	detected := time.Now()
	dead := raft.ServerID(strconv.Itoa(int(id)))
	self := raft.ServerID(strconv.Itoa(int(n.cfg.NodeID)))
	type turn struct {
		t    *groupTransport
		rank int
	}
	var turns []turn
	last := 0
	// rankOf is this broker's place among voters but the dead one, by
	// node id: the order in which they stand.
	rankOf := func(voters []raft.ServerID) int {
		voters = slices.DeleteFunc(slices.Clone(voters), func(v raft.ServerID) bool { return v == dead })
		slices.SortFunc(voters, func(a, b raft.ServerID) int {
			x, _ := strconv.Atoi(string(a))
			y, _ := strconv.Atoi(string(b))
			return x - y
		})
		return slices.Index(voters, self)
	}
	for _, t := range n.transports() {
		if g := t.owner.Load(); g != nil {
			// A dormant group that slept with the dead broker as
			// leader elects the same way, once woken (Elect).
			if as, dormant := g.sleptState(); dormant {
				if rank := rankOf(as.voters); as.leader == dead && slices.Contains(as.voters, dead) && rank >= 0 {
					turns = append(turns, turn{t, rank})
					last = max(last, rank)
				}
				continue
			}
		}
		r := t.raft.Load()
		if r == nil || r.State() != raft.Follower {
			continue
		}
		// A group with no leader at all counts too when the dead broker
		// is one of its voters: another voter's vote request (with a newer
		// term) made it forget the dead leader a moment before we saw it
		// die.
		_, lid := r.LeaderWithID()
		if lid != dead && lid != "" {
			continue
		}
		f := r.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		var voters []raft.ServerID
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters = append(voters, s.ID)
			}
		}
		rank := rankOf(voters)
		if !slices.Contains(voters, dead) || rank < 0 {
			continue // the dead broker, or this one, is not a voter of this group
		}
		turns = append(turns, turn{t, rank})
		last = max(last, rank)
	}
	n.log.Info("broker is gone; electing new leaders of the raft groups it led", "node_id", id, "why", why, "groups", len(turns))
	for rank := 0; rank <= last && ctx.Err() == nil; rank++ {
		if rank > 0 {
			sleepCtx(ctx, n.cfg.ElectionStagger)
		}
		started := 0
		for _, tr := range turns {
			if tr.rank != rank {
				continue
			}
			if g := tr.t.owner.Load(); g != nil && g.Dormant() {
				// Still asleep: nobody asked for its vote yet.
				if g.Elect() {
					started++
				}
				continue
			}
			r := tr.t.raft.Load()
			if r.State() != raft.Follower {
				continue
			}
			if _, lid := r.LeaderWithID(); lid != dead && lid != "" {
				continue // someone else won meanwhile
			}
			// A later voter steps in only if the earlier one's election
			// could not use it: it granted no vote and heard from no
			// leader since the death (raft records both as contact). If
			// it voted, that election is still running (slow disks);
			// starting another would only undo it. If it refused (its
			// log is newer), it must run itself.
			if rank > 0 && r.LastContact().After(detected) {
				continue
			}
			if tr.t.timeoutNow() {
				started++
			}
		}
		if started > 0 {
			n.stats.fastElections.Add(float64(started))
			n.log.Info("started elections after a broker died", "dead_node_id", id, "groups", started, "turn", rank)
		}
	}
}

// Refused reports whether broker id's raft port refuses connections right
// now (its process is gone), with one connection attempt. A Metadata
// answer uses it not to name a leader that died a moment ago, before this
// broker's watcher has concluded so (the client saw its connection break
// at the same moment). Any other outcome, including a timeout, is false.
// While the watcher is finding out why its connection ended, Refused
// waits for its answer (up to findOutWait) first: a dying process closes
// its sockets a moment before its listener, and a dial in that moment
// connects, so the answer named the dead broker and the client, which
// refreshes metadata at most every 5 s (franz-go), waited that long.
func (n *Node) Refused(id int32) bool {
	if id == n.cfg.NodeID {
		return false
	}
	for deadline := time.Now().Add(findOutWait); n.beingFoundOut(id) && !n.PeerDown(id) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n.PeerDown(id) {
		return true
	}
	b, ok := n.Metadata().Brokers[id]
	if !ok || b.RaftAddr == "" {
		return false
	}
	c, err := net.DialTimeout("tcp", b.RaftAddr, 200*time.Millisecond)
	if err != nil {
		return isRefused(err)
	}
	c.Close() // the mux sees no header and closes its side
	return false
}
