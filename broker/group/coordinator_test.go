package group

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestTwoMembersJoinAndSync(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a, b := h.client("g", "a"), h.client("g", "b")
		a.prepareJoin()
		b.prepareJoin()
		ja, jb := a.joinAsync(), b.joinAsync()
		// The initial rebalance delay holds both joins so that they
		// land in one generation.
		if _, done := ja.poll(); done {
			t.Fatal("join returned during the initial rebalance delay")
		}
		ra, rb := ja.wait(), jb.wait()
		a.applyJoin(ra)
		b.applyJoin(rb)
		if ra.Generation != 1 || rb.Generation != 1 {
			t.Fatalf("generations %d, %d; want 1", ra.Generation, rb.Generation)
		}
		if ra.LeaderID != a.memberID || rb.LeaderID != a.memberID {
			t.Fatalf("leader %q/%q, want first joiner %q", ra.LeaderID, rb.LeaderID, a.memberID)
		}
		if ra.Protocol == nil || *ra.Protocol != "range" || ra.ProtocolType == nil || *ra.ProtocolType != "consumer" {
			t.Fatalf("protocol %v type %v", ra.Protocol, ra.ProtocolType)
		}
		if len(ra.Members) != 2 || len(rb.Members) != 0 {
			t.Fatalf("leader got %d members, follower %d", len(ra.Members), len(rb.Members))
		}
		got := map[string]string{}
		for _, m := range ra.Members {
			var md kmsg.ConsumerMemberMetadata
			if err := md.ReadFrom(m.ProtocolMetadata); err != nil {
				t.Fatalf("member metadata: %v", err)
			}
			got[m.MemberID] = string(md.UserData)
		}
		if got[a.memberID] != "a" || got[b.memberID] != "b" {
			t.Fatalf("leader's member metadata %v", got)
		}
		if !strings.HasPrefix(a.memberID, "a-") || len(a.memberID) != len("a-")+36 {
			t.Fatalf("member id %q is not clientID-uuid", a.memberID)
		}
		if st := h.state("g"); st != "CompletingRebalance" {
			t.Fatalf("state %s", st)
		}

		sb := b.syncAsync(nil)
		if _, done := sb.poll(); done {
			t.Fatal("follower sync returned before the leader's")
		}
		sa := a.syncAsync(map[string][]byte{a.memberID: []byte("A"), b.memberID: []byte("B")})
		if r := sa.wait(); r.ErrorCode != 0 || string(r.MemberAssignment) != "A" {
			t.Fatalf("leader sync: %v %q", kerr.ErrorForCode(r.ErrorCode), r.MemberAssignment)
		}
		if r := sb.wait(); r.ErrorCode != 0 || string(r.MemberAssignment) != "B" || r.Version != 5 {
			t.Fatalf("follower sync: %v %q v%d", kerr.ErrorForCode(r.ErrorCode), r.MemberAssignment, r.Version)
		}
		d := h.describe("g")
		if d.State != "Stable" || d.Protocol != "range" || len(d.Members) != 2 {
			t.Fatalf("describe: %+v", d)
		}
		if d.Members[0].ClientID != "a" || d.Members[0].ClientHost != "/10.0.0.1" || string(d.Members[0].MemberAssignment) != "A" {
			t.Fatalf("describe member: %+v", d.Members[0])
		}
		if d.AuthorizedOperations != -2147483648 {
			t.Fatalf("authorized operations %d", d.AuthorizedOperations)
		}
		wantCode(t, "heartbeat", a.heartbeat(), nil)
		// A follower rejoining with unchanged metadata in a Stable
		// group gets the current generation, no rebalance.
		r := b.joinAsync().wait()
		if r.ErrorCode != 0 || r.Generation != 1 || h.state("g") != "Stable" {
			t.Fatalf("follower rejoin: %v gen %d state %s", kerr.ErrorForCode(r.ErrorCode), r.Generation, h.state("g"))
		}
	})
}

