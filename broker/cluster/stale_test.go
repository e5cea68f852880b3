package cluster

import (
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A vote request to a peer that restarted since the last one goes out on
// a new stream, not on the pooled one its old session closed.
func TestRequestVoteAfterPeerRestart(t *testing.T) {
	a := serveTestMux(t)
	trans := newGroupTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: a.Group(1), MaxPool: 2, Timeout: 10 * time.Second}), 1, nil)
	t.Cleanup(func() { trans.Close() })

	// peer serves group 1 at addr, granting every vote, until stopped.
	peer := func(addr string) (raft.ServerAddress, func()) {
		m, err := NewMux(addr, "", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() { defer close(served); m.Serve() }()
		nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: m.Group(1), MaxPool: 2, Timeout: 10 * time.Second})
		quit, answered := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(answered)
			for {
				select {
				case rpc := <-nt.Consumer():
					if req, ok := rpc.Command.(*raft.RequestVoteRequest); ok {
						rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
					}
				case <-quit:
					return
				}
			}
		}()
		return m.Addr(), func() {
			close(quit)
			<-answered
			nt.Close()
			m.Close()
			<-served
		}
	}
	addr, stop := peer("127.0.0.1:0")
	ask := func(term uint64) error {
		var resp raft.RequestVoteResponse
		err := trans.RequestVote("2", addr, &raft.RequestVoteRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("1"), Addr: []byte(a.Addr())},
			Term:      term}, &resp)
		if err == nil && !resp.Granted {
			t.Fatalf("vote of term %d not granted", term)
		}
		return err
	}

	if err := ask(1); err != nil {
		t.Fatal(err)
	}
	// The peer restarts on the same address: the session a dialed to it
	// ends, closing the stream the transport pooled.
	stop()
	waitSessionGone(t, a, addr)
	_, stop = peer(string(addr))
	defer stop()
	if err := ask(2); err != nil {
		t.Fatalf("vote request after the peer restarted: %v", err)
	}
}

// waitSessionGone waits until m has forgotten its session to addr (it
// saw the session end).
func waitSessionGone(t *testing.T, m *Mux, addr raft.ServerAddress) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		m.mu.Lock()
		_, open := m.mu.out[addr]
		m.mu.Unlock()
		if !open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the session to the stopped peer is still open after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
