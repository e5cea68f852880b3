package group

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPauseKeepsWaitingJoins: a paused coordinator (its broker lost the
// raft leadership for a moment) enforces no deadline, so a JoinGroup
// waiting in it outlives the rebalance and session timeouts of the pause;
// after Resume the rebalance goes on where it was, with every deadline
// moved by the pause, and completes when the other member rejoins.
func TestPauseKeepsWaitingJoins(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a, b := h.client("g", "a"), h.client("g", "b")
		h.rebalance(a, b)
		c := h.client("g", "c")
		cj := c.joinAsync()
		if _, done := cj.poll(); done {
			t.Fatal("c's join answered before a and b rejoined")
		}
		h.c.Pause()
		time.Sleep(testRebalance + testSession + time.Second)
		if resp, done := cj.poll(); done {
			t.Fatalf("c's join answered while the coordinator was paused: %+v", resp)
		}
		if got := h.state("g"); got != "PreparingRebalance" {
			t.Fatalf("group %s while paused, want PreparingRebalance", got)
		}
		h.c.Resume(State{})
		aj, bj := a.joinAsync(), b.joinAsync()
		for _, j := range []*call[*kmsg.JoinGroupResponse]{cj, aj, bj} {
			if resp := j.wait(); resp.ErrorCode != 0 {
				t.Fatalf("join after Resume: error %d", resp.ErrorCode)
			}
		}
	})
}

// TestResumeTakesOffsetsFromTheStore: a commit whose write failed when
// the leadership was lost may have been committed all the same; after
// Resume the coordinator answers OffsetFetch with what the store holds.
func TestResumeTakesOffsetsFromTheStore(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		if codes := h.simpleCommit("g", "t1", map[int32]int64{0: 5}); codes[0] != 0 {
			t.Fatalf("commit: %v", codes)
		}
		h.c.Pause()
		h.c.Resume(State{Groups: []GroupState{{Meta: GroupMeta{Group: "g"},
			Offsets: []CommittedOffset{{Topic: "t1", Partition: 0, Offset: 9, LeaderEpoch: -1}}}}})
		if got := h.fetch("g"); got[0] != 9 {
			t.Fatalf("offset after Resume %d, want the store's 9", got[0])
		}
	})
}

// flakyStore fails SaveGroup while failing is set.
type flakyStore struct {
	*MemStore
	mu      sync.Mutex
	failing bool
}

func (s *flakyStore) SaveGroup(meta GroupMeta) error {
	s.mu.Lock()
	failing := s.failing
	s.mu.Unlock()
	if failing {
		return errors.New("no longer the raft leader")
	}
	return s.MemStore.SaveGroup(meta)
}

// TestFailedSaveIsRetried: with DurableSync, a SyncGroup waits for its
// generation to be stored; a save that failed is made again on the next
// persister pass (Resume starts one) instead of leaving the SyncGroup
// waiting for the durable-sync timeout.
func TestFailedSaveIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{MemStore: NewMemStore(), failing: true}
		h := newHarnessWith(t, store, func(c *Config) { c.DurableSync = true })
		a := h.client("g", "a")
		a.prepareJoin()
		a.applyJoin(a.joinAsync().wait())
		s := a.syncAsync(map[string][]byte{a.memberID: []byte("assign-a")})
		time.Sleep(time.Second)
		if _, done := s.poll(); done {
			t.Fatal("SyncGroup answered although its generation was not stored")
		}
		h.c.Pause()
		store.mu.Lock()
		store.failing = false
		store.mu.Unlock()
		h.c.Resume(State{})
		resp := s.wait()
		if resp.ErrorCode != 0 || string(resp.MemberAssignment) != "assign-a" {
			t.Fatalf("SyncGroup after the retried save: error %d, assignment %q", resp.ErrorCode, resp.MemberAssignment)
		}
	})
}
