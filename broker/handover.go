package broker

// Handover windows. A replicated partition is served by its raft leader
// once that leader is ready (partition.ReadyLeaders); the group
// coordinators of an offsets partition run on its ready leader
// (coordinators.go). Between a leader going away or stepping down and the
// next one being ready, and between a topic's creation and its replicas
// opening on their brokers, there is a window in which a request reaching
// the broker about to serve it would be refused: NOT_LEADER_FOR_PARTITION,
// NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS. Clients then back off and
// look the leader up again, franz-go for example waits up to 5 s between
// metadata refreshes and doubles its wait after each failed group request,
// so a window of a few hundred milliseconds costs them seconds, and a
// series of them (a loaded machine) their whole retry budget. A request
// that reaches a broker whose replica may come out of the window as the
// serving leader therefore waits for it, up to handoverWait; one that
// reaches a broker following another live leader is answered at once.

import (
	"context"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/partition"
)

// maxHandoverWait caps handoverWait: clients time requests out after
// about 10 s beyond what the request itself asks to wait (franz-go's
// request timeout overhead).
const maxHandoverWait = 5 * time.Second

// handoverPoll is how often a waiting request looks again.
const handoverPoll = 20 * time.Millisecond

// handoverWait bounds how long a request waits for a handover: an
// election after a leader went away takes one to two replica heartbeat
// timeouts, and the new leader's barrier a little more.
func (b *Broker) handoverWait() time.Duration {
	return min(3*b.cfg.ReplicaHeartbeatTimeout, maxHandoverWait)
}

// awaitHandover waits until ready reports true, or pending reports false
// (the request is not this broker's to serve), or the wait or ctx ends.
// It returns ready's last answer.
func (b *Broker) awaitHandover(ctx context.Context, wait time.Duration, ready, pending func() bool) bool {
	deadline := time.Now().Add(wait)
	for {
		if ready() {
			return true
		}
		if !pending() || !time.Now().Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return ready()
		case <-time.After(handoverPoll):
		}
	}
}

// leaderPending reports whether p's local replica may shortly be its
// ready leader: it is raft leader and not ready yet, a candidate, or a
// follower that knows no leader, names itself, or follows a broker this
// broker saw die (an election follows at once, see cluster/watch.go).
// False for a replica following another live broker, or shut down.
func (b *Broker) leaderPending(p *partition.Partition) bool {
	if p == nil || !p.Replicated() {
		return false
	}
	r := p.Raft()
	switch r.State() {
	case raft.Leader:
		return !p.IsLeader()
	case raft.Candidate:
		return true
	case raft.Follower:
	case raft.Shutdown:
		// A dormant group with this broker or a dead one as leader
		// elects as soon as something wakes it (wakeDormant, or the
		// watcher for a dead leader).
		l, _, ok := p.DormantLeader()
		return ok && (l == b.cfg.NodeID || b.cluster.PeerDown(l))
	default:
		return false
	}
	_, id := r.LeaderWithID()
	if id == "" {
		return true
	}
	n, err := strconv.Atoi(string(id))
	if err != nil {
		return false
	}
	return int32(n) == b.cfg.NodeID || b.cluster.PeerDown(int32(n))
}

// partitionPending reports whether a request for partition i of topic t
// should wait on this broker: its replica here is not open yet although
// the controller's metadata places one here (a topic created a moment
// ago), or it is in a handover (leaderPending).
func (b *Broker) partitionPending(t string, i int32) bool {
	if p := b.localPartition(t, i); p != nil {
		return b.leaderPending(p)
	}
	ti := b.cluster.Metadata().Topics[t]
	if ti == nil || i < 0 || int(i) >= len(ti.Partitions) {
		return false
	}
	for _, r := range ti.Partitions[i].Members() {
		if r == b.cfg.NodeID {
			return true
		}
	}
	return false
}

// awaitProduceLeaders holds a Produce request (up to handoverWait, and at
// most half the request's own timeout) while a partition it names is
// pending here (partitionPending). A topic this broker's metadata does
// not know yet is looked up once with the controller: the client may
// have it from a broker that applied its creation a moment earlier.
// A client producing to a topic it has just created otherwise gets
// NOT_LEADER_FOR_PARTITION from the leader Metadata named and, franz-go
// at its defaults, refreshes its metadata only 5 s later.
func (b *Broker) awaitProduceLeaders(ctx context.Context, r *kmsg.ProduceRequest) {
	if b.cluster == nil {
		return
	}
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			b.wakeDormant(rt.Topic, rp.Partition)
		}
	}
	if r.Acks == 0 {
		return
	}
	wait := b.handoverWait()
	if t := time.Duration(r.TimeoutMillis) * time.Millisecond; t > 0 {
		wait = min(wait, t/2)
	}
	caughtUp := false
	md := b.cluster.Metadata()
	for _, rt := range r.Topics {
		if md.Topics[rt.Topic] == nil && !caughtUp && b.topic(rt.Topic) == nil {
			caughtUp = true
			cctx, cancel := context.WithTimeout(ctx, wait)
			_ = b.cluster.CatchUp(cctx)
			cancel()
		}
	}
	start := time.Now()
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			t, i := rt.Topic, rp.Partition
			left := wait - time.Since(start)
			if left <= 0 {
				return
			}
			b.awaitHandover(ctx, left,
				func() bool { return b.partition(t, i) != nil },
				func() bool { return b.partitionPending(t, i) })
		}
	}
}

// wakeDormant makes partition i of t, if its group sleeps with this
// broker as leader, stand for election at once: a write wakes the group
// (the others wake for the vote requests), and the caller waits for the
// new term's leader as for a handover (leaderPending).
func (b *Broker) wakeDormant(t string, i int32) {
	if p := b.localPartition(t, i); p != nil && b.dormantHere(p) {
		if p.Elect() {
			b.metrics.dormantWakes.Inc()
		}
	}
}

// awaitDormant is wakeDormant, then a wait (up to the handover wait) for
// the partition to be served here.
func (b *Broker) awaitDormant(ctx context.Context, t string, i int32) {
	p := b.localPartition(t, i)
	if p == nil || !b.dormantHere(p) {
		return
	}
	b.wakeDormant(t, i)
	b.awaitHandover(ctx, b.handoverWait(),
		func() bool { return b.partition(t, i) != nil },
		func() bool { return b.partitionPending(t, i) })
}
