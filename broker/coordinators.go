package broker

// Group coordinators in cluster mode. __consumer_offsets is a replicated
// topic like the others (created by the controller leader once the
// cluster has its brokers, offsetsTopicPartitions partitions, the default
// replication factor). A group belongs to partition hash(group id) mod
// the partition count, and its coordinator is the raft leader of that
// partition:
//
//   - syncCoordinators (every coordinatorTick) opens a group.Coordinator
//     for each offsets partition this broker leads and is ready in (its
//     barrier went through, so the local log holds every committed entry:
//     the coordinator loads the groups from it), and closes the ones of
//     partitions it no longer leads, or whose term changed, or whose
//     store failed. Except: a coordinator whose partition's leadership
//     this broker lost without any other leader being seen is paused
//     (group.Coordinator.Pause), and resumes where it stopped if this
//     broker is elected again within pauseLimit (see coordSlot.resumable).
//   - The coordinator's store proposes each write as one raft entry of the
//     partition (Partition.Propose); the replica state machine
//     appends it on every replica like produced records, and the write
//     returns once committed on a majority. So an OffsetCommit is
//     answered only after a majority has it, and the next leader has it
//     in its log.
//   - Requests are routed per group: served here → the coordinator;
//     raft leader here but not loaded yet, or an election running that
//     this broker may win → wait for the outcome (coordinatorFor, up to
//     handoverWait), then COORDINATOR_LOAD_IN_PROGRESS (the client
//     retries); else NOT_COORDINATOR (the client asks FindCoordinator
//     again, which names the partition's current leader).
//
// A single-node broker has one coordinator (b.groups) over partition 0 of
// its local __consumer_offsets, as before.

import (
	"context"
	"crypto/rand"
	"errors"
	"hash/fnv"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/admin"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/internal/tick"
)

// offsetsTopicPartitions is the partition count of __consumer_offsets in
// cluster mode: enough to spread the coordinators over a few brokers,
// few enough that their raft groups cost little when idle.
const offsetsTopicPartitions = 6

// coordinatorTick is how often coordinators follow the raft leadership of
// the offsets partitions while they do not match it yet or news came a
// moment ago; once they do, runCoordinators waits for a leadership or
// metadata change, or coordinatorIdleTick (a coordinator's store can
// fail without either).
const (
	coordinatorTick     = 50 * time.Millisecond
	coordinatorIdleTick = time.Second
)

// pauseLimit bounds how long the coordinator of an offsets partition whose
// leadership this broker lost, with no other leader seen, waits paused for
// this broker to be elected again before it is closed.
const pauseLimit = 10 * time.Second

// coordSlot is the coordinator of one offsets partition this broker leads.
type coordSlot struct {
	part *partition.Partition
	// term is the raft term the coordinator serves in: its store's
	// proposals are refused in any other (another leader may have
	// written in between). It changes when the coordinator resumes in a
	// later term (see syncCoordinators).
	term  atomic.Uint64
	store *group.LogStore
	c     *group.Coordinator
	// since is when this broker took the partition's groups over.
	since time.Time
	// foreign counts the leaders other than this broker that the
	// partition's raft has heard of since the slot was opened; obs is
	// the raft observer counting them.
	foreign atomic.Uint64
	obs     *raft.Observer
	// pausedAt is when the coordinator was paused because this broker
	// lost the leadership; zero while it serves. Only runCoordinators
	// uses it.
	pausedAt time.Time
}

// valid: the slot may serve requests: same partition object, still its
// ready raft leader in the same term, store usable.
func (s *coordSlot) valid(p *partition.Partition) bool {
	return s.part == p && p.IsLeader() && p.Term() == s.term.Load() && !s.store.Failed()
}

// resumable: this broker lost the partition's leadership (or is leader in
// a later term) and no other broker has led it since the slot opened, so
// the coordinator's groups are still exactly what the log and the
// members know: if this broker leads again, the coordinator can go on
// where it stopped. A leader that can not reach its followers for the
// raft lease timeout steps down even though the followers still follow
// it; on a loaded machine that happens every few seconds, and this broker
// is then elected again about a second later. Closing the coordinator
// each time fails every JoinGroup and SyncGroup waiting in it and sends
// the groups back to their last stored generation, so that rebalances
// start over and never finish. Another leader may have served the
// groups (in memory too: join phases are not stored), so once one is
// seen the coordinator is closed; and it can only have served after its
// barrier was committed on a majority, which would have kept this broker
// from being elected without learning of it.
func (s *coordSlot) resumable(p *partition.Partition) bool {
	if s.part != p || s.foreign.Load() != 0 || !p.Replicated() {
		return false
	}
	if p.Term() == s.term.Load() {
		// Still leader in the same term: a failed store means a write
		// failed for another reason and may yet be committed, so
		// reload. Once this broker is leader again in a later term,
		// its barrier has committed what it had appended and the rest
		// was never in the log: the store can recover exactly.
		return p.Raft().State() != raft.Leader
	}
	return true
}

