package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestDormantGroupSleepsAndWakes: every replica of a group sleeps (no
// raft instance left running); one of them is asked to elect, the
// others wake for its vote requests and AppendEntries, and the group
// commits again with the state machines where they were.
func TestDormantGroupSleepsAndWakes(t *testing.T) {
	skipElections(t)
	nodes := startSettledNodes(t)
	const hb = 500 * time.Millisecond
	var grps []*Group
	fsms := make([]*countFSM, len(nodes))
	for i, n := range nodes {
		fsms[i] = &countFSM{}
		g, err := n.StartGroup(GroupConfig{Group: 310, Dir: filepath.Join(t.TempDir(), "g"), FSM: fsms[i],
			Peers: []int32{0, 1, 2}, Bootstrap: true, HeartbeatTimeout: hb, Logger: n.log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		grps = append(grps, g)
	}
	leader := func() *Group {
		for _, g := range grps {
			if g.Raft().State() == raft.Leader {
				return g
			}
		}
		return nil
	}
	observed := make(chan raft.Observation, 64)
	obs := raft.NewObserver(observed, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	grps[2].RegisterObserver(obs)
	writes := 0
	write := func(what string) {
		t.Helper()
		writes++
		data := []byte(what)
		var f raft.ApplyFuture
		waitFor(t, "a leader that takes "+what, func() bool {
			l := leader()
			if l == nil {
				return false
			}
			f = l.Raft().Apply(data, 5*time.Second)
			return f.Error() == nil
		})
		deadline := time.Now().Add(30 * time.Second)
		for {
			done := true
			var state []string
			for i, g := range grps {
				r := g.Raft()
				state = append(state, fmt.Sprintf("replica %d: %v, applied %d, commit %d, last %d, %d commands in the state machine", i, r.State(), r.AppliedIndex(), r.CommitIndex(), r.LastIndex(), fsms[i].count()))
				done = done && r.AppliedIndex() >= f.Index() && fsms[i].count() == writes
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s (entry %d) not applied on every replica after 30 s: %s", what, f.Index(), strings.Join(state, "; "))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	write("before")

	// The leader first: a follower that slept first would wake for its
	// next heartbeat.
	old := leader()
	sleepAll := func() {
		t.Helper()
		if l := leader(); l != nil {
			if err := l.Sleep(); err != nil {
				t.Fatal(err)
			}
		}
		for _, g := range grps {
			if err := g.Sleep(); err != nil {
				t.Fatal(err)
			}
		}
	}
	sleepAll()
	for i, g := range grps {
		if !g.Dormant() || g.Raft().State() != raft.Shutdown {
			t.Fatalf("replica %d: dormant %v, raft %v after Sleep", i, g.Dormant(), g.Raft().State())
		}
		if got := fsms[i].count(); got != 1 {
			t.Fatalf("replica %d's state machine has %d commands after Sleep, want 1", i, got)
		}
	}
	// Nothing wakes a dormant group but an RPC or a call.
	time.Sleep(3 * hb)
	for i, g := range grps {
		if !g.Dormant() {
			t.Fatalf("replica %d woke with nothing sent to it", i)
		}
	}
	for len(observed) > 0 {
		<-observed
	}

	var elector *Group
	for _, g := range grps {
		if g != old {
			elector = g
			break
		}
	}
	if !elector.Elect() {
		t.Fatal("a woken replica did not take the election")
	}
	waitFor(t, "every replica awake with the woken replica leading", func() bool {
		for _, g := range grps {
			if g.Dormant() {
				return false
			}
		}
		return leader() == elector
	})
	write("after")
	// The observer registered before the sleep saw the new leader.
	deadline := time.After(10 * time.Second)
	for seen := false; !seen; {
		select {
		case o := <-observed:
			lo := o.Data.(raft.LeaderObservation)
			seen = lo.LeaderID != ""
		case <-deadline:
			t.Fatal("an observer registered before the sleep saw no leader after it")
		}
	}
	// Sleeping and waking again, with a write as the only news.
	sleepAll()
	if !old.Elect() {
		t.Fatal("the first leader, woken, did not take the election")
	}
	write("again")

	// The leader puts the group to sleep once its followers have
	// acknowledged everything (the commit index comes with the
	// AppendEntries after the write's).
	l := leader()
	waitFor(t, "the leader putting the group to sleep", func() bool {
		n, err := l.SleepAll()
		if err != nil && !errors.Is(err, ErrNotIdle) {
			t.Fatal(err)
		}
		if err == nil && n != 2 {
			t.Fatalf("%d followers slept, want 2", n)
		}
		return err == nil
	})
	for i, g := range grps {
		if !g.Dormant() {
			t.Fatalf("replica %d awake after SleepAll", i)
		}
		id, _, ok := g.DormantLeader()
		if !ok || g.Raft() == nil || raft.ServerID(fmt.Sprint(id)) != l.rc.LocalID {
			t.Fatalf("replica %d slept with leader %d (%v), want %s", i, id, ok, l.rc.LocalID)
		}
	}
	if _, err := l.SleepAll(); !errors.Is(err, ErrNotIdle) {
		t.Fatalf("SleepAll of a dormant group: %v, want ErrNotIdle", err)
	}
	if !l.Elect() {
		t.Fatal("the dormant leader did not take the election")
	}
	write("after SleepAll")
}

// countFSM counts the commands applied to it; its snapshot is the count,
// so a command applied twice (or lost) across a restore shows.
type countFSM struct {
	mu sync.Mutex
	n  int
}

func (f *countFSM) Apply(*raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return nil
}

func (f *countFSM) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return countSnapshot(f.count()), nil }

func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var n uint64
	if err := binary.Read(rc, binary.BigEndian, &n); err != nil {
		return err
	}
	f.mu.Lock()
	f.n = int(n)
	f.mu.Unlock()
	return nil
}

type countSnapshot int

func (s countSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := binary.Write(sink, binary.BigEndian, uint64(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (countSnapshot) Release() {}