func TestNewMemberTriggersRebalance(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a, b := h.client("g", "a"), h.client("g", "b")
		leader := h.rebalance(a, b)
		if leader != a {
			t.Fatalf("leader %s", leader.name)
		}
		gen := a.gen

		c := h.client("g", "c")
		c.prepareJoin()
		jc := c.joinAsync()
		if _, done := jc.poll(); done {
			t.Fatal("new member's join returned before the others rejoined")
		}
		if st := h.state("g"); st != "PreparingRebalance" {
			t.Fatalf("state %s", st)
		}
		wantCode(t, "a heartbeat", a.heartbeat(), kerr.RebalanceInProgress)
		wantCode(t, "b heartbeat", b.heartbeat(), kerr.RebalanceInProgress)
		// Members may still commit with the current generation while
		// preparing (consumers commit before revoking partitions).
		if codes := a.commit(map[int32]int64{0: 5}); codes[0] != 0 {
			t.Fatalf("commit while preparing: %v", kerr.ErrorForCode(codes[0]))
		}

		ja := a.joinAsync()
		if _, done := ja.poll(); done {
			t.Fatal("join returned before b rejoined")
		}
		jb := b.joinAsync()
		ra, rb, rc := ja.wait(), jb.wait(), jc.wait()
		for _, r := range []*kmsg.JoinGroupResponse{ra, rb, rc} {
			if r.ErrorCode != 0 || r.Generation != gen+1 || r.LeaderID != a.memberID {
				t.Fatalf("rejoin: %v gen %d leader %s", kerr.ErrorForCode(r.ErrorCode), r.Generation, r.LeaderID)
			}
		}
		if len(ra.Members) != 3 {
			t.Fatalf("leader got %d members", len(ra.Members))
		}
		// An old-generation heartbeat is now illegal.
		wantCode(t, "stale heartbeat", a.heartbeat(), kerr.IllegalGeneration)
		a.applyJoin(ra)
		b.applyJoin(rb)
		c.applyJoin(rc)
		// Commits are refused until the assignment is known.
		if codes := a.commit(map[int32]int64{0: 6}); codes[0] != kerr.RebalanceInProgress.Code {
			t.Fatalf("commit while completing: %v", kerr.ErrorForCode(codes[0]))
		}
		// Rejoining with unchanged metadata while the generation is
		// being completed just returns it again (a lost response).
		h.rebalance(a, b, c)
		if a.gen != gen+1 {
			t.Fatalf("generation %d, want %d", a.gen, gen+1)
		}
	})
}

func TestSessionExpiryRemovesSilentMember(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a, b := h.client("g", "a"), h.client("g", "b")
		h.rebalance(a, b)
		gen := a.gen
		// a heartbeats every 3s; b says nothing. After b's 10s session
		// it is removed and a learns of the rebalance.
		var code int16
		for range 5 {
			time.Sleep(3 * time.Second)
			if code = a.heartbeat(); code != 0 {
				break
			}
		}
		wantCode(t, "a heartbeat after b expired", code, kerr.RebalanceInProgress)
		wantCode(t, "b heartbeat", b.heartbeat(), kerr.UnknownMemberID)
		r := a.joinAsync().wait()
		if r.ErrorCode != 0 || r.Generation != gen+1 || len(r.Members) != 1 {
			t.Fatalf("rejoin: %v gen %d members %d", kerr.ErrorForCode(r.ErrorCode), r.Generation, len(r.Members))
		}

		// And the last member expiring empties the group.
		time.Sleep(testSession + time.Second)
		if st := h.state("g"); st != "Empty" {
			t.Fatalf("state %s after everyone expired", st)
		}
	})
}

func TestRebalanceTimeoutDropsMembersThatDoNotRejoin(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a, b := h.client("g", "a"), h.client("g", "b")
		h.rebalance(a, b)
		start := time.Now()
		ja := a.joinAsync() // leader rejoin: rebalance
		// b keeps heartbeating but never rejoins.
		for {
			if _, done := ja.poll(); done {
				break
			}
			wantCode(t, "b heartbeat", b.heartbeat(), kerr.RebalanceInProgress)
			time.Sleep(time.Second)
		}
		r := ja.wait()
		if waited := time.Since(start); waited < testRebalance || waited > testRebalance+2*time.Second {
			t.Fatalf("join completed after %v, want the %v rebalance timeout", waited, testRebalance)
		}
		if r.ErrorCode != 0 || len(r.Members) != 1 {
			t.Fatalf("join: %v with %d members", kerr.ErrorForCode(r.ErrorCode), len(r.Members))
		}
		wantCode(t, "b heartbeat", b.heartbeat(), kerr.UnknownMemberID)
	})
}

func TestPendingSyncTimeoutRemovesLeader(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a, b := h.client("g", "a"), h.client("g", "b")
		h.rebalance(a, b)
		ja, jb := a.joinAsync(), b.joinAsync()
		a.applyJoin(ja.wait())
		b.applyJoin(jb.wait())
		// b syncs, the leader a never does (it heartbeats, so its
		// session stays alive): after the rebalance timeout a is
		// removed and b is told to rejoin.
		sb := b.syncAsync(nil)
		for {
			if _, done := sb.poll(); done {
				break
			}
			a.heartbeat()
			time.Sleep(time.Second)
		}
		wantCode(t, "b sync", sb.wait().ErrorCode, kerr.RebalanceInProgress)
		wantCode(t, "a heartbeat", a.heartbeat(), kerr.UnknownMemberID)
	})
}

