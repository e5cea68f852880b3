package broker

// Replicated partitions (cluster mode, replication factor > 1). Each such
// partition is a hashicorp/raft group on the shared raft mux whose state
// machine is the partition itself:
//
//   - The leader's Produce handler validates the batches and hands the
//     raw bytes to raft.Apply; one raft entry = one partition's records of
//     one produce request. Raft entries that are not commands (config,
//     no-op, barrier) never reach Apply and take no Kafka offsets.
//   - replicaFSM.Apply, identical on every replica, runs the idempotent
//     producer check, assigns the next offsets, stamps the batches with
//     the entry's raft term as partition leader epoch and appends to the
//     local storage.Log without an fsync: the raft log (the broker's raft
//     WAL, fsynced per write) is the durable copy. The high watermark is the applied end;
//     applied means committed on a majority.
//   - Snapshots are the storage.Log itself: Persist fsyncs the log up to
//     the end offset at the snapshot's raft index and records that offset.
//     On restart raft restores the newest snapshot (Restore truncates the
//     log to the recorded end, dropping batches whose entries raft is
//     about to apply again) and replays the entries after it; with no
//     snapshot yet the log is emptied and rebuilt from raft index 1. So a
//     restart has no duplicate and no missing batch.
//   - A replica that lags by more than the trailing raft log, or a new
//     replica added by a reassignment, gets the partition's data in the
//     leader's snapshot: see replica_snapshot.go.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/storage"
)

// replicaApplyTimeout bounds how long a Produce waits to enqueue its entry.
const replicaApplyTimeout = 10 * time.Second

// startReplica starts the partition's raft group; the caller then
// publishes the partition.
func (b *Broker) startReplica(p *Partition, topicID [16]byte, replicas []int32, bootstrap bool) error {
	f := &replicaFSM{p: p}
	snaps := &replicaSnapshots{p: p}
	g, err := b.cluster.StartGroup(cluster.GroupConfig{
		Group:     cluster.PartitionGroupID(topicID, p.index),
		Dir:       filepath.Join(b.partitionDir(p.topic, p.index), "raft"),
		FSM:       f,
		Peers:     replicas,
		Bootstrap: bootstrap,
		Prepare: func(hasSnapshot bool) error {
			if hasSnapshot {
				return nil // Restore truncates to the snapshot's end
			}
			// Raft replays its log from index 1: start from empty.
			return p.resetReplicaLog(0)
		},
		Snapshots: func(s raft.SnapshotStore) raft.SnapshotStore {
			snaps.SnapshotStore = s
			return snaps
		},
		SnapshotEntries:  uint64(b.cfg.ReplicaSnapshotEntries),
		TrailingLogs:     uint64(b.cfg.ReplicaTrailingLogs),
		HeartbeatTimeout: b.cfg.ReplicaHeartbeatTimeout,
		Logger:           b.log.With("part", "replica", "topic", p.topic, "partition", p.index),
	})
	if err != nil {
		return err
	}
	p.grp = g
	snaps.live.Store(true)
	return nil
}

