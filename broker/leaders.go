package broker

// The broker's side of its replicated partitions: starting a partition's
// raft group with the broker's settings, making new leaders ready and
// reporting them to the controller, and the leaders Metadata names. A
// partition's own replication (its state machine, snapshots, proposals)
// is in package partition.

import (
	"context"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/internal/tick"
)

// startReplica starts the partition's raft group; the caller then
// publishes the partition.
func (b *Broker) startReplica(p *partition.Partition, topicID [16]byte, replicas []int32, bootstrap bool) error {
	return p.StartReplica(b.cluster, partition.ReplicaConfig{
		TopicID:          topicID,
		Dir:              filepath.Join(b.partitionDir(p.Topic(), p.Index()), "raft"),
		Peers:            replicas,
		Bootstrap:        bootstrap,
		SnapshotEntries:  uint64(b.cfg.ReplicaSnapshotEntries),
		TrailingLogs:     uint64(b.cfg.ReplicaTrailingLogs),
		HeartbeatTimeout: b.cfg.ReplicaHeartbeatTimeout,
		Logger:           b.log.With("part", "replica", "topic", p.Topic(), "partition", p.Index()),
	})
}

// readyNewLeaders runs a raft barrier on every partition this broker
// leads in a term it is not ready in yet (see partition.ReadyLeaders). It
// reports whether one of them is still not ready.
func (b *Broker) readyNewLeaders() bool {
	var parts []*partition.Partition
	for _, tp := range b.allTopics() {
		parts = append(parts, tp.parts...)
	}
	return partition.ReadyLeaders(parts, "new partition leader not ready yet") > 0
}

// reportLeaders makes new raft leaders ready to serve (a barrier, so
// every entry committed before their term is applied) and tells the
// controller about partitions this broker leads (raft leader, term) when
// its metadata says otherwise, so Metadata answers name the current leader
// and epoch. It runs until ctx ends: at once when a group has a new
// leader (maybe this broker) or the metadata changed, then every 100 ms
// while a pass left something to do (a leader not ready, a report sent
// but not seen in the metadata yet) or for a few seconds after such
// news, and every second otherwise (an idle broker wakes seldom).
func (b *Broker) reportLeaders(ctx context.Context) {
	// A group may be led before its partition is published (a new
	// topic's replicas elect while the broker opens them): passes stay
	// frequent for a while after every piece of news.
	pace := tick.Pace{Busy: 100 * time.Millisecond, Idle: time.Second, Hold: 5 * time.Second}
	pace.Run(ctx, func() bool { return b.leaderPass(ctx) }, b.cluster.LeaderChanges(), b.cluster.MetadataChanges())
}

// leaderPass is one pass of reportLeaders; it reports whether something
// is left to do.
func (b *Broker) leaderPass(ctx context.Context) bool {
	busy := b.readyNewLeaders()
	// Several reports at once: the controller's raft writes the
	// commands that arrive together in one log write, where one after
	// the other a broker that became the leader of thousands of new
	// partitions took minutes to report them.
	var wg sync.WaitGroup
	sem := make(chan struct{}, reportWorkers)
	defer wg.Wait()
	b.eachLed(b.cluster.Metadata(), func(tp *topic, i int, p *partition.Partition, a cluster.Assignment) {
		epoch := p.LeaderEpoch()
		if a.Leader == b.cfg.NodeID && a.LeaderEpoch == epoch {
			return
		}
		busy = true
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			b.reportLeader(ctx, tp, i, epoch)
		}()
	})
	return busy
}

// reportWorkers is how many leaderships a broker reports to the
// controller at once.
const reportWorkers = 16

// reportLeader tells the controller that this broker leads partition i of
// tp in epoch.
func (b *Broker) reportLeader(ctx context.Context, tp *topic, i int, epoch int32) {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := b.cluster.Apply(actx, cluster.Command{Op: cluster.OpSetPartitionLeader, Topic: tp.name, TopicID: tp.id,
		Partition: int32(i), Leader: b.cfg.NodeID, LeaderEpoch: epoch})
	cancel()
	if err != nil {
		b.log.Debug("cannot report partition leadership; retrying", "topic", tp.name, "partition", i, "err", err)
		return
	}
	b.log.Info("leading partition", "topic", tp.name, "partition", i, "epoch", epoch)
}

