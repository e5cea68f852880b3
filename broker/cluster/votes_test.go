package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// answerVotes answers every vote RPC raft would get from c (granting
// votes and pre-votes in the request's term) until the test ends.
func answerVotes(t *testing.T, c <-chan raft.RPC) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case rpc := <-c:
				switch req := rpc.Command.(type) {
				case *raft.RequestVoteRequest:
					rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
				case *raft.RequestPreVoteRequest:
					rpc.Respond(&raft.RequestPreVoteResponse{Term: req.Term, Granted: true}, nil)
				case *raft.TimeoutNowRequest:
					rpc.Respond(&raft.TimeoutNowResponse{}, nil)
				default:
					rpc.Respond(nil, errNotVote)
				}
			case <-done:
				return
			}
		}
	}()
}

var errNotVote = raft.ErrUnsupportedProtocol

func voteHeader(addr raft.ServerAddress) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("0"), Addr: []byte(addr)}
}

// Vote requests, pre-vote requests and TimeoutNow go on vote streams and
// reach the peer's raft through its group transport, without a
// NetworkTransport connection; one for a group the peer opens later is
// held until it does.
func TestVoteStreams(t *testing.T) {
	nodes := startNodes(t, clusterConfigs(t, 2))
	hl := hclog.NewNullLogger()
	const group = 79
	peer := nodes[1].newTransport(group, 2, hl)
	t.Cleanup(func() { _ = peer.Close() })
	answerVotes(t, peer.Consumer())
	self := nodes[0].newTransport(group, 2, hl)
	t.Cleanup(func() { _ = self.Close() })
	target := nodes[1].mux.advertise
	h := voteHeader(nodes[0].mux.advertise)

	var vote raft.RequestVoteResponse
	if err := self.RequestVote("1", target, &raft.RequestVoteRequest{RPCHeader: h, Term: 7, LastLogIndex: 3, LastLogTerm: 2}, &vote); err != nil {
		t.Fatal(err)
	}
	if !vote.Granted || vote.Term != 7 {
		t.Fatalf("vote answer %+v", vote)
	}
	var pre raft.RequestPreVoteResponse
	if err := self.RequestPreVote("1", target, &raft.RequestPreVoteRequest{RPCHeader: h, Term: 8}, &pre); err != nil {
		t.Fatal(err)
	}
	if !pre.Granted || pre.Term != 8 {
		t.Fatalf("pre-vote answer %+v", pre)
	}
	var tn raft.TimeoutNowResponse
	if err := self.TimeoutNow("1", target, &raft.TimeoutNowRequest{RPCHeader: h}, &tn); err != nil {
		t.Fatal(err)
	}
	if peer.stream.used.Load() != 0 {
		t.Fatal("the peer's NetworkTransport accepted a connection for the votes")
	}

	// A group the peer opens after the request arrives.
	const later = 80
	self2 := nodes[0].newTransport(later, 2, hl)
	t.Cleanup(func() { _ = self2.Close() })
	opened := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		p := nodes[1].newTransport(later, 2, hl)
		t.Cleanup(func() { _ = p.Close() })
		answerVotes(t, p.Consumer())
		close(opened)
	}()
	if err := self2.RequestVote("1", target, &raft.RequestVoteRequest{RPCHeader: h, Term: 9}, &vote); err != nil {
		t.Fatal(err)
	}
	<-opened
	if !vote.Granted || vote.Term != 9 {
		t.Fatalf("vote answer %+v", vote)
	}

	// A group detached on the peer answers an error at once.
	const gone = 81
	self3 := nodes[0].newTransport(gone, 2, hl)
	t.Cleanup(func() { _ = self3.Close() })
	_ = nodes[1].mux.Group(gone).Close()
	if err := self3.RequestVote("1", target, &raft.RequestVoteRequest{RPCHeader: h, Term: 1}, &vote); err == nil {
		t.Fatal("vote for a group detached on the peer answered without an error")
	}
}

// A peer that takes no vote streams (an older release: its mux closes a
// stream of an unknown kind) gets the request over the NetworkTransport.
func TestVoteStreamsFallBack(t *testing.T) {
	a := serveTestMux(t)
	trans := newGroupTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: a.Group(1), MaxPool: 2, Timeout: 10 * time.Second}), 1, nil)
	trans.stream = a.Group(1)
	t.Cleanup(func() { trans.Close() })
	old := serveTestMux(t)
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: old.Group(1), MaxPool: 2, Timeout: 10 * time.Second})
	t.Cleanup(func() { nt.Close() })
	answerVotes(t, nt.Consumer())
	var vote raft.RequestVoteResponse
	if err := trans.RequestVote("2", old.Addr(), &raft.RequestVoteRequest{RPCHeader: voteHeader(a.Addr()), Term: 4}, &vote); err != nil {
		t.Fatal(err)
	}
	if !vote.Granted || vote.Term != 4 {
		t.Fatalf("vote answer %+v", vote)
	}
	if old.Group(1).used.Load() == 0 {
		t.Fatal("the vote did not come over the NetworkTransport")
	}
}

// At most votesInFlight vote RPCs of data groups are in flight to one
// peer; the next waits for a slot within its timeout.
func TestVoteSlots(t *testing.T) {
	m := serveTestMux(t)
	var releases []func()
	for range votesInFlight {
		release, err := m.voteSlot("peer:1", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	if _, err := m.voteSlot("peer:1", 10*time.Millisecond); err == nil {
		t.Fatal("a vote slot beyond the bound was given")
	}
	if release, err := m.voteSlot("peer:2", time.Second); err != nil {
		t.Fatalf("another peer's slot: %v", err)
	} else {
		release()
	}
	got := make(chan error, 1)
	go func() {
		release, err := m.voteSlot("peer:1", time.Minute)
		if err == nil {
			release()
		}
		got <- err
	}()
	releases[0]()
	if err := <-got; err != nil {
		t.Fatalf("waiting for a slot: %v", err)
	}
	for _, r := range releases[1:] {
		r()
	}
}