func TestStaticMemberRestartWithoutRebalance(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		s := h.static("g", "s", "inst-1")
		d := h.client("g", "d")
		// Static members skip MEMBER_ID_REQUIRED.
		h.rebalance(s, d)
		if !strings.HasPrefix(s.memberID, "inst-1-") {
			t.Fatalf("static member id %q", s.memberID)
		}
		gen := s.gen
		oldID := s.memberID

		// The static member restarts: new process, empty member id.
		restarted := h.static("g", "s", "inst-1")
		resp := restarted.joinAsync().wait()
		wantCode(t, "restart join", resp.ErrorCode, nil)
		if resp.MemberID == oldID || !strings.HasPrefix(resp.MemberID, "inst-1-") {
			t.Fatalf("restart got member id %q (old %q)", resp.MemberID, oldID)
		}
		if resp.Generation != gen {
			t.Fatalf("restart got generation %d, want %d (no rebalance)", resp.Generation, gen)
		}
		// s was the leader: the restarted instance must not think it
		// leads (it would compute an assignment nobody receives).
		if resp.LeaderID == resp.MemberID || len(resp.Members) != 0 {
			t.Fatalf("restarted member told it leads: leader %q members %d", resp.LeaderID, len(resp.Members))
		}
		restarted.applyJoin(resp)
		if st := h.state("g"); st != "Stable" {
			t.Fatalf("state %s after static restart", st)
		}
		sr := restarted.syncAsync(nil).wait()
		if sr.ErrorCode != 0 || string(sr.MemberAssignment) != string(assignmentFor(oldID)) {
			t.Fatalf("restarted sync: %v %q", kerr.ErrorForCode(sr.ErrorCode), sr.MemberAssignment)
		}
		wantCode(t, "dynamic member heartbeat", d.heartbeat(), nil)
		wantCode(t, "restarted heartbeat", restarted.heartbeat(), nil)
		// The old incarnation is fenced everywhere.
		wantCode(t, "old heartbeat", s.heartbeat(), kerr.FencedInstanceID)
		if codes := s.commit(map[int32]int64{0: 1}); codes[0] != kerr.FencedInstanceID.Code {
			t.Fatalf("old commit: %v", kerr.ErrorForCode(codes[0]))
		}
		wantCode(t, "old sync", s.syncAsync(nil).wait().ErrorCode, kerr.FencedInstanceID)
		wantCode(t, "old join", s.joinAsync().wait().ErrorCode, kerr.FencedInstanceID)

		// The next rebalance has the new id as leader.
		leader := h.rebalance(restarted, d)
		if leader != restarted {
			t.Fatalf("leader after rebalance: %s", leader.name)
		}

		// A static restart that changes the group's selected protocol
		// does rebalance.
		lone := h.static("g2", "lone", "inst-2")
		lone.protos = []string{"range", "roundrobin"}
		h.rebalance(lone)
		changed := h.static("g2", "lone", "inst-2")
		changed.protos = []string{"roundrobin", "range"}
		jc := changed.joinAsync()
		r := jc.wait()
		if r.ErrorCode != 0 || r.Generation != lone.gen+1 || *r.Protocol != "roundrobin" || r.LeaderID != r.MemberID {
			t.Fatalf("static restart with new protocol: %v gen %d protocol %v leader %v",
				kerr.ErrorForCode(r.ErrorCode), r.Generation, *r.Protocol, r.LeaderID == r.MemberID)
		}
		if st := h.state("g2"); st != "CompletingRebalance" {
			t.Fatalf("state %s", st)
		}
	})
}

func TestStaticMemberLeaveAndExpiry(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		s1, s2, d := h.static("g", "s1", "i1"), h.static("g", "s2", "i2"), h.client("g", "d")
		h.rebalance(s1, s2, d)

		// Admin removal by instance id (LeaveGroup v3+).
		r := kmsg.NewPtrLeaveGroupRequest()
		r.Version = 4
		r.Group = "g"
		r.Members = []kmsg.LeaveGroupRequestMember{
			{InstanceID: kmsg.StringPtr("i1")},
			{InstanceID: kmsg.StringPtr("nope")},
			{MemberID: "unknown"},
		}
		resp := h.c.LeaveGroup(r)
		if resp.ErrorCode != 0 || len(resp.Members) != 3 {
			t.Fatalf("leave: %v %d members", kerr.ErrorForCode(resp.ErrorCode), len(resp.Members))
		}
		wantCode(t, "leave i1", resp.Members[0].ErrorCode, nil)
		if resp.Members[0].MemberID != s1.memberID {
			t.Fatalf("leave response member id %q, want %q", resp.Members[0].MemberID, s1.memberID)
		}
		wantCode(t, "leave unknown instance", resp.Members[1].ErrorCode, kerr.UnknownMemberID)
		wantCode(t, "leave unknown member", resp.Members[2].ErrorCode, kerr.UnknownMemberID)
		wantCode(t, "s1 heartbeat", s1.heartbeat(), kerr.UnknownMemberID)
		wantCode(t, "s2 heartbeat", s2.heartbeat(), kerr.RebalanceInProgress)
		h.rebalance(s2, d)

		// A static member's session timeout still removes it; the
		// static member that did not rejoin in time is kept through
		// the join phase but then fails to sync and is dropped.
		for range 4 {
			time.Sleep(3 * time.Second)
			d.heartbeat()
		}
		wantCode(t, "d heartbeat", d.heartbeat(), kerr.RebalanceInProgress)
		wantCode(t, "s2 heartbeat", s2.heartbeat(), kerr.UnknownMemberID)
		r2 := d.joinAsync().wait()
		if r2.ErrorCode != 0 || len(r2.Members) != 1 {
			t.Fatalf("rejoin: %v, %d members", kerr.ErrorForCode(r2.ErrorCode), len(r2.Members))
		}
	})
}

