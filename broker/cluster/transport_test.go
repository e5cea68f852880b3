package cluster

import (
	"path/filepath"
	"reflect"
	"testing"

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
	if testing.Short() {
		t.Skip("runs raft elections")
	}
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
			rafts[i] = append(rafts[i], grp.Raft)
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
