package cluster

import (
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// appliedFSM records the index and data of every entry raft applies.
type appliedFSM struct {
	mu      sync.Mutex
	applied map[uint64]string
	last    uint64
}

func (f *appliedFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied[l.Index] = string(l.Data)
	f.last = max(f.last, l.Index)
	return nil
}

func (f *appliedFSM) lastApplied() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *appliedFSM) get(i uint64) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.applied[i]
	return d, ok
}

func (f *appliedFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, fmt.Errorf("no snapshots") }
func (f *appliedFSM) Restore(io.ReadCloser) error         { return fmt.Errorf("no snapshots") }

// A follower whose log ends in entries of an old term (a replica that led,
// stopped and came back) applies none of them on an AppendEntries that
// only proves its log up to an earlier entry, however high the commit
// index it carries; the entries the new leader sends after it replace
// them and are applied.
func TestFollowerCommitsOnlyMatchedEntries(t *testing.T) {
	f, l := serveTestMux(t), serveTestMux(t)
	leaderAddr := raft.ServerAddress(l.Addr())

	// The follower's log: the configuration, then 9 commands of term 1,
	// of which only the first 4 (indexes 2-5) were committed.
	logs, stable := raft.NewInmemStore(), raft.NewInmemStore()
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "1", Address: raft.ServerAddress(f.Addr()), Suffrage: raft.Voter},
		{ID: "2", Address: leaderAddr, Suffrage: raft.Voter},
	}}
	entries := []*raft.Log{{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(conf)}}
	for i := uint64(2); i <= 10; i++ {
		entries = append(entries, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "old-%d", i)})
	}
	if err := logs.StoreLogs(entries); err != nil {
		t.Fatal(err)
	}
	if err := stable.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}

	trans := newGroupTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: f.Group(1), MaxPool: 2, Timeout: 10 * time.Second}), 1, nil)
	cfg := raft.DefaultConfig()
	cfg.LocalID = "1"
	// No election of its own while the test is the leader.
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Minute, time.Minute, time.Second
	cfg.LogOutput = io.Discard
	fsm := &appliedFSM{applied: map[uint64]string{}}
	r, err := raft.NewRaft(cfg, fsm, logs, stable, raft.NewDiscardSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown().Error(); trans.Close() })

	leader := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l.Group(1), MaxPool: 2, Timeout: 10 * time.Second})
	t.Cleanup(func() { leader.Close() })
	send := func(prev uint64, commit uint64, es ...*raft.Log) {
		t.Helper()
		var resp raft.AppendEntriesResponse
		err := leader.AppendEntries("1", raft.ServerAddress(f.Addr()), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("2"), Addr: []byte(leaderAddr)},
			Term:      2, Leader: []byte(leaderAddr), PrevLogEntry: prev, PrevLogTerm: 1, Entries: es, LeaderCommitIndex: commit,
		}, &resp)
		if err != nil || !resp.Success {
			t.Fatalf("AppendEntries after %d: success %v, err %v", prev, resp.Success, err)
		}
	}
	// raft counts entries applied when it hands them to the state
	// machine: wait until it has handed over i and the state machine has
	// applied all it was handed.
	waitApplied := func(i uint64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("index %d applied", i), func() bool {
			a := r.AppliedIndex()
			return a >= i && fsm.lastApplied() >= a
		})
	}

	// The new leader of term 2 has committed 6 entries of its own log;
	// it has learnt only that the follower matches it up to index 5.
	send(5, 6)
	waitApplied(5)
	if d, ok := fsm.get(6); ok || r.AppliedIndex() != 5 {
		t.Fatalf("applied index %d (entry 6: %q): the follower applied an old-term entry no AppendEntries matched", r.AppliedIndex(), d)
	}

	send(5, 6, &raft.Log{Index: 6, Term: 2, Type: raft.LogCommand, Data: []byte("new-6")})
	waitApplied(6)
	if d, _ := fsm.get(6); d != "new-6" {
		t.Fatalf("entry 6 applied as %q, want the new leader's new-6", d)
	}
}