func TestLeaveGroup(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		if !h.c.Quiet() {
			t.Fatal("a coordinator without groups is not quiet")
		}
		a, b := h.client("g", "a"), h.client("g", "b")
		h.rebalance(a, b)
		if h.c.Quiet() {
			t.Fatal("quiet with two members")
		}

		leave := func(version int16, memberID string) *kmsg.LeaveGroupResponse {
			r := kmsg.NewPtrLeaveGroupRequest()
			r.Version = version
			r.Group = "g"
			r.MemberID = memberID
			resp := h.c.LeaveGroup(r)
			if resp.Version != version || (version < 3 && resp.Members != nil) {
				t.Fatalf("leave response v%d members %v", resp.Version, resp.Members)
			}
			return resp
		}
		wantCode(t, "leave unknown", leave(1, "nobody").ErrorCode, kerr.UnknownMemberID)
		wantCode(t, "leave b", leave(2, b.memberID).ErrorCode, nil)
		wantCode(t, "a heartbeat", a.heartbeat(), kerr.RebalanceInProgress)
		wantCode(t, "b heartbeat", b.heartbeat(), kerr.UnknownMemberID)
		// a rejoins alone: the rebalance completes at once.
		r := a.joinAsync().wait()
		if r.ErrorCode != 0 || len(r.Members) != 1 {
			t.Fatalf("rejoin: %v %d", kerr.ErrorForCode(r.ErrorCode), len(r.Members))
		}
		a.applyJoin(r)
		wantCode(t, "leave a", leave(0, a.memberID).ErrorCode, nil)
		if d := h.describe("g"); d.State != "Empty" || len(d.Members) != 0 || d.ProtocolType != "consumer" {
			t.Fatalf("after last leave: %+v", d)
		}
		synctest.Wait() // the persister saves the empty group
		if !h.c.Quiet() {
			t.Fatal("not quiet once the last member left and the group was saved")
		}
		wantCode(t, "empty group id", func() int16 {
			r := kmsg.NewPtrLeaveGroupRequest()
			r.Version = 4
			return h.c.LeaveGroup(r).ErrorCode
		}(), kerr.InvalidGroupID)
	})
}

func TestJoinErrors(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		join := func(mod func(*kmsg.JoinGroupRequest)) *kmsg.JoinGroupResponse {
			r := h.client("g", "x").joinReq()
			mod(r)
			return h.c.JoinGroup(h.t.Context(), r)
		}
		wantCode(t, "empty group", join(func(r *kmsg.JoinGroupRequest) { r.Group = "" }).ErrorCode, kerr.InvalidGroupID)
		wantCode(t, "short session", join(func(r *kmsg.JoinGroupRequest) { r.SessionTimeoutMillis = 10 }).ErrorCode, kerr.InvalidSessionTimeout)
		wantCode(t, "long session", join(func(r *kmsg.JoinGroupRequest) { r.SessionTimeoutMillis = 1 << 30 }).ErrorCode, kerr.InvalidSessionTimeout)
		wantCode(t, "unknown member of unknown group", join(func(r *kmsg.JoinGroupRequest) { r.MemberID = "ghost" }).ErrorCode, kerr.UnknownMemberID)
		wantCode(t, "no protocols", join(func(r *kmsg.JoinGroupRequest) { r.Protocols = nil }).ErrorCode, kerr.InconsistentGroupProtocol)
		// Failed joins do not leave groups behind.
		if resp := h.c.ListGroups(kmsg.NewPtrListGroupsRequest()); len(resp.Groups) != 0 {
			t.Fatalf("groups after failed joins: %+v", resp.Groups)
		}

		a := h.client("g", "a")
		h.rebalance(a)
		wantCode(t, "other protocol type", join(func(r *kmsg.JoinGroupRequest) { r.ProtocolType = "connect" }).ErrorCode, kerr.InconsistentGroupProtocol)
		wantCode(t, "no common protocol", join(func(r *kmsg.JoinGroupRequest) {
			r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "sticky"}}
		}).ErrorCode, kerr.InconsistentGroupProtocol)
		wantCode(t, "unknown member", join(func(r *kmsg.JoinGroupRequest) { r.MemberID = "ghost" }).ErrorCode, kerr.UnknownMemberID)

		// Before v4 there is no MEMBER_ID_REQUIRED round trip.
		old := h.client("g", "old")
		old.version = 3
		jo := old.joinAsync()
		wantCode(t, "a heartbeat", a.heartbeat(), kerr.RebalanceInProgress)
		ja := a.joinAsync()
		ro := jo.wait()
		if ro.ErrorCode != 0 || !strings.HasPrefix(ro.MemberID, "old-") || ro.Version != 3 {
			t.Fatalf("v3 join: %v %q v%d", kerr.ErrorForCode(ro.ErrorCode), ro.MemberID, ro.Version)
		}
		ja.wait()
	})
}

