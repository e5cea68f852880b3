package broker

// Placement through raft membership (cluster mode). The controller
// metadata holds each partition's replica set (Assignment.Replicas, the
// first replica being the preferred leader) and, while a partition moves,
// the set it moves to (Assignment.Target). Three parties act on it, all in
// placementLoop, once a second:
//
//  1. The controller leader plans: it sets Target for partitions with a
//     replica on a broker that has been gone for --replica-replace-after
//     (the replica is re-created on the alive broker holding the fewest),
//     and, with --auto-rebalance, for partitions on brokers holding more
//     replicas or preferred leaderships than others (so a broker that
//     joins takes its share). At most maxMoves partitions move at once.
//  2. The partition's raft leader carries a Target out through raft: each
//     new replica is added as a non-voter (it catches up from the
//     leader's snapshot carrying the data, see partition/snapshot.go), is
//     promoted to voter once it reports an applied end offset at least
//     the leader's high watermark at the time it was added, then the
//     replicas not in Target are removed (the leader hands leadership to
//     a Target replica first if it is one of them), and once the voters
//     are exactly Target it applies OpFinishReassignment. Writes go on
//     throughout: the old replicas keep the quorum until the new ones are
//     voters.
//  3. A new replica reports its applied end offset (OpReplicaProgress)
//     while it catches up; a broker no longer in a partition's set closes
//     it and deletes its files (followClusterMetadata).
//
// Without a Target, the raft leader of a partition that is not its
// preferred leader hands leadership to the preferred one (raft
// LeadershipTransferToServer) once that broker has been alive for
// preferredLeaderDelay (coordinatorLeaderDelay for the partitions of the
// coordinators' internal topics), so leaders spread again after a broker
// returns.
//
// Every step is idempotent and re-derived from the metadata and the raft
// configuration on each tick, so a leader change or restart in the middle
// of a move only delays it.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/internal/tick"
)

const (
	// maxMoves bounds the partitions being reassigned at once.
	maxMoves = 3
	// preferredLeaderDelay is how long a preferred leader must be alive
	// again before leadership is handed back to it.
	preferredLeaderDelay = 10 * time.Second
	// coordinatorLeaderDelay replaces preferredLeaderDelay for the
	// partitions of __consumer_offsets and __transaction_state: moving
	// one moves the coordinators of its groups or transactional ids
	// (their members rejoin, requests in flight fail), so leadership
	// that moved, on a loaded machine often only because an election
	// came at the wrong moment, goes back only once the preferred
	// leader has been alive that long, not at every move.
	coordinatorLeaderDelay = 2 * time.Minute
	// membershipTimeout bounds one raft membership change.
	membershipTimeout = 10 * time.Second
)

// registerPlacement adds the series of replica placement and catch-up.
func (m *metrics) registerPlacement(b *Broker) {
	m.snapshotInstalls = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_replica_snapshot_installs_total",
		Help: "Replicated partitions that caught up by installing the data of their leader's snapshot."})
	m.reassignments = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_replica_membership_changes_total",
		Help: "Raft membership changes this broker made as partition leader, by kind (add, promote, remove, transfer, finish) and result (ok, error)."}, []string{"kind", "result"})
	m.reg.MustRegister(m.snapshotInstalls, m.reassignments,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_reassignments_in_progress",
			Help: "Partitions the controller metadata shows moving to a new replica set."}, func() float64 {
			if b.cluster == nil {
				return 0
			}
			n := 0
			for _, t := range b.cluster.Metadata().Topics {
				for _, a := range t.Partitions {
					if a.Target != nil {
						n++
					}
				}
			}
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_under_replicated_partitions",
			Help: "Partitions this broker leads with a replica on a broker that is not alive."}, func() float64 {
			return float64(b.underReplicated())
		}),
	)
}

