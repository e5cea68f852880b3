package group

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupState is the classic group state machine's state; see doc.go.
type groupState int8

const (
	stateEmpty groupState = iota
	statePreparingRebalance
	stateCompletingRebalance
	stateStable
	stateDead
)

// String returns the state name Kafka uses in DescribeGroups/ListGroups.
func (s groupState) String() string {
	switch s {
	case stateEmpty:
		return "Empty"
	case statePreparingRebalance:
		return "PreparingRebalance"
	case stateCompletingRebalance:
		return "CompletingRebalance"
	case stateStable:
		return "Stable"
	case stateDead:
		return "Dead"
	}
	return "Unknown"
}

// group is one consumer group. Every field is guarded by Coordinator.mu.
type group struct {
	name         string
	state        groupState
	protocolType string
	protocol     string // selected protocol; "" unless CompletingRebalance or Stable
	generation   int32
	leader       string // member id; "" only when there are no members
	// savedGeneration is the newest generation whose metadata the store
	// confirmed (see Config.DurableSync).
	savedGeneration int32

	members map[string]*member
	// static maps instance id to the member id currently holding it.
	static map[string]string
	// pending holds the member ids handed out with MEMBER_ID_REQUIRED
	// (JoinGroup v4+) and when each expires if its owner does not rejoin
	// with it. Pending members are not members: they do not take part in
	// a generation, but a rebalance waits for them (see
	// maybeCompleteJoinLocked) since they are about to join.
	pending map[string]time.Time
	// nextSeq orders members by when they joined: the leader is the
	// earliest, and responses list members in that order.
	nextSeq uint64

	// PreparingRebalance timing. In the initial delay phase (a rebalance
	// of an Empty group with InitialRebalanceDelay > 0) the join waits
	// for delayDeadline even if everyone has joined, extended while new
	// members keep arriving and budget remains; otherwise it completes
	// when all members have rejoined or at rebalanceDeadline.
	delayPhase        bool
	delayDeadline     time.Time
	delayRemaining    time.Duration
	newMemberAdded    bool
	rebalanceDeadline time.Time

	// pendingSync holds the members of the current generation that have
	// not sent SyncGroup yet; those still in it at syncDeadline are
	// removed (they got a JoinGroup response but went silent, and would
	// otherwise block the leader's assignment from being used, or keep
	// partitions assigned to nobody).
	pendingSync  map[string]struct{}
	syncDeadline time.Time

	offsets map[TopicPartition]CommittedOffset

	// Persistence gate (see doc.go, "Ordering store writes"). inflight
	// holds the partitions whose store write is in progress; inflightAll
	// is set while the whole group is being deleted from the store.
	// persistDone is closed (and reset to nil) whenever an in-flight
	// write finishes, waking everything that waited for one.
	inflight    map[TopicPartition]struct{}
	inflightAll bool
	persistDone chan struct{}
}

func newGroup(name string) *group {
	return &group{
		name:     name,
		state:    stateEmpty,
		members:  make(map[string]*member),
		static:   make(map[string]string),
		pending:  make(map[string]time.Time),
		offsets:  make(map[TopicPartition]CommittedOffset),
		inflight: make(map[TopicPartition]struct{}),
	}
}

// member is one group member. Every field is guarded by Coordinator.mu.
type member struct {
	id string
	// joinSpec is what the member said of itself when it last joined
	// (updateMemberLocked: the instance id never changes, and a join
	// without client id and host keeps the ones known).
	joinSpec
	assignment []byte
	seq        uint64
	lastSeen   time.Time
	// isNew: joined during the current rebalance and never part of a
	// completed generation. A new member whose JoinGroup caller goes
	// away is removed at once rather than holding the rebalance until
	// its timeout.
	isNew bool

	// join and sync are the blocked JoinGroup / SyncGroup call of this
	// member, if any. A member with one does not expire through its
	// session timeout: it is waiting on us, not silent; the rebalance
	// and pending-sync deadlines bound those waits instead.
	join *joinWaiter
	sync *syncWaiter
}

// joinSpec is what a JoinGroup says of the member joining.
type joinSpec struct {
	instanceID       string // "" for dynamic members
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocolType     string
	protocols        []protocol
}

type protocol struct {
	name     string
	metadata []byte
}

// waiter is a JoinGroup or SyncGroup call blocked until its group
// answers it. resp is written under Coordinator.mu before done is closed,
// and read by the waiting call only after done is closed (or after it has
// detached the waiter under the lock), so the two never race.
type waiter[R any] struct {
	m    *member
	resp R
	done chan struct{}
}

// answered reports whether w's call has its answer (done is closed).
func (w *waiter[R]) answered() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// joinWaiter is a JoinGroup call blocked until its group completes the
// join phase.
type joinWaiter = waiter[*kmsg.JoinGroupResponse]

