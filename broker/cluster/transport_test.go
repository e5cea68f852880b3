package cluster

import (
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

func TestHeartbeatFrameRoundTrip(t *testing.T) {
	reqs := []heartbeatReq{
		{group: 0, req: &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("1"), Addr: []byte("127.0.0.1:9")}, Term: 7, Leader: []byte("127.0.0.1:9")}},
		{group: 1<<63 + 5, req: &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("22"), Addr: []byte("h:1")}, Term: 1}},
	}
	got, err := decodeHeartbeatRequests(appendHeartbeatRequests(nil, reqs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, reqs) {
		t.Fatalf("requests: got %+v, want %+v", got, reqs)
	}
	answers := []heartbeatAnswer{
		{resp: raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("2"), Addr: []byte("a:2")}, Term: 7, LastLog: 99, Success: true}},
		{err: "raft group 5 is not running on broker 2"},
		{resp: raft.AppendEntriesResponse{Term: 8, NoRetryBackoff: true}},
	}
	gotA, err := decodeHeartbeatResponses(appendHeartbeatResponses(nil, answers))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotA, answers) {
		t.Fatalf("answers: got %+v, want %+v", gotA, answers)
	}
	// Every truncation is an error, never a panic or a short result.
	full := appendHeartbeatRequests(nil, reqs)
	for i := range full {
		if _, err := decodeHeartbeatRequests(full[:i]); err == nil {
			t.Fatalf("requests truncated to %d of %d bytes decoded without error", i, len(full))
		}
	}
	if _, err := decodeHeartbeatRequests(append(full, 0)); err == nil {
		t.Fatal("requests with a trailing byte decoded without error")
	}
	// A heartbeat without a term is not a heartbeat.
	bad := appendHeartbeatRequests(nil, []heartbeatReq{{group: 1, req: &raft.AppendEntriesRequest{Leader: []byte("x")}}})
	if _, err := decodeHeartbeatRequests(bad); err == nil {
		t.Fatal("a heartbeat with term 0 decoded without error")
	}
}