// underReplicated counts partitions led here with a replica on a broker
// the metadata marks not alive.
func (b *Broker) underReplicated() int {
	if b.cluster == nil {
		return 0
	}
	md := b.cluster.Metadata()
	n := 0
	b.eachLed(md, func(_ *topic, _ int, _ *partition.Partition, a cluster.Assignment) {
		for _, r := range a.Replicas {
			if br, ok := md.Brokers[r]; !ok || !br.Alive {
				n++
				break
			}
		}
	})
	return n
}

// placer is placementLoop's state; only that goroutine touches it.
type placer struct {
	b *Broker
	// caughtUpAt is, per partition group and new replica, the leader's
	// high watermark when it added the replica: the replica is promoted
	// once it reports that much.
	caughtUpAt map[uint64]map[int32]int64
	// preferredSince is when this leader may next hand leadership to its
	// partition's preferred leader (alive and not leading); a failed
	// transfer doubles the wait (preferredFailures) up to 5 minutes.
	preferredSince    map[uint64]time.Time
	preferredFailures map[uint64]int
	// reported is the last progress this broker reported per group.
	reported map[uint64]int64
	// downSince is when the controller leader first saw a broker not
	// alive (reset when another broker becomes leader).
	downSince map[int32]time.Time
	// planning: this broker is the controller leader and has caught up
	// with its predecessor's commands, so plans see current metadata.
	planning bool
}

func (b *Broker) placementLoop(ctx context.Context) {
	pl := &placer{b: b, caughtUpAt: map[uint64]map[int32]int64{}, preferredSince: map[uint64]time.Time{},
		preferredFailures: map[uint64]int{}, reported: map[uint64]int64{}, downSince: map[int32]time.Time{}}
	tick.Every(ctx, time.Second, func() { pl.step(ctx) })
}

// step is one pass of the placement loop: this broker's duties for its
// partitions and, on the controller leader, planning.
func (pl *placer) step(ctx context.Context) {
	pl.partitionDuties(ctx)
	switch {
	case !pl.b.cluster.IsLeader():
		pl.planning = false
		clear(pl.downSince)
	case !pl.planning:
		// A new controller leader may not have applied its
		// predecessor's last commands yet: wait for them once.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		pl.planning = pl.b.cluster.CatchUp(cctx) == nil
		cancel()
	default:
		pl.plan(ctx)
	}
}

func serverID(id int32) raft.ServerID { return raft.ServerID(strconv.Itoa(int(id))) }

func nodeOf(s raft.ServerID) int32 {
	v, err := strconv.Atoi(string(s))
	if err != nil {
		return -1
	}
	return int32(v)
}

// partitionDuties runs the leader and new-replica steps for every local
// replicated partition.
func (pl *placer) partitionDuties(ctx context.Context) {
	b := pl.b
	md := b.cluster.Metadata()
	self := b.cfg.NodeID
	for _, tp := range b.allTopics() {
		ti := md.Topics[tp.name]
		if ti == nil || ti.ID != tp.id {
			continue
		}
		for i, p := range tp.parts {
			if ctx.Err() != nil {
				return
			}
			if p == nil || !p.Replicated() || i >= len(ti.Partitions) {
				continue
			}
			a := ti.Partitions[i]
			gid := cluster.PartitionGroupID(tp.id, int32(i))
			if a.Target == nil {
				delete(pl.caughtUpAt, gid)
				delete(pl.reported, gid)
			}
			switch {
			case a.Target != nil && b.dormantHere(p):
				// Its leader moves the reassignment on once awake.
				p.Elect()
			case p.IsLeader() && a.Target != nil:
				pl.advance(ctx, md, tp, int32(i), p, a)
			case p.IsLeader():
				pl.preferLeader(md, p, a, gid)
			case a.Target != nil && slices.Contains(a.Target, self) && !slices.Contains(a.Replicas, self):
				pl.reportProgress(ctx, tp, int32(i), p, a, gid)
			}
		}
	}
}

