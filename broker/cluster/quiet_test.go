package cluster

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// TestQuietGroups: idle data groups go quiet (followers on the long
// timeouts, leaders' heartbeats answered locally) without any election;
// a write wakes a group and commits; a leader's broker that goes silent
// (its links stop, its process and watch connections stay, as with
// SIGSTOP) is replaced by an election among the others.
func TestQuietGroups(t *testing.T) {
	skipElections(t)
	nodes := startSettledNodes(t)
	const groups = 4
	const hb = time.Second
	grps := map[int][]*Group{}
	for i, n := range nodes {
		for g := range groups {
			grps[i] = append(grps[i], startTestGroup(t, n, uint64(200+g), i == 0, hb))
		}
	}
	leaderOf := func(g int, among ...int) int {
		for _, i := range among {
			if grps[i][g].Raft().State() == raft.Leader {
				return i
			}
		}
		return -1
	}
	allQuiet := func() bool { return followersQuiet(grps) }
	waitFor(t, "every group led and every follower quiet", func() bool {
		for g := range groups {
			if leaderOf(g, 0, 1, 2) < 0 {
				return false
			}
		}
		return allQuiet()
	})
	quietAnswers := func() float64 {
		var v float64
		for _, n := range nodes {
			v += promtest.ToFloat64(n.stats.quietHeartbeats)
		}
		return v
	}
	waitFor(t, "heartbeats answered locally", func() bool { return quietAnswers() > 0 })
	terms := make([]uint64, groups)
	for g := range groups {
		terms[g] = grps[leaderOf(g, 0, 1, 2)][g].Raft().CurrentTerm()
	}
	// Several of the followers' normal timeouts without a heartbeat from
	// a leader: still the same leaders.
	time.Sleep(5 * hb)
	for g := range groups {
		l := leaderOf(g, 0, 1, 2)
		if l < 0 || grps[l][g].Raft().CurrentTerm() != terms[g] {
			t.Fatalf("group %d had an election while quiet (term %d, was %d)", g, grps[max(l, 0)][g].Raft().CurrentTerm(), terms[g])
		}
	}

	// A write wakes the group, commits and is applied everywhere.
	l := leaderOf(0, 0, 1, 2)
	data, err := json.Marshal(Command{Op: OpSetClusterID, ClusterID: "quiet"})
	if err != nil {
		t.Fatal(err)
	}
	f := grps[l][0].Raft().Apply(data, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatalf("write to a quiet group: %v", err)
	}
	idx := f.Index()
	waitFor(t, "the write applied on every replica", func() bool {
		for i := range nodes {
			if grps[i][0].Raft().AppliedIndex() < idx {
				return false
			}
		}
		return true
	})
	waitFor(t, "quiet again", allQuiet)

	// The leader's broker of group 1 goes silent.
	victim := leaderOf(1, 0, 1, 2)
	var others []int
	for i := range nodes {
		if i != victim {
			others = append(others, i)
		}
	}
	silent := time.Now()
	nodes[victim].hub.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for leaderOf(1, others...) < 0 {
		if ctx.Err() != nil {
			t.Fatal("no new leader of a quiet group whose leader's broker went silent")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("new leader %v after the leader's broker went silent (heartbeat timeout %v)", time.Since(silent), hb)
}

// TestQuietTransfer: a leadership transfer to a quiet follower makes it
// stand as the transfer's candidate. Waking it for the TimeoutNow must
// not let raft stand on its own first (its last contact is old): such a
// candidate asks for pre-votes, which the other follower refuses while
// its leader lives, and ignores the TimeoutNow, so the transfer fails.
// Every group, twice: no transfer fails with its target asking for
// pre-votes.
func TestQuietTransfer(t *testing.T) {
	skipElections(t)
	nodes := startSettledNodes(t)
	const groups = 6
	const hb = time.Second
	grps := map[int][]*Group{}
	// preVotes[g] counts the pre-vote requests the replicas of group g
	// received, by candidate.
	var mu sync.Mutex
	preVotes := make([]map[raft.ServerID]int, groups)
	for g := range groups {
		preVotes[g] = map[raft.ServerID]int{}
	}
	for i, n := range nodes {
		for g := range groups {
			grp := startTestGroup(t, n, uint64(300+g), i == 0, hb)
			grps[i] = append(grps[i], grp)
			ch := make(chan raft.Observation, 16)
			grp.Raft().RegisterObserver(raft.NewObserver(ch, false, func(o *raft.Observation) bool {
				_, ok := o.Data.(raft.RequestPreVoteRequest)
				return ok
			}))
			go func() {
				for o := range ch {
					req := o.Data.(raft.RequestPreVoteRequest)
					mu.Lock()
					preVotes[g][raft.ServerID(req.ID)]++
					mu.Unlock()
				}
			}()
			t.Cleanup(func() { _ = grp.Close(); close(ch) })
		}
	}
	leaderOf := func(g int) *Group {
		for i := range nodes {
			if grps[i][g].Raft().State() == raft.Leader {
				return grps[i][g]
			}
		}
		return nil
	}
	allQuiet := func() bool {
		for g := range groups {
			if leaderOf(g) == nil {
				return false
			}
		}
		return followersQuiet(grps)
	}
	for round := range 2 {
		waitFor(t, "every group led and every follower quiet", allQuiet)
		mu.Lock()
		for g := range groups {
			clear(preVotes[g])
		}
		mu.Unlock()
		targets := make([]raft.ServerID, groups)
		errs := make([]error, groups)
		// stood: the pre-vote requests the target sent while its transfer
		// ran; skipped: it was not a quiet follower when it began (on a
		// busy machine a follower also wakes when its leader's broker is
		// late, and stands like any raft follower).
		stood := make([]int, groups)
		skipped := make([]bool, groups)
		var wg sync.WaitGroup
		for g := range groups {
			l := leaderOf(g)
			if l == nil {
				t.Fatalf("round %d: group %d lost its leader", round, g)
			}
			f := l.Raft().GetConfiguration()
			if err := f.Error(); err != nil {
				t.Fatal(err)
			}
			_, lid := l.Raft().LeaderWithID()
			for _, s := range f.Configuration().Servers {
				if s.ID == lid {
					continue
				}
				targets[g] = s.ID
				i, err := strconv.Atoi(string(s.ID))
				if err != nil {
					t.Fatal(err)
				}
				tg := grps[i][g]
				wg.Add(1)
				go func() {
					defer wg.Done()
					// The case that failed: the leader answers the
					// target's heartbeats locally, so raft on the target
					// last had contact more than a heartbeat timeout ago.
					deadline := time.Now().Add(30 * time.Second)
					for time.Since(tg.Raft().LastContact()) < hb+hb/2 && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
					}
					tg.trans.quiet.mu.Lock()
					on := tg.trans.quiet.on
					tg.trans.quiet.mu.Unlock()
					if !on || tg.Raft().State() != raft.Follower {
						skipped[g] = true
						return
					}
					mu.Lock()
					before := preVotes[g][s.ID]
					mu.Unlock()
					errs[g] = l.Raft().LeadershipTransferToServer(s.ID, s.Address).Error()
					mu.Lock()
					stood[g] = preVotes[g][s.ID] - before
					mu.Unlock()
				}()
				break
			}
		}
		wg.Wait()
		for g := range groups {
			switch {
			case skipped[g]:
				t.Logf("round %d: group %d: %s was not a quiet follower when its transfer was due; not transferred", round, g, targets[g])
			case stood[g] > 0 && errs[g] != nil:
				t.Errorf("round %d: group %d: the transfer's target %s asked for %d pre-votes and the transfer failed (%v): it stood on its own, not for the transfer",
					round, g, targets[g], stood[g], errs[g])
			case errs[g] != nil:
				// A transfer can time out on a busy machine.
				t.Logf("round %d: group %d: transfer to %s: %v", round, g, targets[g], errs[g])
			}
		}
	}
}

// followersQuiet reports whether every group's follower on every node has
// gone quiet.
func followersQuiet(grps map[int][]*Group) bool {
	for _, gs := range grps {
		for _, grp := range gs {
			grp.trans.quiet.mu.Lock()
			on := grp.trans.quiet.on
			grp.trans.quiet.mu.Unlock()
			if grp.Raft().State() == raft.Follower && !on {
				return false
			}
		}
	}
	return true
}

// TestHurriedQuietHeartbeat: a quiet leader's heartbeat waits in the
// transport until half a heartbeat timeout after the previous answer
// (here half an hour); once the group's heartbeats are hurried (Sleep,
// whose raft shutdown waits for the heartbeat goroutine) it returns at
// once to go out as a real one, and after calmHeartbeats the next waits
// again.
func TestHurriedQuietHeartbeat(t *testing.T) {
	const target = raft.ServerAddress("127.0.0.1:1")
	hub := &heartbeatHub{}
	now := time.Now()
	hub.mu.peers = map[raft.ServerAddress]*heartbeatLink{target: {addr: target, gen: 1, lastOK: now.Add(time.Hour)}}
	tr := makeGroupTransport(nil, 7, hub)
	tr.node = &Node{}
	tr.quiet.hb = time.Hour
	tr.quiet.busy = now.Add(-24 * time.Hour)
	tr.answered.m = map[raft.ServerAddress]heartbeatMark{target: {at: now, last: now, since: now.Add(-24 * time.Hour), term: 3, gen: 1,
		resp: raft.AppendEntriesResponse{Term: 3, Success: true}}}
	t.Cleanup(tr.detach)
	args := &raft.AppendEntriesRequest{Term: 3}
	answer := func() <-chan bool {
		out := make(chan bool, 1)
		go func() {
			var resp raft.AppendEntriesResponse
			out <- tr.answerQuiet(target, args, &resp)
		}()
		return out
	}

	held := answer()
	select {
	case ok := <-held:
		t.Fatalf("the quiet heartbeat returned (%v) before its time", ok)
	case <-time.After(200 * time.Millisecond):
	}
	tr.hurryHeartbeats()
	select {
	case ok := <-held:
		if ok {
			t.Fatal("a hurried heartbeat was answered locally; it must go out")
		}
	case <-time.After(time.Minute):
		t.Fatal("the quiet heartbeat still waits after hurryHeartbeats")
	}
	if ok := <-answer(); ok {
		t.Fatal("a heartbeat while hurried was answered locally")
	}

	tr.calmHeartbeats()
	select {
	case ok := <-answer():
		t.Fatalf("after calmHeartbeats a quiet heartbeat returned (%v) before its time", ok)
	case <-time.After(200 * time.Millisecond):
	}
}