// eachLed calls fn with every replicated partition this broker leads
// that md knows (same topic id), and md's assignment of it.
func (b *Broker) eachLed(md *cluster.Metadata, fn func(tp *topic, i int, p *partition.Partition, a cluster.Assignment)) {
	for _, tp := range b.allTopics() {
		ti := md.Topics[tp.name]
		if ti == nil || ti.ID != tp.id {
			continue
		}
		for i, p := range tp.parts {
			if p == nil || !p.Replicated() || i >= len(ti.Partitions) || !p.IsLeader() {
				continue
			}
			fn(tp, i, p, ti.Partitions[i])
		}
	}
}

// localLeader is the leader and epoch (raft term) of a replicated
// partition as this broker's replica of it sees them. replica is false
// when this broker has no replica of it; ok is false also when its raft
// knows no leader (an election is running). It is at least as new as the
// controller's record, which the leader reports only after it is elected.
func (b *Broker) localLeader(topicName string, topicID [16]byte, part int) (leader, epoch int32, replica, ok bool) {
	b.mu.RLock()
	tp := b.mu.topics[topicName]
	b.mu.RUnlock()
	if tp == nil || tp.id != topicID || part >= len(tp.parts) || tp.parts[part] == nil || !tp.parts[part].Replicated() {
		return -1, -1, false, false
	}
	if l, term, ok := tp.parts[part].DormantLeader(); ok {
		return l, int32(min(term, math.MaxInt32)), true, true
	}
	r := tp.parts[part].Raft()
	_, id := r.LeaderWithID()
	if id == "" {
		return -1, -1, true, false
	}
	v, err := strconv.Atoi(string(id))
	if err != nil {
		return -1, -1, true, false
	}
	return int32(v), int32(min(r.CurrentTerm(), math.MaxInt32)), true, true
}

// electionWait bounds how long a FindCoordinator answer waits for an
// election (awaitElection).
const electionWait = time.Second

// awaitElections holds a Metadata answer (up to handoverWait) while a
// replicated partition it names, with a replica on this broker, has no
// leader or a leader this broker saw die, and enough of its replicas
// live to elect one: an election is running (watch.go starts it when the
// leader's process goes away) and usually ends within milliseconds, but
// on a busy machine it can take seconds. Answering before it ends sends
// clients LEADER_NOT_AVAILABLE or the dead leader, and a client that
// refreshes metadata at most every few seconds (franz-go: 5 s by
// default) waits that long for its next try, so the answer waits as long
// as a handover may take rather than the usual election's time. A
// partition that has lost its quorum elects nobody: no wait for it.
func (b *Broker) awaitElections(ctx context.Context, topics []*cluster.TopicInfo) {
	deadline := time.Now().Add(b.handoverWait())
	// A client whose connection to a leader broke asks for metadata at
	// once, maybe before this broker has noticed that the leader died:
	// ask each named leader's raft port once (refused: gone).
	refused := map[int32]bool{}
	gone := func(l int32) bool {
		if b.cluster.PeerDown(l) {
			return true
		}
		v, asked := refused[l]
		if !asked {
			v = b.cluster.Refused(l)
			refused[l] = v
		}
		return v
	}
	for {
		md := b.cluster.Metadata()
		pending := false
		for _, t := range topics {
			for i, a := range t.Partitions {
				if len(a.Replicas) < 2 {
					continue
				}
				l, _, replica, ok := b.localLeader(t.Name, t.ID, i)
				if !replica {
					continue
				}
				if lb, alive := md.Brokers[l]; (!ok || !alive || !lb.Alive || gone(l)) && b.canElect(md, a) {
					pending = true
				}
			}
		}
		if !pending || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// canElect reports whether a quorum of a's replicas is on brokers not
// seen gone: its raft group can still elect a leader.
func (b *Broker) canElect(md *cluster.Metadata, a cluster.Assignment) bool {
	live := 0
	for _, r := range a.Replicas {
		if br, ok := md.Brokers[r]; ok && br.Alive && !b.cluster.PeerDown(r) {
			live++
		}
	}
	return live > len(a.Replicas)/2
}