// reportProgress tells the controller how far this new replica got.
func (pl *placer) reportProgress(ctx context.Context, tp *topic, i int32, p *partition.Partition, a cluster.Assignment, gid uint64) {
	b := pl.b
	hw := p.HighWatermark()
	if got, ok := a.Progress[b.cfg.NodeID]; ok && got >= hw {
		return
	}
	if last, ok := pl.reported[gid]; ok && last == hw {
		return
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := b.cluster.Apply(actx, cluster.Command{Op: cluster.OpReplicaProgress, Topic: tp.name, TopicID: tp.id, Partition: i, Leader: b.cfg.NodeID, Offset: hw})
	cancel()
	if err != nil {
		b.log.Debug("cannot report replica progress; retrying", "partition", p.String(), "err", err)
		return
	}
	pl.reported[gid] = hw
}

func (pl *placer) count(kind string, err error) {
	res := "ok"
	if err != nil {
		res = "error"
	}
	pl.b.metrics.reassignments.WithLabelValues(kind, res).Inc()
}

// advance takes one partition led here one step towards its Target.
func (pl *placer) advance(ctx context.Context, md *cluster.Metadata, tp *topic, i int32, p *partition.Partition, a cluster.Assignment) {
	b := pl.b
	r := p.Raft()
	gid := cluster.PartitionGroupID(tp.id, i)
	log := b.log.With("partition", p.String(), "target", a.Target)
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	servers := f.Configuration().Servers
	find := func(id int32) (raft.Server, bool) {
		for _, s := range servers {
			if s.ID == serverID(id) {
				return s, true
			}
		}
		return raft.Server{}, false
	}
	if pl.caughtUpAt[gid] == nil {
		pl.caughtUpAt[gid] = map[int32]int64{}
	}
	changed := false
	allVoters := true
	for _, t := range a.Target {
		s, ok := find(t)
		switch {
		case !ok:
			allVoters = false
			br, known := md.Brokers[t]
			if !known || !br.Alive {
				log.Debug("reassignment waits for a target broker to be alive", "broker", t)
				continue
			}
			pl.caughtUpAt[gid][t] = p.HighWatermark()
			err := r.AddNonvoter(serverID(t), raft.ServerAddress(br.RaftAddr), 0, membershipTimeout).Error()
			pl.count("add", err)
			log.Info("new replica added as non-voter; it catches up from the leader", "broker", t, "catch_up_to", pl.caughtUpAt[gid][t], "err", err)
			changed = true
		case s.Suffrage != raft.Voter:
			allVoters = false
			want, ok := pl.caughtUpAt[gid][t]
			if !ok {
				want = p.HighWatermark()
				pl.caughtUpAt[gid][t] = want
			}
			got, reported := a.Progress[t]
			if !reported || got < want {
				continue
			}
			err := r.AddVoter(s.ID, s.Address, 0, membershipTimeout).Error()
			pl.count("promote", err)
			log.Info("new replica caught up; promoted to voter", "broker", t, "applied_end", got, "err", err)
			changed = true
		}
	}
	if changed || !allVoters {
		return
	}
	for _, s := range servers {
		id := nodeOf(s.ID)
		if slices.Contains(a.Target, id) {
			continue
		}
		if id == b.cfg.NodeID {
			// This leader leaves the group: hand leadership to the first
			// target replica; the new leader finishes the move.
			to, _ := find(a.Target[0])
			err := r.LeadershipTransferToServer(to.ID, to.Address).Error()
			pl.count("transfer", err)
			log.Info("leaving replica hands partition leadership to a target replica", "to", a.Target[0], "err", err)
			return
		}
		err := r.RemoveServer(s.ID, 0, membershipTimeout).Error()
		pl.count("remove", err)
		log.Info("replica removed from the partition's raft group", "broker", id, "err", err)
		changed = true
	}
	if changed {
		return
	}
	// The voters are exactly Target: record it.
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := b.cluster.Apply(actx, cluster.Command{Op: cluster.OpFinishReassignment, Topic: tp.name, TopicID: tp.id, Partition: i, Replicas: a.Target})
	cancel()
	pl.count("finish", err)
	if err != nil {
		log.Warn("cannot record the finished reassignment; retrying", "err", err)
		return
	}
	delete(pl.caughtUpAt, gid)
	log.Info("reassignment finished", "replicas", a.Target, "was", a.Replicas)
}

// preferLeader hands leadership to the partition's preferred leader (its
// first replica) once that broker has been alive for a while.
func (pl *placer) preferLeader(md *cluster.Metadata, p *partition.Partition, a cluster.Assignment, gid uint64) {
	b := pl.b
	if len(a.Replicas) < 2 || a.Replicas[0] == b.cfg.NodeID {
		delete(pl.preferredSince, gid)
		delete(pl.preferredFailures, gid)
		return
	}
	pref := a.Replicas[0]
	if br, ok := md.Brokers[pref]; !ok || !br.Alive {
		delete(pl.preferredSince, gid)
		return
	}
	at, ok := pl.preferredSince[gid]
	if !ok {
		delay := preferredLeaderDelay
		if p.Topic() == offsetsTopic || p.Topic() == txnStateTopic {
			delay = coordinatorLeaderDelay
		}
		pl.preferredSince[gid] = time.Now().Add(delay)
		return
	}
	if time.Now().Before(at) {
		return
	}
	r := p.Raft()
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if s.ID != serverID(pref) || s.Suffrage != raft.Voter {
			continue
		}
		err := r.LeadershipTransferToServer(s.ID, s.Address).Error()
		pl.count("transfer", err)
		if err != nil {
			n := min(pl.preferredFailures[gid]+1, 5)
			pl.preferredFailures[gid] = n
			wait := preferredLeaderDelay << n // 20 s .. 5 min 20 s
			pl.preferredSince[gid] = time.Now().Add(wait)
			b.log.Info("cannot hand leadership back to the preferred leader yet; retrying later", "partition", p.String(), "preferred", pref, "retry_in", wait, "err", err)
			return
		}
		b.log.Info("leadership handed back to the preferred leader", "partition", p.String(), "preferred", pref)
		delete(pl.preferredSince, gid)
		delete(pl.preferredFailures, gid)
		return
	}
}