// syncWaiter is a SyncGroup call blocked until the leader's assignment
// arrives.
type syncWaiter = waiter[*kmsg.SyncGroupResponse]

func (m *member) matches(ps []protocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b protocol) bool {
		return a.name == b.name && bytes.Equal(a.metadata, b.metadata)
	})
}

func (m *member) metadataFor(name string) []byte {
	for _, p := range m.protocols {
		if p.name == name {
			return p.metadata
		}
	}
	return nil
}

func (m *member) supports(name string) bool {
	return slices.ContainsFunc(m.protocols, func(p protocol) bool { return p.name == name })
}

func (m *member) static() bool { return m.instanceID != "" }

// sortedMembersLocked returns the members in join order.
func (g *group) sortedMembersLocked() []*member {
	return slices.SortedFunc(maps.Values(g.members), func(a, b *member) int { return cmp.Compare(a.seq, b.seq) })
}

func (g *group) maxRebalanceTimeoutLocked() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// supportsProtocolsLocked reports whether a member with these protocols
// may join: a group with no members accepts any non-empty protocol type
// and list (and adopts the type); otherwise the type must match and the
// member must support one protocol every current member supports.
func (g *group) supportsProtocolsLocked(protocolType string, ps []protocol) bool {
	if g.state == stateEmpty || len(g.members) == 0 {
		return protocolType != "" && len(ps) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range ps {
		if g.supportedByAllLocked(p.name) {
			return true
		}
	}
	return false
}

func (g *group) supportedByAllLocked(name string) bool {
	for _, m := range g.members {
		if !m.supports(name) {
			return false
		}
	}
	return true
}

// selectProtocolLocked picks the protocol of the next generation the way
// Kafka does: among the protocols every member supports, each member votes
// for the first one in its own preference order, and the most voted wins.
// Ties go to the candidate the earliest member prefers, which keeps the
// choice deterministic.
func (g *group) selectProtocolLocked() string {
	ms := g.sortedMembersLocked()
	if len(ms) == 0 {
		return ""
	}
	var candidates []string
	for _, p := range ms[0].protocols {
		if g.supportedByAllLocked(p.name) && !slices.Contains(candidates, p.name) {
			candidates = append(candidates, p.name)
		}
	}
	if len(candidates) == 0 {
		// Join validation makes this unreachable; fall back to the
		// first member's preference rather than failing the group.
		if len(ms[0].protocols) > 0 {
			return ms[0].protocols[0].name
		}
		return ""
	}
	votes := make(map[string]int, len(candidates))
	for _, m := range ms {
		for _, p := range m.protocols {
			if slices.Contains(candidates, p.name) {
				votes[p.name]++
				break
			}
		}
	}
	best := candidates[0]
	for _, c := range candidates[1:] {
		if votes[c] > votes[best] {
			best = c
		}
	}
	return best
}

// staticFencedLocked reports whether instanceID is held by another member
// id than memberID: the caller is a zombie replaced by a newer instance.
func (g *group) staticFencedLocked(instanceID *string, memberID string) bool {
	if instanceID == nil {
		return false
	}
	cur, ok := g.static[*instanceID]
	return ok && cur != memberID
}

func (g *group) nextGenerationLocked() int32 {
	if g.generation == math.MaxInt32 {
		return 1
	}
	return g.generation + 1
}

// persistConflictLocked reports whether a store write touching tps (or the
// whole group if all) must wait for one in flight.
func (g *group) persistConflictLocked(tps []TopicPartition, all bool) bool {
	if g.inflightAll {
		return true
	}
	if all {
		return len(g.inflight) > 0
	}
	for _, tp := range tps {
		if _, ok := g.inflight[tp]; ok {
			return true
		}
	}
	return false
}

func (g *group) persistReleaseLocked(tps []TopicPartition, all bool) {
	for _, tp := range tps {
		delete(g.inflight, tp)
	}
	if all {
		g.inflightAll = false
	}
	if g.persistDone != nil {
		close(g.persistDone)
		g.persistDone = nil
	}
}

// pristineLocked reports whether the group holds nothing worth keeping: a
// group created by a request that then failed.
func (g *group) pristineLocked() bool {
	return g.state == stateEmpty && len(g.members) == 0 && len(g.pending) == 0 &&
		len(g.offsets) == 0 && len(g.inflight) == 0 && !g.inflightAll &&
		g.protocolType == "" && g.generation == 0
}

// hasDeadlines reports whether the janitor has something to watch in the
// group (see Coordinator.expireLocked): a member's session, a pending
// member, a rebalance or a pending sync.
func (g *group) hasDeadlines() bool {
	return len(g.members) > 0 || len(g.pending) > 0 || len(g.pendingSync) > 0 || g.state == statePreparingRebalance
}

func newMemberID(prefix string) string {
	var b [16]byte
	rand.Read(b[:]) // never fails: crypto/rand aborts the program instead
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