// FuzzHeartbeatFrames: any bytes decode to entries or an error, within
// the entry limit, never a panic.
func FuzzHeartbeatFrames(f *testing.F) {
	f.Add(appendHeartbeatRequests(nil, []heartbeatReq{{group: 3, req: &raft.AppendEntriesRequest{Term: 2, Leader: []byte("a:1")}}}))
	f.Add(appendHeartbeatResponses(nil, []heartbeatAnswer{{err: "x"}, {resp: raft.AppendEntriesResponse{Term: 1, Success: true}}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := decodeHeartbeatRequests(data); err == nil && len(r) > maxHeartbeatsPerFrame {
			t.Fatalf("%d requests decoded", len(r))
		}
		if a, err := decodeHeartbeatResponses(data); err == nil && len(a) > maxHeartbeatsPerFrame {
			t.Fatalf("%d answers decoded", len(a))
		}
	})
}

// TestCoalescedHeartbeatsAndFastElection: three nodes run the controller
// and a few data groups over coalesced heartbeats (frames carry several
// groups' heartbeats); when the node leading the controller shuts down
// (its listener closes, so its raft port refuses connections), the
// others see it gone and start the elections of the groups it led
// themselves, and every group gets a leader again.
func TestCoalescedHeartbeatsAndFastElection(t *testing.T) {
	skipElections(t)
	nodes := startSettledNodes(t)
	// Data groups led, after their first election, by whoever wins.
	const groups = 8
	rafts := map[int][]*raft.Raft{}
	for i, n := range nodes {
		for g := range groups {
			grp, err := n.StartGroup(GroupConfig{Group: uint64(100 + g), Dir: filepath.Join(t.TempDir(), "g"), FSM: NewFSM(),
				Peers: []int32{0, 1, 2}, Bootstrap: i == 0, Logger: n.log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = grp.Close() })
			rafts[i] = append(rafts[i], grp.Raft())
		}
	}
	leaderOf := func(g int, among []int) int {
		for _, i := range among {
			if rafts[i][g].State() == raft.Leader {
				return i
			}
		}
		return -1
	}
	all := []int{0, 1, 2}
	waitFor(t, "a leader in every data group", func() bool {
		for g := range groups {
			if leaderOf(g, all) < 0 {
				return false
			}
		}
		return true
	})
	waitFor(t, "coalesced heartbeat frames", func() bool {
		var frames, hbs float64
		for _, n := range nodes {
			frames += promtest.ToFloat64(n.stats.frames)
			hbs += promtest.ToFloat64(n.stats.heartbeats)
		}
		return frames > 0 && hbs > frames
	})

	victim := leaderIndex(nodes)
	var survivors []int
	for _, i := range all {
		if i != victim {
			survivors = append(survivors, i)
		}
	}
	led := 0
	for g := range groups {
		if leaderOf(g, all) == victim {
			led++
		}
	}
	// As a killed broker: its groups stop, then its listener closes.
	for _, r := range rafts[victim] {
		_ = r.Shutdown().Error()
	}
	nodes[victim].stop()
	waitFor(t, "a new controller leader and data group leaders among the survivors", func() bool {
		if !nodes[survivors[0]].IsLeader() && !nodes[survivors[1]].IsLeader() {
			return false
		}
		for g := range groups {
			if leaderOf(g, survivors) < 0 {
				return false
			}
		}
		return true
	})
	// A graceful close ends the watch connections a moment before the
	// listener, so one survivor may conclude later than the other.
	waitFor(t, "both survivors to report the victim down", func() bool {
		return nodes[survivors[0]].PeerDown(int32(victim)) && nodes[survivors[1]].PeerDown(int32(victim))
	})
	var fast float64
	for _, i := range survivors {
		fast += promtest.ToFloat64(nodes[i].stats.fastElections)
		if d := promtest.ToFloat64(nodes[i].stats.peerDown); d < 1 {
			t.Errorf("node %d counted node %d going away %v times, want 1 or more", i, victim, d)
		}
	}
	// At least the controller's (the victim led it). Not necessarily
	// all the data groups the victim led: with a graceful close one
	// survivor may conclude late, and raft's own timers may elect first.
	if fast < 1 {
		t.Fatalf("no fast election started (the victim led the controller and %d of %d data groups)", led, groups)
	}
}

// TestPacedHeartbeats: a data group's heartbeats to a follower that
// answered its previous one go out no sooner than hbEvery after that
// answer, however fast raft asks; the first goes at once, and detaching
// the group sends a held heartbeat at once (raft's shutdown waits for
// it).
func TestPacedHeartbeats(t *testing.T) {
	nodes := startNodes(t, clusterConfigs(t, 2))
	const group = 77
	hl := hclog.NewNullLogger()
	var mu sync.Mutex
	var arrived []time.Time
	follower := nodes[1].newTransport(group, 2, hl)
	t.Cleanup(func() { _ = follower.Close() })
	follower.SetHeartbeatHandler(func(rpc raft.RPC) {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
		req := rpc.Command.(*raft.AppendEntriesRequest)
		rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true}, nil)
	})
	leader := nodes[0].newTransport(group, 2, hl)
	t.Cleanup(func() { _ = leader.Close() })
	const every = 150 * time.Millisecond
	leader.hbEvery = every
	target := nodes[1].mux.advertise
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("0"), Addr: []byte(nodes[0].mux.advertise)}, Term: 3}
	var answeredAt []time.Time
	for range 5 {
		var resp raft.AppendEntriesResponse
		if err := leader.AppendEntries("1", target, req, &resp); err != nil {
			t.Fatal(err)
		}
		if !resp.Success || resp.Term != 3 {
			t.Fatalf("answer %+v", resp)
		}
		answeredAt = append(answeredAt, time.Now())
	}
	mu.Lock()
	got := append([]time.Time(nil), arrived...)
	mu.Unlock()
	if len(got) != 5 {
		t.Fatalf("%d heartbeats arrived, want 5", len(got))
	}
	// The link may send a held heartbeat up to its window early, to
	// share a frame with others coming due.
	for i := 1; i < len(got); i++ {
		if gap := got[i].Sub(answeredAt[i-1]); gap < every-nodes[0].cfg.HeartbeatWindow {
			t.Errorf("heartbeat %d arrived %v after the previous answer, want at least %v", i, gap, every)
		}
	}

	// A held heartbeat (due in an hour) goes out when the group detaches.
	leader.hbEvery = time.Hour
	done := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		done <- leader.AppendEntries("1", target, req, &resp)
	}()
	waitFor(t, "the heartbeat to be held", func() bool {
		h := nodes[0].hub
		h.mu.Lock()
		l := h.mu.peers[target]
		h.mu.Unlock()
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.held) == 1
	})
	leader.detach()
	if err := <-done; err != nil {
		t.Fatalf("held heartbeat after detach: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrived) != 6 {
		t.Fatalf("%d heartbeats arrived, want 6", len(arrived))
	}
}