// move is one planned reassignment.
type move struct {
	topic  *cluster.TopicInfo
	part   int32
	target []int32
	why    string
	// override replaces the target of a move in progress.
	override bool
}

// plan runs on the controller leader: it starts reassignments for
// replicas on long-gone brokers and, with AutoRebalance, for an uneven
// spread. See the file comment.
func (pl *placer) plan(ctx context.Context) {
	b := pl.b
	md := b.cluster.Metadata()
	now := time.Now()
	for id, br := range md.Brokers {
		if br.Alive {
			delete(pl.downSince, id)
		} else if _, ok := pl.downSince[id]; !ok {
			pl.downSince[id] = now
		}
	}
	moves := planMoves(md, func(id int32) time.Duration {
		if s, ok := pl.downSince[id]; ok {
			return now.Sub(s)
		}
		return 0
	}, b.cfg.ReplicaReplaceAfter, b.cfg.AutoRebalance)
	for _, m := range moves {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := b.cluster.Apply(actx, cluster.Command{Op: cluster.OpReassign, Topic: m.topic.Name, TopicID: m.topic.ID, Partition: m.part, Replicas: m.target, Override: m.override})
		cancel()
		if err != nil {
			b.log.Warn("cannot start a reassignment", "topic", m.topic.Name, "partition", m.part, "target", m.target, "err", err)
			return
		}
		b.log.Info("reassignment started", "topic", m.topic.Name, "partition", m.part,
			"replicas", m.topic.Partitions[m.part].Replicas, "target", m.target, "why", m.why)
	}
}