func TestProtocolVote(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a, b, c := h.client("g", "a"), h.client("g", "b"), h.client("g", "c")
		a.protos = []string{"range", "roundrobin"}
		b.protos = []string{"roundrobin", "range", "sticky"}
		c.protos = []string{"sticky", "roundrobin"}
		// Only roundrobin is supported by all three.
		for _, cl := range []*client{a, b, c} {
			cl.prepareJoin()
		}
		ja, jb, jc := a.joinAsync(), b.joinAsync(), c.joinAsync()
		for _, j := range []*call[*kmsg.JoinGroupResponse]{ja, jb, jc} {
			r := j.wait()
			if r.ErrorCode != 0 || r.Protocol == nil || *r.Protocol != "roundrobin" {
				t.Fatalf("join: %v protocol %v", kerr.ErrorForCode(r.ErrorCode), r.Protocol)
			}
		}
	})
}

func TestJoinCancelAndClose(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a, b := h.client("g", "a"), h.client("g", "b")
		h.rebalance(a, b)
		// A new member whose client goes away mid-join is dropped at
		// once instead of holding the rebalance until its deadline.
		c := h.client("g", "c")
		ctx, cancel := context.WithCancel(c.ctx)
		c.ctx = ctx
		jc := c.joinAsync()
		ja := a.joinAsync()
		if _, done := ja.poll(); done {
			t.Fatal("join completed without b")
		}
		cancel()
		wantCode(t, "cancelled join", jc.wait().ErrorCode, kerr.RebalanceInProgress)
		jb := b.joinAsync()
		ra, rb := ja.wait(), jb.wait()
		if ra.ErrorCode != 0 || rb.ErrorCode != 0 || len(ra.Members) != 2 {
			t.Fatalf("joins after cancel: %v %v members %d", kerr.ErrorForCode(ra.ErrorCode), kerr.ErrorForCode(rb.ErrorCode), len(ra.Members))
		}
		a.applyJoin(ra)
		b.applyJoin(rb)

		// Close releases blocked calls.
		sb := b.syncAsync(nil)
		if _, done := sb.poll(); done {
			t.Fatal("sync returned early")
		}
		if err := h.c.Close(); err != nil {
			t.Fatal(err)
		}
		wantCode(t, "sync after close", sb.wait().ErrorCode, kerr.CoordinatorNotAvailable)
		wantCode(t, "heartbeat after close", a.heartbeat(), kerr.CoordinatorNotAvailable)
		if codes := h.simpleCommit("g2", "t1", map[int32]int64{0: 1}); codes[0] != kerr.CoordinatorNotAvailable.Code {
			t.Fatalf("commit after close: %v", kerr.ErrorForCode(codes[0]))
		}
	})
}

func TestInitialDelayExtendsWhileMembersArrive(t *testing.T) {
	bubble(t, func(c *Config) { c.InitialRebalanceDelay = 3 * time.Second }, func(t *testing.T, h *harness) {
		start := time.Now()
		var joins []*call[*kmsg.JoinGroupResponse]
		for i := range 3 {
			cl := h.client("g", string(rune('a'+i)))
			joins = append(joins, cl.joinAsync())
			time.Sleep(2 * time.Second) // each arrival extends the delay
		}
		for _, j := range joins {
			if r := j.wait(); r.ErrorCode != 0 || r.Generation != 1 {
				t.Fatalf("join: %v gen %d", kerr.ErrorForCode(r.ErrorCode), r.Generation)
			}
		}
		if took := time.Since(start); took < 6*time.Second {
			t.Fatalf("initial rebalance completed after %v, before the extended delay", took)
		}
	})
}

