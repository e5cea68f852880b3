package group

import (
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/simtel/simtel/broker/storage"
)

// fakeReplica stands in for a partition's raft group: proposals are
// applied to the log in proposal order by one goroutine (raft's FSM
// goroutine), and each wait returns once its batch is in the log.
type fakeReplica struct {
	t    *testing.T
	log  *storage.Log
	in   chan proposal
	fail bool // refuse proposals (leadership lost)
	wg   sync.WaitGroup
}

type proposal struct {
	batch []byte
	done  chan error
}

func newFakeReplica(t *testing.T, l *storage.Log) *fakeReplica {
	r := &fakeReplica{t: t, log: l, in: make(chan proposal, 16)}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for p := range r.in {
			hdrs, err := storage.ParseBatches(p.batch, 0)
			if err == nil {
				_, _, err = r.log.Append(append([]byte(nil), p.batch...), hdrs, 7)
			}
			p.done <- err
		}
	}()
	t.Cleanup(func() { close(r.in); r.wg.Wait() })
	return r
}

func (r *fakeReplica) propose(batch []byte) func() error {
	if r.fail {
		return func() error { return errors.New("leadership lost") }
	}
	p := proposal{batch: batch, done: make(chan error, 1)}
	r.in <- p
	return func() error { return <-p.done }
}

// TestReplicatedLogStore: writes through a replicated store land in the
// log in the order decided, give the same state as the in-memory model,
// and a store opened on the log afterwards (the next leader) loads it.
func TestReplicatedLogStore(t *testing.T) {
	l := openTestLog(t, t.TempDir(), nil)
	rep := newFakeReplica(t, l)
	s, err := OpenReplicatedLogStore(l, testLogger(t), rep.propose)
	if err != nil {
		t.Fatal(err)
	}
	model := NewMemStore()
	for i, o := range history() {
		if err := o(s); err != nil {
			t.Fatalf("step %d on the replicated store: %v", i, err)
		}
		if err := o(model); err != nil {
			t.Fatalf("step %d on the model: %v", i, err)
		}
	}
	want := mustLoad(t, model)
	if got := mustLoad(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("replicated store state:\n%+v\nwant\n%+v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := OpenReplicatedLogStore(l, testLogger(t), rep.propose)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, next); !reflect.DeepEqual(got, want) {
		t.Fatalf("state loaded by the next leader:\n%+v\nwant\n%+v", got, want)
	}

	// A failed proposal fails its call and every later one: the store
	// no longer knows whether its key index matches the log.
	rep.fail = true
	if err := next.Commit("g9", []CommittedOffset{{Topic: "t", Partition: 0, Offset: 1}}); err == nil {
		t.Fatal("commit with a failing proposal succeeded")
	}
	if !next.Failed() {
		t.Fatal("store not marked failed after a failed proposal")
	}
	rep.fail = false
	if err := next.SaveGroup(GroupMeta{Group: "g9"}); !errors.Is(err, ErrStoreFailed) {
		t.Fatalf("write after a failed proposal: %v, want ErrStoreFailed", err)
	}

	// Recover (the broker is leader again, nobody else having led): the
	// key index is rebuilt from the log, which lacks the refused commit,
	// and writes go through again.
	st, err := next.Recover()
	if err != nil || next.Failed() {
		t.Fatalf("Recover: %v (failed %v)", err, next.Failed())
	}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("state recovered:\n%+v\nwant\n%+v", st, want)
	}
	if err := next.SaveGroup(GroupMeta{Group: "g9"}); err != nil {
		t.Fatalf("write after Recover: %v", err)
	}
	if _, err := OpenReplicatedLogStore(l, nil, nil); err == nil {
		t.Fatal("replicated store without propose opened")
	}
}