// planMoves is the controller's placement policy, a pure function of the
// metadata: downFor says how long a broker has been not alive (0 if it
// is alive). It starts at most maxMoves minus those in progress, and may
// also replace a gone broker in the target of a move in progress.
func planMoves(md *cluster.Metadata, downFor func(int32) time.Duration, replaceAfter time.Duration, rebalance bool) []move {
	var topics []*cluster.TopicInfo
	inProgress := 0
	for _, t := range md.Topics {
		if t.Name == offsetsTopic {
			continue
		}
		topics = append(topics, t)
		for _, a := range t.Partitions {
			if a.Target != nil {
				inProgress++
			}
		}
	}
	slices.SortFunc(topics, func(x, y *cluster.TopicInfo) int {
		if x.Name < y.Name {
			return -1
		}
		if x.Name > y.Name {
			return 1
		}
		return 0
	})
	// budget is how many more partitions may start moving; replacing a
	// gone broker in the target of a move in progress does not count.
	budget := maxMoves - inProgress
	started := 0
	alive := md.AliveBrokers()
	holds, leads := map[int32]int{}, map[int32]int{}
	for _, br := range alive {
		holds[br.ID], leads[br.ID] = 0, 0
	}
	downWithReplicas := false
	for _, t := range topics {
		for _, a := range t.Partitions {
			if len(a.Replicas) < 2 {
				continue
			}
			for j, r := range a.Members() {
				if _, ok := holds[r]; ok {
					holds[r]++
					if j == 0 {
						leads[r]++
					}
				} else {
					downWithReplicas = true
				}
			}
		}
	}
	var out []move
	moving := map[*cluster.TopicInfo]map[int32]bool{}
	add := func(t *cluster.TopicInfo, p int32, target []int32, why string) {
		override := t.Partitions[p].Target != nil
		if !override {
			started++
		}
		out = append(out, move{topic: t, part: p, target: target, why: why, override: override})
		if moving[t] == nil {
			moving[t] = map[int32]bool{}
		}
		moving[t][p] = true
	}
	// 1. Replicas on brokers gone for replaceAfter are re-created; in a
	// move in progress, the gone broker is replaced in its target (it
	// may be the new replica that died).
	if replaceAfter > 0 {
		for _, t := range topics {
			for p, a := range t.Partitions {
				if len(a.Replicas) < 2 || (a.Target == nil && started >= budget) {
					continue
				}
				base := a.Replicas
				if a.Target != nil {
					base = a.Target
				}
				target := slices.Clone(base)
				replaced := false
				for j, r := range target {
					if d := downFor(r); d < replaceAfter || d == 0 {
						continue
					}
					if to := cluster.Fewest(alive, holds, target); to >= 0 {
						holds[to]++
						target[j] = to
						replaced = true
					}
				}
				if replaced {
					add(t, int32(p), target, "replica on a broker gone longer than --replica-replace-after")
				}
			}
		}
	}
	if !rebalance || downWithReplicas || len(alive) < 2 {
		return out
	}
	// 2. Replicas: move one from the broker holding the most to the one
	// holding the fewest while they differ by more than one.
	for started < budget {
		most, least := mostAndLeast(alive, holds)
		if holds[most]-holds[least] <= 1 {
			break
		}
		found := false
		// Prefer moving a preferred leadership along when the most
		// loaded broker also leads more.
		for _, wantFirst := range []bool{leads[most] > leads[least], !(leads[most] > leads[least])} {
			for _, t := range topics {
				for p, a := range t.Partitions {
					if found || a.Target != nil || moving[t][int32(p)] || len(a.Replicas) < 2 {
						continue
					}
					j := slices.Index(a.Replicas, most)
					if j < 0 || slices.Contains(a.Replicas, least) || (j == 0) != wantFirst {
						continue
					}
					target := slices.Clone(a.Replicas)
					target[j] = least
					holds[most]--
					holds[least]++
					if j == 0 {
						leads[most]--
						leads[least]++
					}
					add(t, int32(p), target, "spread replicas evenly")
					found = true
				}
			}
			if found {
				break
			}
		}
		if !found {
			break
		}
	}
	// 3. Preferred leaders: reorder a partition's replicas (no data
	// moves) from the broker preferred most often to one preferred least.
	for started < budget {
		most, least := mostAndLeast(alive, leads)
		if leads[most]-leads[least] <= 1 {
			break
		}
		found := false
		for _, t := range topics {
			for p, a := range t.Partitions {
				if found || a.Target != nil || moving[t][int32(p)] || len(a.Replicas) < 2 || a.Replicas[0] != most {
					continue
				}
				j := slices.Index(a.Replicas, least)
				if j < 0 {
					continue
				}
				target := slices.Clone(a.Replicas)
				target[0], target[j] = target[j], target[0]
				leads[most]--
				leads[least]++
				add(t, int32(p), target, "spread preferred leaders evenly")
				found = true
			}
		}
		if !found {
			break
		}
	}
	return out
}