func TestOffsetCommitValidation(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a, b := h.client("g", "a"), h.client("g", "b")
		h.rebalance(a, b)

		if codes := a.commit(map[int32]int64{0: 10, 1: 11}); codes[0] != 0 || codes[1] != 0 {
			t.Fatalf("member commit: %v", codes)
		}
		stale := *a
		stale.gen--
		wantCode(t, "stale generation commit", stale.commit(map[int32]int64{0: 99})[0], kerr.IllegalGeneration)
		ghost := *a
		ghost.memberID = "ghost"
		wantCode(t, "unknown member commit", ghost.commit(map[int32]int64{0: 99})[0], kerr.UnknownMemberID)
		wantCode(t, "simple commit to a live group", h.simpleCommit("g", "t1", map[int32]int64{0: 99})[0], kerr.UnknownMemberID)
		if got := h.fetch("g"); got[0] != 10 || got[1] != 11 || got[2] != -1 {
			t.Fatalf("offsets after rejected commits: %v", got)
		}

		// Per-partition errors.
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Version = 8
		r.Group = "g"
		r.MemberID = a.memberID
		r.Generation = a.gen
		withPartitions(r, "t1", map[int32]int64{2: 20, 3: 30})
		r.Topics[0].Partitions[1].Metadata = kmsg.StringPtr(strings.Repeat("x", 4097))
		withPartitions(r, "missing", map[int32]int64{0: 1})
		withPartitions(r, "t2", map[int32]int64{10: 1})
		resp := h.c.OffsetCommit(r)
		wantCode(t, "t1/2", resp.Topics[0].Partitions[0].ErrorCode, nil)
		wantCode(t, "t1/3 metadata", resp.Topics[0].Partitions[1].ErrorCode, kerr.OffsetMetadataTooLarge)
		wantCode(t, "missing topic", resp.Topics[1].Partitions[0].ErrorCode, kerr.UnknownTopicOrPartition)
		wantCode(t, "partition out of range", resp.Topics[2].Partitions[0].ErrorCode, kerr.UnknownTopicOrPartition)
		if got := h.fetch("g"); got[2] != 20 || got[3] != -1 {
			t.Fatalf("offsets after partial commit: %v", got)
		}

		// Simple commits create an offsets-only Empty group; member
		// commits to an unknown group are from a dead generation.
		if codes := h.simpleCommit("manual", "t1", map[int32]int64{0: 7}); codes[0] != 0 {
			t.Fatalf("simple commit: %v", kerr.ErrorForCode(codes[0]))
		}
		if d := h.describe("manual"); d.State != "Empty" || d.ProtocolType != "" {
			t.Fatalf("offsets-only group: %+v", d)
		}
		unknownGroup := *a
		unknownGroup.group = "nope"
		wantCode(t, "member commit to unknown group", unknownGroup.commit(map[int32]int64{0: 1})[0], kerr.IllegalGeneration)
		wantCode(t, "empty group id", h.simpleCommit("", "t1", map[int32]int64{0: 1})[0], kerr.InvalidGroupID)

		// v0 carries no generation: always a simple commit.
		v0 := kmsg.NewPtrOffsetCommitRequest()
		v0.Version = 0
		v0.Group = "manual"
		v0.Generation = 5 // not on the wire in v0
		if codes := commitCodes(h.c.OffsetCommit(withPartitions(v0, "t1", map[int32]int64{1: 8}))); codes[1] != 0 {
			t.Fatalf("v0 commit: %v", kerr.ErrorForCode(codes[1]))
		}
	})
}

func TestOffsetFetchVersions(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		h.simpleCommit("g", "t1", map[int32]int64{0: 10, 1: 11})
		h.simpleCommit("g", "t2", map[int32]int64{3: 13})

		// v1: explicit partitions, no leader epoch.
		r := kmsg.NewPtrOffsetFetchRequest()
		r.Version = 1
		r.Group = "g"
		r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t1", Partitions: []int32{1, 5}}}
		resp := h.c.OffsetFetch(r)
		p := resp.Topics[0].Partitions
		if p[0].Offset != 11 || p[0].LeaderEpoch != -1 || *p[0].Metadata != "meta-1" || p[1].Offset != -1 || *p[1].Metadata != "" {
			t.Fatalf("v1 fetch: %+v", p)
		}

		// v7 null topics: everything, with leader epochs.
		r.Version = 7
		r.Topics = nil
		resp = h.c.OffsetFetch(r)
		if len(resp.Topics) != 2 || resp.Topics[0].Topic != "t1" || len(resp.Topics[0].Partitions) != 2 ||
			resp.Topics[1].Partitions[0].Offset != 13 || resp.Topics[0].Partitions[0].LeaderEpoch != 7 {
			t.Fatalf("v7 fetch all: %+v", resp.Topics)
		}

		// v8: several groups at once.
		r8 := kmsg.NewPtrOffsetFetchRequest()
		r8.Version = 8
		r8.Groups = []kmsg.OffsetFetchRequestGroup{
			{Group: "g", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t2", Partitions: []int32{3}}}},
			{Group: "other"},
			{Group: ""},
		}
		resp = h.c.OffsetFetch(r8)
		if len(resp.Groups) != 3 || resp.Groups[0].Topics[0].Partitions[0].Offset != 13 ||
			len(resp.Groups[1].Topics) != 0 || resp.Groups[2].ErrorCode != kerr.InvalidGroupID.Code {
			t.Fatalf("v8 fetch: %+v", resp.Groups)
		}
	})
}

