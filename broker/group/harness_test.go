package group

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Most coordinator tests run inside a synctest bubble: time is virtual, so
// session and rebalance timeouts of realistic length (10s, 30s) elapse
// instantly and deterministically, and synctest.Wait tells when every
// blocked JoinGroup/SyncGroup call is really blocked.

const (
	testSession   = 10 * time.Second
	testRebalance = 30 * time.Second
	testDelay     = 100 * time.Millisecond
)

type harness struct {
	t     *testing.T
	c     *Coordinator
	store Store
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testConfig is the default harness config: every topic but "missing" has
// 10 partitions, end offsets are 100.
func testConfig(t *testing.T, store Store) Config {
	return Config{
		Logger:                testLogger(t),
		Store:                 store,
		InitialRebalanceDelay: testDelay,
		TopicPartitions: func(topic string) (int32, bool) {
			if topic == "missing" {
				return 0, false
			}
			return 10, true
		},
		EndOffset: func(topic string, partition int32) (int64, bool) { return 100, topic != "gone" },
		tick:      10 * time.Millisecond,
	}
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	return newHarnessWith(t, NewMemStore(), mod)
}

func newHarnessWith(t *testing.T, store Store, mod func(*Config)) *harness {
	t.Helper()
	cfg := testConfig(t, store)
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &harness{t: t, c: c, store: store}
}

// bubble runs f in a synctest bubble with a fresh harness.
func bubble(t *testing.T, mod func(*Config), f func(t *testing.T, h *harness)) {
	synctest.Test(t, func(t *testing.T) {
		f(t, newHarness(t, mod))
	})
}

// call is a request running in its own goroutine, as the broker runs
// JoinGroup and SyncGroup.
type call[T any] struct {
	ch  chan T
	v   T
	got bool
}

func async[T any](f func() T) *call[T] {
	c := &call[T]{ch: make(chan T, 1)}
	go func() { c.ch <- f() }()
	return c
}

// poll reports whether the call returned, after letting every goroutine
// of the bubble run until blocked.
func (c *call[T]) poll() (T, bool) {
	synctest.Wait()
	if !c.got {
		select {
		case c.v = <-c.ch:
			c.got = true
		default:
		}
	}
	return c.v, c.got
}

// wait blocks until the call returns; virtual time advances as needed.
func (c *call[T]) wait() T {
	if !c.got {
		c.v = <-c.ch
		c.got = true
	}
	return c.v
}

// client plays one group member.
type client struct {
	h        *harness
	group    string
	name     string // client id
	instance *string
	memberID string
	gen      int32
	protos   []string
	topics   []string
	version  int16
	ctx      context.Context
}

func (h *harness) client(group, name string) *client {
	return &client{
		h:       h,
		group:   group,
		name:    name,
		gen:     -1,
		protos:  []string{"range"},
		topics:  []string{"t1"},
		version: 7,
		ctx:     WithClient(h.t.Context(), name, "/10.0.0.1"),
	}
}

func (h *harness) static(group, name, instance string) *client {
	cl := h.client(group, name)
	cl.instance = &instance
	return cl
}

func (cl *client) metadata() []byte {
	md := kmsg.NewConsumerMemberMetadata()
	md.Topics = cl.topics
	md.UserData = []byte(cl.name)
	return md.AppendTo(nil)
}

// member is how the client names itself in a group request: group,
// member id, instance id and generation.
func (cl *client) member() (string, string, *string, int32) {
	return cl.group, cl.memberID, cl.instance, cl.gen
}

func (cl *client) joinReq() *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version = cl.version
	r.Group, r.MemberID, r.InstanceID, _ = cl.member()
	r.SessionTimeoutMillis = int32(testSession / time.Millisecond)
	r.RebalanceTimeoutMillis = int32(testRebalance / time.Millisecond)
	r.ProtocolType = "consumer"
	for _, p := range cl.protos {
		r.Protocols = append(r.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: cl.metadata()})
	}
	return r
}