func (m move) String() string {
	return fmt.Sprintf("%s/%d -> %v (%s)", m.topic.Name, m.part, m.target, m.why)
}

// PlanRebalance is the plan `simtel cluster rebalance` sends: the moves
// the controller's --auto-rebalance policy makes, run until nothing is
// left to move, for a cluster whose alive brokers are brokers and whose
// topics have the given replica lists (topic -> partition -> replicas,
// the first the preferred leader). It returns each partition whose
// replicas change with its new list. Replicas on brokers not in brokers
// block the plan (empty result): such a broker's replicas are first
// re-created after --replica-replace-after, or it returns.
func PlanRebalance(brokers []int32, topics map[string][][]int32) map[string]map[int32][]int32 {
	md := &cluster.Metadata{Brokers: map[int32]cluster.BrokerInfo{}, Topics: map[string]*cluster.TopicInfo{}}
	for _, id := range brokers {
		md.Brokers[id] = cluster.BrokerInfo{ID: id, Alive: true}
	}
	for name, parts := range topics {
		t := &cluster.TopicInfo{Name: name}
		for _, r := range parts {
			t.Partitions = append(t.Partitions, cluster.Assignment{Replicas: slices.Clone(r)})
		}
		md.Topics[name] = t
	}
	never := func(int32) time.Duration { return 0 }
	for range 100000 {
		moves := planMoves(md, never, 0, true)
		if len(moves) == 0 {
			break
		}
		for _, m := range moves {
			m.topic.Partitions[m.part].Replicas = m.target
		}
	}
	out := map[string]map[int32][]int32{}
	for name, parts := range topics {
		for i, r := range parts {
			now := md.Topics[name].Partitions[i].Replicas
			if slices.Equal(now, r) {
				continue
			}
			if out[name] == nil {
				out[name] = map[int32][]int32{}
			}
			out[name][int32(i)] = now
		}
	}
	return out
}

// handOffLeadership transfers the leadership of every partition this
// broker leads to another replica before a clean shutdown, concurrently
// and for at most a few seconds, so clients see NOT_LEADER_OR_FOLLOWER
// and move on at once instead of waiting for an election timeout.
func (b *Broker) handOffLeadership() {
	var wg sync.WaitGroup
	var moved atomic.Int64
	start := time.Now()
	for _, tp := range b.allTopics() {
		for _, p := range tp.parts {
			if p == nil || !p.Replicated() || p.Raft().State() != raft.Leader {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := p.Raft().LeadershipTransfer().Error()
				if err != nil {
					b.log.Debug("cannot hand off partition leadership before shutdown", "partition", p.String(), "err", err)
					return
				}
				moved.Add(1)
			}()
		}
	}
	wg.Wait()
	if n := moved.Load(); n > 0 {
		b.log.Info("handed off partition leadership before shutdown", "partitions", n, "took", time.Since(start).Round(time.Millisecond))
	}
}

// mostAndLeast returns the alive brokers with the highest and the lowest
// count (the first in alive's order on a tie). alive is not empty.
func mostAndLeast(alive []cluster.BrokerInfo, count map[int32]int) (most, least int32) {
	most, least = alive[0].ID, alive[0].ID
	for _, br := range alive {
		if count[br.ID] > count[most] {
			most = br.ID
		}
		if count[br.ID] < count[least] {
			least = br.ID
		}
	}
	return most, least
}