func TestDeleteGroups(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a := h.client("live", "a")
		h.rebalance(a)
		h.simpleCommit("idle", "t1", map[int32]int64{0: 3})

		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Version = 2
		r.Groups = []string{"idle", "live", "unknown", ""}
		resp := h.c.DeleteGroups(r)
		if len(resp.Groups) != 4 {
			t.Fatalf("%d results", len(resp.Groups))
		}
		wantCode(t, "idle", resp.Groups[0].ErrorCode, nil)
		wantCode(t, "live", resp.Groups[1].ErrorCode, kerr.NonEmptyGroup)
		wantCode(t, "unknown", resp.Groups[2].ErrorCode, kerr.GroupIDNotFound)
		wantCode(t, "empty id", resp.Groups[3].ErrorCode, kerr.InvalidGroupID)
		if st := h.state("idle"); st != "Dead" {
			t.Fatalf("deleted group state %s", st)
		}
		if got := h.fetch("idle"); got[0] != -1 {
			t.Fatalf("deleted group still has offsets: %v", got)
		}
		st, _ := h.store.Load()
		for _, g := range st.Groups {
			if g.Meta.Group == "idle" {
				t.Fatal("deleted group still in the store")
			}
		}
		// Deleting twice: gone.
		r.Groups = []string{"idle"}
		wantCode(t, "idle again", h.c.DeleteGroups(r).Groups[0].ErrorCode, kerr.GroupIDNotFound)
	})
}

func TestOffsetDelete(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a := h.client("g", "a") // subscribes to t1
		h.rebalance(a)
		a.commit(map[int32]int64{0: 1})
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Version = 8
		r.Group = "g"
		r.MemberID = a.memberID
		r.Generation = a.gen
		h.c.OffsetCommit(withPartitions(r, "t2", map[int32]int64{0: 2}))

		del := func(group string, topics ...string) *kmsg.OffsetDeleteResponse {
			r := kmsg.NewPtrOffsetDeleteRequest()
			r.Group = group
			for _, t := range topics {
				r.Topics = append(r.Topics, kmsg.OffsetDeleteRequestTopic{Topic: t, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}})
			}
			return h.c.OffsetDelete(r)
		}
		resp := del("g", "t1", "t2", "missing")
		wantCode(t, "group", resp.ErrorCode, nil)
		wantCode(t, "subscribed t1", resp.Topics[0].Partitions[0].ErrorCode, kerr.GroupSubscribedToTopic)
		wantCode(t, "t2", resp.Topics[1].Partitions[0].ErrorCode, nil)
		wantCode(t, "missing", resp.Topics[2].Partitions[0].ErrorCode, kerr.UnknownTopicOrPartition)
		wantCode(t, "unknown group", del("nope", "t1").ErrorCode, kerr.GroupIDNotFound)
		lags := h.c.Lags()
		if len(lags) != 1 || lags[0] != (Lag{Group: "g", Topic: "t1", Partition: 0, Committed: 1, Lag: 99}) {
			t.Fatalf("lags after delete: %+v", lags)
		}
	})
}

func TestDeleteTopicOffsetsAndLags(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		h.simpleCommit("g1", "t1", map[int32]int64{0: 40, 1: 100})
		h.simpleCommit("g1", "gone", map[int32]int64{0: 5})
		h.simpleCommit("g2", "gone", map[int32]int64{2: 6})
		want := []Lag{
			{Group: "g1", Topic: "gone", Partition: 0, Committed: 5, Lag: -1},
			{Group: "g1", Topic: "t1", Partition: 0, Committed: 40, Lag: 60},
			{Group: "g1", Topic: "t1", Partition: 1, Committed: 100, Lag: 0},
			{Group: "g2", Topic: "gone", Partition: 2, Committed: 6, Lag: -1},
		}
		if got := h.c.Lags(); !slices.Equal(got, want) {
			t.Fatalf("lags %+v", got)
		}
		h.c.DeleteTopicOffsets("gone")
		if got := h.c.Lags(); !slices.Equal(got, want[1:3]) {
			t.Fatalf("lags after topic delete %+v", got)
		}
		st, _ := h.store.Load()
		for _, g := range st.Groups {
			for _, o := range g.Offsets {
				if o.Topic == "gone" {
					t.Fatalf("store still has %+v", o)
				}
			}
		}
	})
}