// prepareJoin does the KIP-394 dance for a dynamic member without an id.
func (cl *client) prepareJoin() {
	t := cl.h.t
	t.Helper()
	if cl.memberID != "" || cl.instance != nil || cl.version < 4 {
		return
	}
	resp := cl.h.c.JoinGroup(cl.ctx, cl.joinReq())
	if resp.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("%s: first join: got %v, want MEMBER_ID_REQUIRED", cl.name, kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp.MemberID == "" || resp.Version != cl.version {
		t.Fatalf("%s: MEMBER_ID_REQUIRED without member id or with version %d", cl.name, resp.Version)
	}
	cl.memberID = resp.MemberID
}

// joinAsync starts a JoinGroup and returns once it has reached the
// coordinator (blocked or answered).
func (cl *client) joinAsync() *call[*kmsg.JoinGroupResponse] {
	cl.prepareJoin()
	req := cl.joinReq()
	c := async(func() *kmsg.JoinGroupResponse { return cl.h.c.JoinGroup(cl.ctx, req) })
	synctest.Wait()
	return c
}

func (cl *client) applyJoin(resp *kmsg.JoinGroupResponse) {
	cl.h.t.Helper()
	if resp.ErrorCode != 0 {
		cl.h.t.Fatalf("%s: join: %v", cl.name, kerr.ErrorForCode(resp.ErrorCode))
	}
	cl.memberID = resp.MemberID
	cl.gen = resp.Generation
}

func (cl *client) syncReq(assign map[string][]byte) *kmsg.SyncGroupRequest {
	r := kmsg.NewPtrSyncGroupRequest()
	r.Version = 5
	r.Group, r.MemberID, r.InstanceID, r.Generation = cl.member()
	r.ProtocolType = kmsg.StringPtr("consumer")
	for id, a := range assign {
		r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a})
	}
	return r
}

func (cl *client) syncAsync(assign map[string][]byte) *call[*kmsg.SyncGroupResponse] {
	req := cl.syncReq(assign)
	c := async(func() *kmsg.SyncGroupResponse { return cl.h.c.SyncGroup(cl.ctx, req) })
	synctest.Wait()
	return c
}

func (cl *client) heartbeat() int16 {
	r := kmsg.NewPtrHeartbeatRequest()
	r.Version = 4
	r.Group, r.MemberID, r.InstanceID, r.Generation = cl.member()
	resp := cl.h.c.Heartbeat(r)
	if resp.Version != 4 {
		cl.h.t.Fatalf("heartbeat response version %d", resp.Version)
	}
	return resp.ErrorCode
}

// commit commits offsets (partition -> offset) of topic t1 with the
// client's member id and generation, returning per-partition codes.
func (cl *client) commit(offsets map[int32]int64) map[int32]int16 {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Version = 8
	r.Group, r.MemberID, r.InstanceID, r.Generation = cl.member()
	return commitCodes(cl.h.c.OffsetCommit(withPartitions(r, "t1", offsets)))
}

func withPartitions(r *kmsg.OffsetCommitRequest, topic string, offsets map[int32]int64) *kmsg.OffsetCommitRequest {
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	for _, p := range slices.Sorted(maps.Keys(offsets)) {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition = p
		rp.Offset = offsets[p]
		rp.LeaderEpoch = 7
		rp.Metadata = kmsg.StringPtr(fmt.Sprintf("meta-%d", p))
		rt.Partitions = append(rt.Partitions, rp)
	}
	r.Topics = append(r.Topics, rt)
	return r
}

func commitCodes(resp *kmsg.OffsetCommitResponse) map[int32]int16 {
	codes := make(map[int32]int16)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			codes[p.Partition] = p.ErrorCode
		}
	}
	return codes
}

// simpleCommit commits as an admin tool does: generation -1, no member.
func (h *harness) simpleCommit(group, topic string, offsets map[int32]int64) map[int32]int16 {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Version = 8
	r.Group = group
	r.Generation = -1
	return commitCodes(h.c.OffsetCommit(withPartitions(r, topic, offsets)))
}

// fetch returns the committed offsets of topic t1 partitions 0-3 (-1 if
// none), via OffsetFetch v7.
func (h *harness) fetch(group string) map[int32]int64 {
	h.t.Helper()
	r := kmsg.NewPtrOffsetFetchRequest()
	r.Version = 7
	r.Group = group
	r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t1", Partitions: []int32{0, 1, 2, 3}}}
	resp := h.c.OffsetFetch(r)
	if resp.ErrorCode != 0 {
		h.t.Fatalf("fetch %s: %v", group, kerr.ErrorForCode(resp.ErrorCode))
	}
	out := make(map[int32]int64)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	return out
}