// TestIdleAppendEntriesAnsweredLocally: an empty AppendEntries repeating
// what the follower acknowledged in the same term is answered from that
// answer; entries, a newer commit index, a new term, a failure, a broker
// seen to go away and idleAppendEvery each make the next one go out.
func TestIdleAppendEntriesAnsweredLocally(t *testing.T) {
	n := &Node{}
	tr := &groupTransport{hbEvery: time.Second, node: n}
	const peer = raft.ServerAddress("127.0.0.1:1")
	sent := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 5, PrevLogTerm: 2, LeaderCommitIndex: 5,
		Entries: []*raft.Log{{Index: 6, Term: 3}}}
	ack := &raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ID: []byte("2")}, Term: 3, LastLog: 6, Success: true}
	idle := func(commit uint64) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 6, PrevLogTerm: 3, LeaderCommitIndex: commit}
	}
	answered := func(req *raft.AppendEntriesRequest) bool {
		var resp raft.AppendEntriesResponse
		ok := tr.answerIdle(peer, req, &resp)
		if ok && !reflect.DeepEqual(resp, *ack) {
			t.Fatalf("answered %+v, want the follower's last answer %+v", resp, *ack)
		}
		return ok
	}

	if answered(idle(5)) {
		t.Fatal("answered before the follower ever answered")
	}
	tr.noteAppend(peer, sent, ack, nil)
	if answered(sent) {
		t.Fatal("entries answered locally")
	}
	if answered(idle(6)) {
		t.Fatal("a newer commit index answered locally")
	}
	if !answered(idle(5)) {
		t.Fatal("an idle AppendEntries was sent")
	}
	tr.noteAppend(peer, idle(6), ack, nil)
	if !answered(idle(6)) {
		t.Fatal("an idle AppendEntries was sent after the commit index went out")
	}
	if answered(&raft.AppendEntriesRequest{Term: 4, PrevLogEntry: 6, PrevLogTerm: 3, LeaderCommitIndex: 6}) {
		t.Fatal("a new term's AppendEntries answered locally")
	}
	if answered(&raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 5, PrevLogTerm: 2, LeaderCommitIndex: 6}) {
		t.Fatal("an AppendEntries from an earlier entry answered locally")
	}

	n.peerChanges.Add(1)
	if answered(idle(6)) {
		t.Fatal("answered locally after a broker went away")
	}
	tr.noteAppend(peer, idle(6), ack, nil)
	if !answered(idle(6)) {
		t.Fatal("not answered after the follower answered again")
	}

	tr.appended.Lock()
	m := tr.appended.m[peer]
	m.at = m.at.Add(-idleAppendEvery)
	tr.appended.m[peer] = m
	tr.appended.Unlock()
	if answered(idle(6)) {
		t.Fatalf("answered locally %v after the follower's last answer", idleAppendEvery)
	}

	tr.noteAppend(peer, idle(6), ack, nil)
	tr.noteAppend(peer, idle(6), &raft.AppendEntriesResponse{}, raft.ErrTransportShutdown)
	if answered(idle(6)) {
		t.Fatal("answered locally after a failure")
	}
	tr.noteAppend(peer, idle(6), ack, nil)
	tr.noteAppend(peer, idle(6), &raft.AppendEntriesResponse{Term: 3, LastLog: 4}, nil)
	if answered(idle(6)) {
		t.Fatal("answered locally after the follower refused")
	}
}

// TestLeavingSeenAtOnce: a broker that says it is leaving (Leaving, as a
// clean stop does before its Kafka listener closes) is PeerDown on the
// others while its process and sockets still run.
func TestLeavingSeenAtOnce(t *testing.T) {
	skipElections(t)
	nodes := startSettledNodes(t)
	leaver := nodes[2]
	id := leaver.cfg.NodeID
	for _, n := range nodes[:2] {
		if n.PeerDown(id) {
			t.Fatalf("broker %d is down on broker %d before it said anything", id, n.cfg.NodeID)
		}
	}
	leaver.Leaving()
	leaver.Leaving() // a second call changes nothing
	waitFor(t, "the leaving broker down on the others", func() bool {
		return nodes[0].PeerDown(id) && nodes[1].PeerDown(id)
	})
}

// skipElections skips, under -short, a test that runs raft elections.
func skipElections(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs raft elections")
	}
}

// startTestGroup starts raft group id on n, with replicas 0, 1 and 2 and
// bootstrapped from n when bootstrap, closed when the test ends.
func startTestGroup(t *testing.T, n *testNode, id uint64, bootstrap bool, hb time.Duration) *Group {
	t.Helper()
	grp, err := n.StartGroup(GroupConfig{Group: id, Dir: filepath.Join(t.TempDir(), "g"), FSM: NewFSM(),
		Peers: []int32{0, 1, 2}, Bootstrap: bootstrap, HeartbeatTimeout: hb, Logger: n.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = grp.Close() })
	return grp
}

// startSettledNodes starts three nodes and waits until the controller has
// a leader and every node sees the three brokers registered.
func startSettledNodes(t *testing.T) []*testNode {
	t.Helper()
	nodes := startNodes(t, clusterConfigs(t, 3))
	waitFor(t, "a controller leader and 3 registered brokers everywhere", func() bool {
		if leaderIndex(nodes) < 0 {
			return false
		}
		for _, n := range nodes {
			if len(n.Metadata().AliveBrokers()) != 3 {
				return false
			}
		}
		return true
	})
	return nodes
}

// newGroupTransport is makeGroupTransport, started.
func newGroupTransport(inner *raft.NetworkTransport, group uint64, hub *heartbeatHub) *groupTransport {
	t := makeGroupTransport(inner, group, hub)
	t.start()
	return t
}
