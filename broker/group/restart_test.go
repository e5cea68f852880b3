package group

import (
	"testing"
	"testing/synctest"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/storage"
)

// TestRestartWithLogStore closes a coordinator and starts a new one on the
// same LogStore log directory: offsets, groups and the membership of the
// last generation survive, deleted groups stay deleted, and a static
// member restarting against the new coordinator needs no rebalance.
func TestRestartWithLogStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		var l *storage.Log
		open := func() *harness {
			// The previous coordinator is closed; its log goes now,
			// as the broker closes partitions after the coordinator.
			if l != nil {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			l = openTestLog(t, dir, nil)
			s, err := OpenLogStore(l, testLogger(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			return newHarnessWith(t, s, nil)
		}
		h := open()
		s, d := h.static("g", "s", "inst"), h.client("g", "d")
		h.rebalance(s, d)
		if codes := s.commit(map[int32]int64{0: 10, 1: 11}); codes[0] != 0 || codes[1] != 0 {
			t.Fatalf("commit: %v", codes)
		}
		h.simpleCommit("manual", "t1", map[int32]int64{2: 22})
		h.simpleCommit("doomed", "t1", map[int32]int64{0: 1})
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Groups = []string{"doomed"}
		wantCode(t, "delete", h.c.DeleteGroups(r).Groups[0].ErrorCode, nil)
		gen := s.gen
		if err := h.c.Close(); err != nil {
			t.Fatal(err)
		}

		h2 := open()
		if got := h2.fetch("g"); got[0] != 10 || got[1] != 11 || got[2] != -1 {
			t.Fatalf("offsets of g after restart: %v", got)
		}
		if got := h2.fetch("manual"); got[2] != 22 {
			t.Fatalf("offsets of manual after restart: %v", got)
		}
		lr := kmsg.NewPtrListGroupsRequest()
		lr.Version = 4
		groups := map[string]string{}
		for _, g := range h2.c.ListGroups(lr).Groups {
			groups[g.Group] = g.GroupState
		}
		if len(groups) != 2 || groups["g"] != "Stable" || groups["manual"] != "Empty" {
			t.Fatalf("groups after restart: %v", groups)
		}
		desc := h2.describe("g")
		if len(desc.Members) != 2 || desc.Members[0].InstanceID == nil || *desc.Members[0].InstanceID != "inst" ||
			string(desc.Members[0].MemberAssignment) != string(assignmentFor(s.memberID)) {
			t.Fatalf("restored group: %+v", desc)
		}

		// The surviving dynamic member carries on with its generation.
		d.h = h2
		wantCode(t, "d heartbeat", d.heartbeat(), nil)
		// The static member's process restarted too: it rejoins
		// without a member id and gets its place back, no rebalance.
		s2 := h2.static("g", "s", "inst")
		resp := s2.joinAsync().wait()
		if resp.ErrorCode != 0 || resp.Generation != gen {
			t.Fatalf("static rejoin after restart: %v gen %d want %d", kerr.ErrorForCode(resp.ErrorCode), resp.Generation, gen)
		}
		s2.applyJoin(resp)
		sr := s2.syncAsync(nil).wait()
		if sr.ErrorCode != 0 || string(sr.MemberAssignment) != string(assignmentFor(s.memberID)) {
			t.Fatalf("static sync after restart: %v %q", kerr.ErrorForCode(sr.ErrorCode), sr.MemberAssignment)
		}
		if st := h2.state("g"); st != "Stable" {
			t.Fatalf("state %s", st)
		}
		if err := h2.c.Close(); err != nil {
			t.Fatal(err)
		}

		// The replacement was saved: a third start knows the new id.
		h3 := open()
		s2.h = h3
		wantCode(t, "s2 heartbeat after second restart", s2.heartbeat(), nil)
	})
}

func TestRestartWithMemStore(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		h.simpleCommit("g", "t1", map[int32]int64{0: 5})
		a := h.client("live", "a")
		h.rebalance(a)
		h.c.Close()
		h2 := newHarnessWith(t, h.store.(*MemStore).Reopen(), nil)
		if got := h2.fetch("g"); got[0] != 5 {
			t.Fatalf("offsets after reopen: %v", got)
		}
		a.h = h2
		wantCode(t, "heartbeat after restart", a.heartbeat(), nil)
	})
}