func (h *harness) describe(group string) kmsg.DescribeGroupsResponseGroup {
	r := kmsg.NewPtrDescribeGroupsRequest()
	r.Version = 5
	r.Groups = []string{group}
	resp := h.c.DescribeGroups(r)
	if len(resp.Groups) != 1 {
		h.t.Fatalf("describe returned %d groups", len(resp.Groups))
	}
	return resp.Groups[0]
}

func (h *harness) state(group string) string { return h.describe(group).State }

func assignmentFor(memberID string) []byte { return []byte("assign-" + memberID) }

// rebalance has every client (re)join, the leader assign "assign-<id>" to
// each member, and everyone sync. New dynamic members get their member id
// first, so that the rebalance waits for them. It returns the leader.
func (h *harness) rebalance(cls ...*client) *client {
	t := h.t
	t.Helper()
	for _, cl := range cls {
		cl.prepareJoin()
	}
	var joins []*call[*kmsg.JoinGroupResponse]
	for _, cl := range cls {
		req := cl.joinReq()
		cl := cl
		joins = append(joins, async(func() *kmsg.JoinGroupResponse { return cl.h.c.JoinGroup(cl.ctx, req) }))
		// Let the join reach the coordinator before the next one, so
		// that join order (and so leadership) is deterministic.
		synctest.Wait()
	}
	var leader *client
	var leaderResp *kmsg.JoinGroupResponse
	for i, cl := range cls {
		resp := joins[i].wait()
		cl.applyJoin(resp)
		if resp.LeaderID == resp.MemberID {
			if leader != nil {
				t.Fatalf("two leaders: %s and %s", leader.name, cl.name)
			}
			leader, leaderResp = cl, resp
		} else if len(resp.Members) != 0 {
			t.Fatalf("follower %s got member metadata", cl.name)
		}
	}
	if leader == nil {
		t.Fatal("no leader")
	}
	for _, cl := range cls {
		if cl.gen != leader.gen {
			t.Fatalf("%s at generation %d, leader at %d", cl.name, cl.gen, leader.gen)
		}
	}
	if len(leaderResp.Members) != len(cls) {
		t.Fatalf("leader got %d members, want %d", len(leaderResp.Members), len(cls))
	}
	assign := make(map[string][]byte)
	for _, m := range leaderResp.Members {
		assign[m.MemberID] = assignmentFor(m.MemberID)
	}
	var syncs []*call[*kmsg.SyncGroupResponse]
	for _, cl := range cls {
		if cl != leader {
			syncs = append(syncs, cl.syncAsync(nil))
		}
	}
	// Followers must wait for the leader's assignment.
	for _, s := range syncs {
		if _, done := s.poll(); done {
			t.Fatal("follower sync returned before the leader synced")
		}
	}
	syncs = append(syncs, leader.syncAsync(assign))
	i := 0
	for _, cl := range cls {
		var resp *kmsg.SyncGroupResponse
		if cl == leader {
			resp = syncs[len(syncs)-1].wait()
		} else {
			resp = syncs[i].wait()
			i++
		}
		if resp.ErrorCode != 0 {
			t.Fatalf("%s: sync: %v", cl.name, kerr.ErrorForCode(resp.ErrorCode))
		}
		if string(resp.MemberAssignment) != string(assignmentFor(cl.memberID)) {
			t.Fatalf("%s: assignment %q", cl.name, resp.MemberAssignment)
		}
		if resp.Protocol == nil || *resp.Protocol != "range" {
			t.Fatalf("%s: sync protocol %v", cl.name, resp.Protocol)
		}
	}
	return leader
}

func wantCode(t *testing.T, what string, got int16, want *kerr.Error) {
	t.Helper()
	var wantCode int16
	if want != nil {
		wantCode = want.Code
	}
	if got != wantCode {
		t.Fatalf("%s: got %v, want %v", what, kerr.ErrorForCode(got), kerr.ErrorForCode(wantCode))
	}
}