// watchForeignLeaders counts, in s.foreign, every leader other than this
// broker that the partition's raft hears of from now on.
func (b *Broker) watchForeignLeaders(s *coordSlot) {
	self := raft.ServerID(strconv.Itoa(int(b.cfg.NodeID)))
	s.obs = raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" && lo.LeaderID != self {
			s.foreign.Add(1)
		}
		return false
	})
	s.part.RegisterObserver(s.obs)
}

// groupPartition maps a group id to its partition of __consumer_offsets.
func groupPartition(group string, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int32(h.Sum32() % uint32(n))
}

// groupConfig is the coordinator configuration shared by the single-node
// coordinator and the cluster ones.
// topicPartitionCount is the partition count of topic t for the group
// coordinator's checks. In a cluster it is the controller's record, and a
// topic not there yet is looked up again after catching up with the
// controller: a consumer may commit offsets for a topic created a moment
// ago that its partitions' leaders know but this broker's copy of the
// metadata does not yet.
func (b *Broker) topicPartitionCount(t string) (int32, bool) {
	if b.cluster == nil {
		tp := b.topic(t)
		if tp == nil {
			return 0, false
		}
		return int32(len(tp.parts)), true
	}
	for try := 0; ; try++ {
		if ti := b.cluster.Metadata().Topics[t]; ti != nil {
			return int32(len(ti.Partitions)), true
		}
		if try > 0 {
			return 0, false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := b.cluster.CatchUp(ctx)
		cancel()
		if err != nil {
			return 0, false
		}
	}
}

func (b *Broker) groupConfig(store group.Store, logger *slog.Logger) group.Config {
	delay := b.cfg.GroupInitialRebalanceDelay
	if delay == 0 {
		delay = -1 // the coordinator reads 0 as "default"; we mean none
	}
	cfg := group.Config{
		Logger:                logger,
		Store:                 store,
		InitialRebalanceDelay: delay,
		TopicPartitions:       b.topicPartitionCount,
		EndOffset: func(t string, part int32) (int64, bool) {
			p := b.partition(t, part)
			if p == nil {
				return 0, false
			}
			return p.HighWatermark(), true
		},
		PendingTxnOffset: func(g, t string, part int32) bool {
			return b.txn.PendingOffset(g, t, part)
		},
	}
	return cfg
}

// coordinatorFor returns the coordinator of group on this broker, or the
// error code to answer with. In a handover of the group's offsets
// partition that may end with this broker coordinating the group (it was
// just elected and loads the groups, or lost the leadership and an
// election is running, see handover.go) it first waits for the outcome,
// up to handoverWait: a coordinator that steps down and is elected again
// a moment later then costs its members a slower answer rather than
// NOT_COORDINATOR and their retries' growing back-off.
func (b *Broker) coordinatorFor(groupID string) (*group.Coordinator, int16) {
	var p *partition.Partition
	if t := b.topic(offsetsTopic); b.cluster != nil && t != nil && len(t.parts) > 0 {
		i := groupPartition(groupID, len(t.parts))
		p = t.parts[i]
		b.wakeDormant(offsetsTopic, i)
	}
	c, code := b.localCoordinator(groupID)
	if code == 0 || b.cluster == nil {
		return c, code
	}
	if !b.coordinatorPending(p) {
		return c, code
	}
	b.awaitHandover(context.Background(), b.handoverWait(),
		func() bool { c, code = b.localCoordinator(groupID); return code == 0 },
		func() bool { return b.coordinatorPending(p) })
	return c, code
}

// coordinatorPending reports whether this broker may shortly coordinate
// the groups of offsets partition p: leaderPending, or it is p's ready
// raft leader and its coordinator is not serving yet (syncCoordinators
// opens or resumes it on its next pass).
func (b *Broker) coordinatorPending(p *partition.Partition) bool {
	if p == nil || !p.Replicated() {
		return false
	}
	return p.Raft().State() == raft.Leader || b.leaderPending(p)
}

// localCoordinator is coordinatorFor without waiting.
func (b *Broker) localCoordinator(groupID string) (*group.Coordinator, int16) {
	if b.cluster == nil {
		return b.groups, 0
	}
	t := b.topic(offsetsTopic)
	if t == nil || len(t.parts) == 0 {
		return nil, kerr.CoordinatorNotAvailable.Code
	}
	i := groupPartition(groupID, len(t.parts))
	p := t.parts[i]
	b.coords.RLock()
	s := b.coords.slots[i]
	b.coords.RUnlock()
	if s != nil && p != nil && s.valid(p) {
		return s.c, 0
	}
	if p != nil && p.Replicated() && p.Raft().State() == raft.Leader {
		return nil, kerr.CoordinatorLoadInProgress.Code
	}
	return nil, kerr.NotCoordinator.Code
}

// coordinatorQuiet reports whether offsets partition i (p) has a serving
// coordinator here that is quiet (group.Coordinator.Quiet: a paused one
// is not), so that the partition may sleep.
func (b *Broker) coordinatorQuiet(i int32, p *partition.Partition) bool {
	b.coords.RLock()
	s := b.coords.slots[i]
	b.coords.RUnlock()
	return s != nil && s.valid(p) && s.c.Quiet()
}

// wakeCoordinators wakes the offsets partitions that sleep with this
// broker as their leader and waits, up to the handover wait each, for
// their coordinators: a request over every coordinator here (ListGroups)
// then sees their groups.
func (b *Broker) wakeCoordinators() {
	t := b.topic(offsetsTopic)
	if b.cluster == nil || t == nil {
		return
	}
	var woken []int32
	for i, p := range t.parts {
		if p != nil && b.dormantHere(p) {
			b.wakeDormant(offsetsTopic, int32(i))
			woken = append(woken, int32(i))
		}
	}
	for _, i := range woken {
		p := t.parts[i]
		b.awaitHandover(context.Background(), b.handoverWait(),
			func() bool {
				b.coords.RLock()
				s := b.coords.slots[i]
				b.coords.RUnlock()
				return s != nil && s.valid(p)
			},
			func() bool { return b.coordinatorPending(p) })
	}
}

// servedCoordinators returns every coordinator this broker runs.
func (b *Broker) servedCoordinators() []*group.Coordinator {
	if b.cluster == nil {
		if b.groups == nil {
			return nil
		}
		return []*group.Coordinator{b.groups}
	}
	b.coords.RLock()
	defer b.coords.RUnlock()
	out := make([]*group.Coordinator, 0, len(b.coords.slots))
	for _, s := range b.coords.slots {
		out = append(out, s.c)
	}
	return out
}

// committedOffset is a group's committed offset of a partition, if this
// broker coordinates the group.
func (b *Broker) committedOffset(groupID, topic string, part int32) (int64, bool) {
	c, code := b.localCoordinator(groupID)
	if code != 0 || c == nil {
		return 0, false
	}
	return c.Committed(groupID, topic, part)
}

// deleteTopicOffsets drops a deleted topic's offsets from every group
// coordinated here.
func (b *Broker) deleteTopicOffsets(topic string) {
	for _, c := range b.servedCoordinators() {
		c.DeleteTopicOffsets(topic)
	}
}

// runCoordinators follows the leadership of the offsets partitions until
// ctx ends, then closes every coordinator it opened.
func (b *Broker) runCoordinators(ctx context.Context) {
	var closing sync.WaitGroup
	// closed holds, per partition, a channel closed once the coordinator
	// being closed there is gone: a new one is opened only after that,
	// so the old one's last writes (the persister's final save) can never
	// land after the new one has loaded the log.
	closed := map[int32]chan struct{}{}
	defer func() {
		b.coords.Lock()
		slots := b.coords.slots
		b.coords.slots = map[int32]*coordSlot{}
		b.coords.Unlock()
		for i, s := range slots {
			b.closeCoordinator(i, s)
		}
		b.txn.Close()
		closing.Wait()
	}()
	pace := tick.Pace{Busy: coordinatorTick, Idle: coordinatorIdleTick, Hold: 5 * time.Second}
	pace.Run(ctx, func() bool {
		b.ensureClusterOffsetsTopic(ctx)
		b.syncCoordinators(&closing, closed)
		settled := b.txn.Sync(ctx, &closing)
		return !settled || !b.coordinatorsSettled(closed)
	}, b.cluster.LeaderChanges(), b.cluster.MetadataChanges(), b.txn.Wakes())
}

// coordinatorsSettled: the offsets topic exists, every offsets partition
// this broker leads has its coordinator serving, no other has one (paused
// included), and none is still closing: nothing for runCoordinators to
// do until a leadership or the metadata changes.
func (b *Broker) coordinatorsSettled(closed map[int32]chan struct{}) bool {
	t := b.topic(offsetsTopic)
	if t == nil || len(closed) > 0 {
		return false
	}
	b.coords.RLock()
	defer b.coords.RUnlock()
	for i, p := range t.parts {
		if p == nil {
			return false
		}
		s := b.coords.slots[int32(i)]
		if p.IsLeader() != (s != nil) || s != nil && (!s.valid(p) || !s.pausedAt.IsZero()) {
			return false
		}
	}
	return true
}

// syncCoordinators opens and closes coordinators to match the offsets
// partitions this broker leads. Closing runs in the background (a
// coordinator's Close waits for its store calls in flight, which end when
// raft reports the lost leadership); closing tracks those goroutines.
func (b *Broker) syncCoordinators(closing *sync.WaitGroup, closed map[int32]chan struct{}) {
	var parts []*partition.Partition
	if t := b.topic(offsetsTopic); t != nil {
		parts = t.parts
	}
	// Validity is checked without the lock (it reads raft state), then
	// the stale slots are removed under it.
	b.coords.RLock()
	slots := maps.Clone(b.coords.slots)
	b.coords.RUnlock()
	now := time.Now()
	for i, s := range slots {
		if int(i) >= len(parts) || parts[i] == nil {
			continue
		}
		p := parts[i]
		if s.valid(p) {
			delete(slots, i)
			continue
		}
		if !s.resumable(p) || (!s.pausedAt.IsZero() && now.Sub(s.pausedAt) > pauseLimit) {
			continue
		}
		// Keep it, paused: members cannot reach it meanwhile (requests
		// get NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS).
		delete(slots, i)
		if s.pausedAt.IsZero() {
			s.pausedAt = now
			s.c.Pause()
			if b.dormantHere(p) {
				b.log.Info("an offsets partition went to sleep; its group coordinator closes unless a request wakes it first", "partition", i, "term", s.term.Load())
			} else {
				b.log.Info("lost the leadership of an offsets partition; its group coordinator waits to be elected again", "partition", i, "term", s.term.Load())
			}
		}
	}
	b.coords.Lock()
	for i, s := range slots {
		if b.coords.slots[i] != s {
			continue
		}
		b.startClosingLocked(i, s, closing, closed)
	}
	b.coords.Unlock()
	b.readyOffsetsLeaders(parts)
	for i, p := range parts {
		if p == nil || !p.IsLeader() {
			continue
		}
		if done := closed[int32(i)]; done != nil {
			select {
			case <-done:
				delete(closed, int32(i))
			default:
				continue // the previous coordinator is still closing
			}
		}
		b.coords.RLock()
		have := b.coords.slots[int32(i)]
		b.coords.RUnlock()
		if have != nil {
			if !have.valid(p) && have.resumable(p) {
				b.resumeCoordinator(int32(i), have, p, closing, closed)
			}
			continue
		}
		s, err := b.openCoordinator(p)
		if err != nil {
			b.log.Error("cannot load the groups of an offsets partition this broker leads; retrying", "partition", i, "err", err)
			continue
		}
		b.coords.Lock()
		b.coords.slots[int32(i)] = s
		b.coords.Unlock()
		b.log.Info("coordinating the groups of an offsets partition", "partition", i, "term", s.term.Load())
	}
}

// startClosingLocked removes slot i (which holds s) and closes s in the
// background; closed[i] is closed once it is gone, so a new coordinator of
// the partition is opened only after the old one's last writes. b.coords
// must be locked.
func (b *Broker) startClosingLocked(i int32, s *coordSlot, closing *sync.WaitGroup, closed map[int32]chan struct{}) {
	delete(b.coords.slots, i)
	done := make(chan struct{})
	closed[i] = done
	closing.Add(1)
	go func() {
		defer closing.Done()
		defer close(done)
		b.closeCoordinator(i, s)
	}()
}

// resumeCoordinator lets a paused coordinator serve again in p's current
// term, this broker being p's ready leader again with no other leader
// seen: the barrier made the log hold every entry of the earlier terms,
// those the coordinator proposed included. If its store cannot recover,
// the slot is closed and the next pass opens a new coordinator.
func (b *Broker) resumeCoordinator(i int32, s *coordSlot, p *partition.Partition, closing *sync.WaitGroup, closed map[int32]chan struct{}) {
	term := p.Term()
	st, err := s.store.Recover()
	if err != nil || s.foreign.Load() != 0 || p.Term() != term || !p.IsLeader() {
		if err != nil {
			b.log.Warn("cannot resume the group coordinator of an offsets partition; reloading it", "partition", i, "err", err)
		}
		b.coords.Lock()
		if b.coords.slots[i] == s {
			b.startClosingLocked(i, s, closing, closed)
		}
		b.coords.Unlock()
		return
	}
	old := s.term.Swap(term)
	s.c.Resume(st)
	paused := time.Duration(0)
	if !s.pausedAt.IsZero() {
		paused = time.Since(s.pausedAt)
	}
	s.pausedAt = time.Time{}
	b.log.Info("coordinating the groups of an offsets partition again, elected again with no other leader in between",
		"partition", i, "term", term, "previous_term", old, "paused", paused.Round(time.Millisecond))
}

// readyOffsetsLeaders runs the raft barrier that makes a new leader ready
// (see partition.ReadyLeaders) on the offsets partitions this broker has just
// become leader of, concurrently, and waits for them. The general pass
// goes over every partition of the broker one round at a time, which
// with many partitions on a loaded machine can keep a new coordinator
// answering COORDINATOR_LOAD_IN_PROGRESS for many seconds; the groups of
// every consumer of the cluster wait on these few partitions.
func (b *Broker) readyOffsetsLeaders(parts []*partition.Partition) {
	partition.ReadyLeaders(parts, "new offsets partition leader not ready yet")
}

// openCoordinator loads the groups of an offsets partition this broker
// leads from its log and starts their coordinator.
func (b *Broker) openCoordinator(p *partition.Partition) (*coordSlot, error) {
	s := &coordSlot{part: p, since: time.Now()}
	s.term.Store(p.Term())
	logger := b.log.With("part", "groups", "offsets_partition", p.Index())
	var store *group.LogStore
	var err error
	if p.Replicated() {
		store, err = group.OpenReplicatedLogStore(p.Log(), logger, func(batch []byte) func() error {
			return p.Propose(s.term.Load(), batch)
		})
	} else {
		store, err = group.OpenLogStore(p.Log(), logger, func(int64) { p.AdvanceHW() })
	}
	if err != nil {
		return nil, err
	}
	cfg := b.groupConfig(store, logger)
	// A member must never hold a generation the next leader does not
	// know: SyncGroup answers once its generation is replicated.
	cfg.DurableSync = true
	c, err := group.New(cfg)
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	s.store, s.c = store, c
	if p.Replicated() {
		b.watchForeignLeaders(s)
	}
	return s, nil
}

func (b *Broker) closeCoordinator(i int32, s *coordSlot) {
	if s.obs != nil {
		s.part.DeregisterObserver(s.obs)
	}
	if err := s.c.Close(); err != nil {
		b.log.Warn("cannot close a group coordinator", "offsets_partition", i, "err", err)
	}
	b.log.Info("stopped coordinating the groups of an offsets partition", "partition", i, "term", s.term.Load())
}

// offsetsTopicBrokers is how many alive brokers the controller waits for
// before it creates __consumer_offsets, so that the topic gets the full
// default replication factor rather than whatever was up first.
func (b *Broker) offsetsTopicBrokers(md *cluster.Metadata) int {
	return min(cluster.DefaultReplicationFactor, max(1, b.cfg.BootstrapExpect, len(md.Brokers)))
}

// ensureClusterOffsetsTopic creates __consumer_offsets on the controller
// leader once enough brokers are alive. Other brokers do nothing: the
// leader's loop does it.
func (b *Broker) ensureClusterOffsetsTopic(ctx context.Context) {
	if b.cluster == nil || !b.cluster.IsLeader() {
		return
	}
	md := b.cluster.Metadata()
	if md.Topics[offsetsTopic] != nil || len(md.AliveBrokers()) < b.offsetsTopicBrokers(md) {
		return
	}
	if err := b.createInternalTopic(ctx, offsetsTopic, offsetsTopicPartitions, offsetsTopicConfigs); err != nil {
		b.log.Warn("cannot create the offsets topic; retrying", "topic", offsetsTopic, "err", err)
		return
	}
	b.log.Info("offsets topic created", "topic", offsetsTopic, "partitions", offsetsTopicPartitions)
}

// createInternalTopic has the controller create an internal topic with
// the default replication factor; one that exists already is no error.
func (b *Broker) createInternalTopic(ctx context.Context, name string, partitions int32, configs map[string]string) error {
	cmd := cluster.Command{Op: cluster.OpCreateTopic, Topic: name, Partitions: partitions, Configs: configs, ReplicationFactor: -1}
	_, _ = rand.Read(cmd.TopicID[:])
	actx, cancel := context.WithTimeout(ctx, admin.Timeout)
	defer cancel()
	if _, err := b.cluster.Apply(actx, cmd); err != nil && !errors.Is(err, cluster.ErrTopicExists) {
		return err
	}
	return nil
}