// resetReplicaLog truncates the local log to end and rebuilds the
// producer state and high watermark from what is left.
func (p *Partition) resetReplicaLog(end int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log.EndOffset() > end {
		if err := p.log.Truncate(end); err != nil {
			return fmt.Errorf("cannot truncate %s to offset %d for raft replay: %w", p, end, err)
		}
	}
	p.mu.producers = map[int64]*producerEntry{}
	err := p.log.ScanBatchesControl(p.log.StartOffset(), func(h storage.BatchHeader, control []byte) error {
		p.observeBatchLocked(h, h.BaseOffset, control)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot rebuild producer state of %s: %w", p, err)
	}
	p.hw.Store(p.log.EndOffset())
	return nil
}

// replicated reports whether the partition is a raft group.
func (p *Partition) replicated() bool { return p.grp != nil }

// isLeader: the local replica may serve produce and fetch: it is the raft
// leader and has applied everything committed before its term (so its
// high watermark is not behind what a consumer may have seen from the
// previous leader). Always true for a partition that is not replicated.
func (p *Partition) isLeader() bool {
	if p.grp == nil {
		return true
	}
	r := p.grp.Raft
	return r.State() == raft.Leader && p.readyTerm.Load() == r.CurrentTerm()
}

// leaderEpoch is the raft term for a replicated partition, else 0.
func (p *Partition) leaderEpoch() int32 {
	if p.grp == nil {
		return leaderEpoch
	}
	return int32(min(p.grp.Raft.CurrentTerm(), math.MaxInt32))
}

// readyNewLeaders runs a raft barrier on every partition this broker
// leads in a term it is not ready in yet (see readyLeaders).
func (b *Broker) readyNewLeaders() {
	var parts []*Partition
	for _, tp := range b.allTopics() {
		parts = append(parts, tp.parts...)
	}
	b.readyLeaders(parts, "new partition leader not ready yet")
}

// readyLeaders runs a raft barrier on each of parts this broker leads in
// a term it is not ready in yet, concurrently, marks those that went
// through ready for their term, and waits for them all. A barrier that
// does not go through is logged at debug level with notReady; the next
// pass tries again.
func (b *Broker) readyLeaders(parts []*Partition, notReady string) {
	var wg sync.WaitGroup
	for _, p := range parts {
		if p == nil || p.grp == nil {
			continue
		}
		r := p.grp.Raft
		term := r.CurrentTerm()
		if r.State() != raft.Leader || p.readyTerm.Load() == term {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Barrier(5 * time.Second).Error(); err != nil {
				b.log.Debug(notReady, "partition", p.String(), "err", err)
				return
			}
			if r.CurrentTerm() == term {
				p.readyTerm.Store(term)
			}
		}()
	}
	wg.Wait()
}

// replicate validates one produce partition's records and applies them
// through raft; the returned future's Response is an appendResult.
func (p *Partition) replicate(records []byte) (raft.ApplyFuture, error) {
	if err := p.validateProduce(records); err != nil {
		return nil, err
	}
	if !p.isLeader() {
		return nil, fmt.Errorf("%w: this broker is not the raft leader of %s; refresh metadata", kerr.NotLeaderForPartition, p)
	}
	return p.grp.Raft.Apply(records, replicaApplyTimeout), nil
}

// replicaResult waits for an applied entry and maps raft's errors.
func replicaResult(f raft.ApplyFuture) appendResult {
	if err := f.Error(); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
			errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown):
			// ErrLeadershipLost: maybe committed, maybe not; an idempotent
			// retry is deduplicated by Apply.
			return appendResult{err: fmt.Errorf("%w: raft leadership changed while replicating: %v", kerr.NotLeaderForPartition, err)}
		default:
			return appendResult{err: fmt.Errorf("%w: cannot replicate: %v", kerr.RequestTimedOut, err)}
		}
	}
	res, ok := f.Response().(appendResult)
	if !ok {
		return appendResult{err: fmt.Errorf("%w: unexpected raft apply response %T", kerr.UnknownServerError, f.Response())}
	}
	return res
}

// replicaFSM is a replicated partition's raft state machine.
type replicaFSM struct{ p *Partition }

// Apply appends one committed entry's batches; see the file comment.
func (f *replicaFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	p := f.p
	hdrs, err := storage.ParseBatches(l.Data, 0)
	if err != nil {
		// The leader validated it; only a bug gets here, and it must
		// fail the same way on every replica.
		return appendResult{err: storageToKerr(err)}
	}
	p.mu.Lock()
	if err := p.checkMarkersLocked(l.Data, hdrs); err != nil {
		p.mu.Unlock()
		return appendResult{err: err}
	}
	dup, err := p.checkSequencesLocked(hdrs)
	if err != nil {
		p.mu.Unlock()
		return appendResult{err: err}
	}
	if dup >= 0 {
		p.mu.Unlock()
		return appendResult{base: dup, duplicate: true}
	}
	// Append rewrites base offsets and epochs in place; raft may still
	// hold this slice (the leader's request buffer), so work on a copy.
	data := append([]byte(nil), l.Data...)
	base, last, err := p.log.Append(data, hdrs, int32(min(l.Term, math.MaxInt32)))
	if err != nil {
		p.mu.Unlock()
		p.b.log.Error("replica cannot append a committed entry; this replica now differs from the others", "partition", p.String(), "index", l.Index, "err", err)
		return appendResult{err: storageToKerr(err)}
	}
	p.recordSequencesLocked(data, hdrs, base)
	p.hw.Store(last + 1)
	p.mu.Unlock()
	p.wakeWaiters()
	return appendResult{base: base, last: last}
}

// Snapshot runs on raft's FSM goroutine, so the end offset matches the
// snapshot's raft index exactly.
func (f *replicaFSM) Snapshot() (raft.FSMSnapshot, error) {
	return &replicaSnapshot{p: f.p, end: f.p.log.EndOffset()}, nil
}

