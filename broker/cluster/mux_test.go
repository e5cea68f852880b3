package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/simtel/simtel/internal/testutil"
)

// TestMuxManyGroups runs three raft groups over three muxes (one listener
// per "broker"); every group elects a leader and replicates a command.
func TestMuxManyGroups(t *testing.T) {
	runMuxGroups(t, 3, 3)
}

// TestMuxOneConnectionPerPair: fifty raft groups on three muxes share one
// TCP connection per pair of muxes and direction: each mux has accepted
// at most one from each other mux, and dialed one session to each.
func TestMuxOneConnectionPerPair(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 150 raft instances")
	}
	const nodes = 3
	muxes := runMuxGroups(t, nodes, 50)
	total := 0
	for i, m := range muxes {
		_, port, err := net.SplitHostPort(string(m.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		n, err := testutil.EstablishedTo(p)
		if err != nil {
			t.Skipf("cannot count connections: %v", err)
		}
		total += n
		// A mux that led every group was dialed by nobody.
		if n > nodes-1 {
			t.Errorf("mux %d has %d established connections on its port, want at most %d (one per peer)", i, n, nodes-1)
		}
		out := 0
		for _, o := range m.openSessions() {
			if o.dir == "out" {
				out++
			}
		}
		if out > nodes-1 {
			t.Errorf("mux %d has %d dialed sessions, want at most %d", i, out, nodes-1)
		}
	}
	// Every group's leader replicated to both followers.
	if total < nodes-1 {
		t.Errorf("%d established connections in all, want at least %d", total, nodes-1)
	}
}

// noPipeline is a NetworkTransport without pipelined AppendEntries:
// hashicorp/raft's pipeline can deadlock its replication goroutine (and
// so Shutdown) after a follower rejects an entry, which raft groups
// electing on a loaded machine do (both pipeline channels are unbuffered
// at the default MaxRPCsInFlight).
type noPipeline struct{ *raft.NetworkTransport }

func (noPipeline) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// runMuxGroups runs groups raft groups over nodes muxes; every group
// elects a leader and replicates a command that every member applies.
func runMuxGroups(t *testing.T, nodes, groups int) []*Mux {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	var muxes []*Mux
	for range nodes {
		m, err := NewMux("127.0.0.1:0", "", log)
		if err != nil {
			t.Fatal(err)
		}
		muxes = append(muxes, m)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); m.Serve() }()
		t.Cleanup(func() { m.Close(); wg.Wait() })
	}
	hl := hclogFor(log, "raft", nil)
	fsms := map[[2]int]*FSM{}
	rafts := map[[2]int]*raft.Raft{}
	for g := range groups {
		var servers []raft.Server
		for i := range nodes {
			servers = append(servers, raft.Server{ID: raft.ServerID(strconv.Itoa(i)), Address: muxes[i].Addr()})
		}
		for i := range nodes {
			trans := noPipeline{raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: muxes[i].Group(uint64(g)), MaxPool: 2, Timeout: 5 * time.Second, Logger: hl})}
			store := raft.NewInmemStore()
			c := raft.DefaultConfig()
			c.LocalID = raft.ServerID(strconv.Itoa(i))
			c.Logger = hl
			// Longer with many groups, which would otherwise keep
			// electing on a loaded machine.
			tick := time.Duration(max(1, groups/10)) * 100 * time.Millisecond
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 2*tick, 2*tick, tick
			f := NewFSM()
			r, err := raft.NewRaft(c, f, store, store, raft.NewInmemSnapshotStore(), trans)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Shutdown().Error(); trans.Close() })
			if i == 0 {
				if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
					t.Fatal(err)
				}
			}
			fsms[[2]int{g, i}], rafts[[2]int{g, i}] = f, r
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+groups)*time.Second)
	defer cancel()
	for g := range groups {
		// On a loaded machine a group can change leader between the
		// lookup and the apply: apply again on the new leader.
		data := fmt.Appendf(nil, `{"op":"set_cluster_id","cluster_id":"group-%d"}`, g)
		for {
			var leader *raft.Raft
			for leader == nil {
				for i := range nodes {
					if rafts[[2]int{g, i}].State() == raft.Leader {
						leader = rafts[[2]int{g, i}]
					}
				}
				if ctx.Err() != nil {
					t.Fatalf("group %d elected no leader", g)
				}
				time.Sleep(20 * time.Millisecond)
			}
			err := leader.Apply(data, 5*time.Second).Error()
			if err == nil {
				break
			}
			if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) || ctx.Err() != nil {
				t.Fatalf("group %d apply: %v", g, err)
			}
		}
	}
	// Every member of every group sees its own group's command only.
	for g := range groups {
		for i := range nodes {
			want := fmt.Sprintf("group-%d", g)
			for fsms[[2]int{g, i}].Metadata().ClusterID != want {
				if ctx.Err() != nil {
					t.Fatalf("group %d node %d: cluster id %q, want %q", g, i, fsms[[2]int{g, i}].Metadata().ClusterID, want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	return muxes
}

func TestMuxRejectsUnknownHeader(t *testing.T) {
	m := serveTestMux(t)
	m.unknownGroupWait = 300 * time.Millisecond
	// A stream for a group that is registered after the dial is held
	// and delivered; one for a group nobody registers is closed.
	late := StreamLayer{mux: m, group: 9}
	c9, err := late.Dial(m.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	g9, err := m.Group(9).Accept()
	if err != nil {
		t.Fatalf("connection for a group registered after the dial: %v", err)
	}
	g9.Close()
	c9.Close()
	c, err := m.Group(7).Dial(m.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := m.Group(7)
	got, err := s.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got.Close()
	c.Close()
	var other StreamLayer = StreamLayer{mux: m, group: 8}
	c2, err := other.Dial(m.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("connection for an unregistered group: read got %v, want EOF (closed by the mux)", err)
	}
	c2.Close()
	s.Close()
	if _, err := s.Accept(); err != ErrMuxClosed {
		t.Fatalf("accept after close: got %v, want ErrMuxClosed", err)
	}
}

// TestMuxDetachedGroupClosedAtOnce: a connection for a group that ran
// here and was closed (a deleted partition) is closed at once, not held
// for a group that may still come: a peer's raft still running that group
// must get an error at once, or its shutdown waits for the blocked RPC.
func TestMuxDetachedGroupClosedAtOnce(t *testing.T) {
	m := serveTestMux(t)
	m.unknownGroupWait = time.Hour // a held connection would outlive the test
	if err := m.Group(5).Close(); err != nil {
		t.Fatal(err)
	}
	peer := StreamLayer{mux: m, group: 5}
	c, err := peer.Dial(m.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("connection for a detached group: read gave %v, want EOF (closed by the mux)", err)
	}
	// Added again (a replica moved back here): held and delivered.
	s := m.Group(5)
	c2, err := peer.Dial(m.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	got, err := s.Accept()
	if err != nil {
		t.Fatalf("connection for a group added again: %v", err)
	}
	got.Close()
}

// TestMuxCloseAbortsDialedConns: closing a group's stream layer closes the
// connections it dialed, so an RPC a peer holds (the peer has not opened
// the group) fails at once and does not keep the group's raft from
// shutting down.
func TestMuxCloseAbortsDialedConns(t *testing.T) {
	m := serveTestMux(t)
	m.unknownGroupWait = time.Hour // only the dialer's Close can end the read
	s := &StreamLayer{mux: m, group: 42, closed: make(chan struct{})}
	c, err := s.Dial(m.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		readErr <- err
	}()
	time.Sleep(100 * time.Millisecond) // the read is blocked on the held stream
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("read on a closed stream layer's connection succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("closing the stream layer left its dialed connection open")
	}
	if _, err := s.Dial(m.Addr(), time.Second); err == nil {
		t.Fatal("a closed stream layer dialed a new connection")
	}
}

// serveTestMux starts a mux on a loopback port, serving until the test
// ends.
func serveTestMux(t *testing.T) *Mux {
	t.Helper()
	m, err := NewMux("127.0.0.1:0", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); m.Serve() }()
	t.Cleanup(func() { m.Close(); <-done })
	return m
}