func TestListGroups(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		h.rebalance(h.client("live", "a"))
		h.simpleCommit("idle", "t1", map[int32]int64{0: 1})
		r := kmsg.NewPtrListGroupsRequest()
		r.Version = 4
		resp := h.c.ListGroups(r)
		if len(resp.Groups) != 2 || resp.Groups[0].Group != "idle" || resp.Groups[0].GroupState != "Empty" ||
			resp.Groups[1].GroupState != "Stable" || resp.Groups[1].ProtocolType != "consumer" {
			t.Fatalf("list: %+v", resp.Groups)
		}
		r.StatesFilter = []string{"stable"}
		if resp := h.c.ListGroups(r); len(resp.Groups) != 1 || resp.Groups[0].Group != "live" {
			t.Fatalf("filtered list: %+v", resp.Groups)
		}
	})
}

func TestHeartbeatErrors(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a := h.client("g", "a")
		wantCode(t, "unknown group", a.heartbeat(), kerr.UnknownMemberID)
		h.rebalance(a)
		empty := *a
		empty.group = ""
		wantCode(t, "empty group", empty.heartbeat(), kerr.InvalidGroupID)
		wrong := *a
		wrong.gen = 42
		wantCode(t, "wrong generation", wrong.heartbeat(), kerr.IllegalGeneration)
		wantCode(t, "ok", a.heartbeat(), nil)
		syncWrong := wrong.syncAsync(nil).wait()
		wantCode(t, "sync wrong generation", syncWrong.ErrorCode, kerr.IllegalGeneration)
		req := a.syncReq(nil)
		req.Protocol = kmsg.StringPtr("roundrobin")
		wantCode(t, "sync wrong protocol", h.c.SyncGroup(t.Context(), req).ErrorCode, kerr.InconsistentGroupProtocol)
	})
}

func TestStaticLeaderAbsentDuringRebalance(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		s, d := h.static("g", "s", "inst"), h.client("g", "d")
		if leader := h.rebalance(s, d); leader != s {
			t.Fatalf("leader %s", leader.name)
		}
		// A new member triggers a rebalance; d rejoins, the static
		// leader only heartbeats (say it is stuck) until the deadline.
		e := h.client("g", "e")
		je := e.joinAsync()
		jd := d.joinAsync()
		for {
			if _, done := jd.poll(); done {
				break
			}
			s.heartbeat()
			time.Sleep(time.Second)
		}
		rd, re := jd.wait(), je.wait()
		// The static member is kept (KIP-345) but cannot lead: the
		// earliest rejoined member does.
		if rd.ErrorCode != 0 || rd.LeaderID != d.memberID || len(rd.Members) != 3 || re.LeaderID != d.memberID {
			t.Fatalf("join: %v leader %q (d %q) members %d", kerr.ErrorForCode(rd.ErrorCode), rd.LeaderID, d.memberID, len(rd.Members))
		}
		wantCode(t, "s heartbeat", s.heartbeat(), kerr.IllegalGeneration)
		// s catches up: rejoining with the same metadata while the
		// generation completes returns it.
		rs := s.joinAsync().wait()
		if rs.ErrorCode != 0 || rs.Generation != rd.Generation || rs.MemberID != s.memberID {
			t.Fatalf("s rejoin: %v gen %d", kerr.ErrorForCode(rs.ErrorCode), rs.Generation)
		}
	})
}

// The janitor stops ticking while no group has a deadline; a join after
// that must still have its initial delay and sessions enforced.
func TestJanitorRestartsAfterIdle(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		a := h.client("g", "a")
		h.rebalance(a)
		// a goes silent: its session expires and the group is empty,
		// with nothing left for the janitor to watch.
		time.Sleep(testSession + time.Second)
		if st := h.state("g"); st != "Empty" {
			t.Fatalf("state %s after the only member expired", st)
		}
		time.Sleep(time.Minute)
		// A new member's join completes after the initial delay (only
		// the janitor ends it) and its session expires again.
		b := h.client("g", "b")
		start := time.Now()
		h.rebalance(b)
		if d := time.Since(start); d < testDelay {
			t.Fatalf("join completed after %v, before the %v initial delay", d, testDelay)
		}
		time.Sleep(testSession + time.Second)
		if st := h.state("g"); st != "Empty" {
			t.Fatalf("state %s after the second member expired", st)
		}
	})
}