// Restore brings the local log to the snapshot's end offset: a replica
// that has the data already (a restart) truncates to it, one that lags
// installs the data the snapshot carries (replica_snapshot.go). Raft then
// applies the entries after the snapshot.
func (f *replicaFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	p := f.p
	br := bufio.NewReaderSize(rc, maxSnapHeader)
	m, err := readSnapHeader(br)
	if err != nil {
		return fmt.Errorf("cannot restore %s: %w", p, err)
	}
	have := p.log.EndOffset()
	if have < m.EndOffset {
		if !m.Data {
			return fmt.Errorf("partition %s: the snapshot ends at offset %d but this replica's log ends at %d and the snapshot carries no records; "+
				"delete this replica's partition directory and restart the broker so that it gets the data from the leader", p, m.EndOffset, have)
		}
		start := time.Now()
		if err := p.installSnapshotData(br, m); err != nil {
			return err
		}
		if err := p.resetReplicaLog(m.EndOffset); err != nil {
			return err
		}
		p.b.metrics.snapshotInstalls.Inc()
		p.b.log.Info("replicated partition installed from the leader's snapshot", "partition", p.String(),
			"start_offset", m.StartOffset, "end_offset", m.EndOffset, "bytes", m.DataBytes, "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
	if err := p.resetReplicaLog(m.EndOffset); err != nil {
		return err
	}
	p.b.log.Info("replicated partition restored from a snapshot; raft replays the entries after it", "partition", p.String(), "end_offset", m.EndOffset)
	return nil
}

type replicaSnapshot struct {
	p   *Partition
	end int64
}

func (s *replicaSnapshot) Persist(sink raft.SnapshotSink) error {
	if s.end > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := s.p.log.Sync(ctx, s.end-1)
		cancel()
		if err != nil {
			_ = sink.Cancel()
			return fmt.Errorf("cannot sync %s for a snapshot: %w", s.p, err)
		}
	}
	// Header only: replicaSnapshots.Open adds the data when raft sends it.
	if err := json.NewEncoder(sink).Encode(replicaSnapMeta{EndOffset: s.end}); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cannot write the snapshot of %s: %w", s.p, err)
	}
	return sink.Close()
}

func (s *replicaSnapshot) Release() {}

// reportLeaders makes new raft leaders ready to serve (a barrier, so
// every entry committed before their term is applied) and tells the
// controller about partitions this broker leads (raft leader, term) when
// its metadata says otherwise, so Metadata answers name the current leader
// and epoch. It runs until ctx ends.
func (b *Broker) reportLeaders(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.cluster.LeaderChanges():
			// A group has a new leader (maybe this broker): make it ready
			// and report it now rather than at the next tick.
		}
		b.readyNewLeaders()
		b.eachLed(b.cluster.Metadata(), func(tp *topic, i int, p *Partition, a cluster.Assignment) {
			epoch := p.leaderEpoch()
			if a.Leader == b.cfg.NodeID && a.LeaderEpoch == epoch {
				return
			}
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := b.cluster.Apply(actx, cluster.Command{Op: cluster.OpSetPartitionLeader, Topic: tp.name, TopicID: tp.id,
				Partition: int32(i), Leader: b.cfg.NodeID, LeaderEpoch: epoch})
			cancel()
			if err != nil {
				b.log.Debug("cannot report partition leadership; retrying", "topic", tp.name, "partition", i, "err", err)
				return
			}
			b.log.Info("leading partition", "topic", tp.name, "partition", i, "epoch", epoch)
		})
	}
}

// eachLed calls fn with every replicated partition this broker leads
// that md knows (same topic id), and md's assignment of it.
func (b *Broker) eachLed(md *cluster.Metadata, fn func(tp *topic, i int, p *Partition, a cluster.Assignment)) {
	for _, tp := range b.allTopics() {
		ti := md.Topics[tp.name]
		if ti == nil || ti.ID != tp.id {
			continue
		}
		for i, p := range tp.parts {
			if p == nil || p.grp == nil || i >= len(ti.Partitions) || !p.isLeader() {
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
	if tp == nil || tp.id != topicID || part >= len(tp.parts) || tp.parts[part] == nil || tp.parts[part].grp == nil {
		return -1, -1, false, false
	}
	r := tp.parts[part].grp.Raft
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

// electionWait bounds how long a Metadata answer waits for elections.
const electionWait = time.Second

// awaitElections holds a Metadata answer (up to electionWait) while a
// replicated partition it names, with a replica on this broker, has no
// leader or a leader this broker saw die: an election is running and
// usually ends within milliseconds (watch.go starts it when the leader's
// process goes away). Answering at once would send clients
// LEADER_NOT_AVAILABLE or the dead leader, and a client that refreshes
// metadata at most every few seconds (franz-go: 5 s by default) would
// then wait that long for the next try.
func (b *Broker) awaitElections(ctx context.Context, topics []*cluster.TopicInfo) {
	deadline := time.Now().Add(electionWait)
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
				if lb, alive := md.Brokers[l]; !ok || !alive || !lb.Alive || gone(l) {
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
