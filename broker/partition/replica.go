package partition

// Replicated partitions (cluster mode, replication factor > 1). Each such
// partition is a hashicorp/raft group on the shared raft mux whose state
// machine is the partition itself:
//
//   - The leader's Produce handler validates the batches and hands the
//     raw bytes to raft.Apply; one raft entry = one partition's records of
//     one produce request. Raft entries that are not commands (config,
//     no-op, barrier) never reach Apply and take no Kafka offsets.
//   - The raft log keeps the batches in the partition log itself
//     (datastore.go): storing an entry, identical on every replica, runs
//     the idempotent producer check, assigns the next offsets, stamps the
//     batches with the entry's raft term as partition leader epoch and
//     appends them; the broker's raft WAL keeps a reference. Both are
//     fsynced (a follower before it answers, the leader while the
//     entry is on its way to the followers): each byte is written once
//     per replica.
//   - replicaFSM.Apply moves the high watermark to the entry's end and
//     answers the producer, on the leader once its fsync has ended. The
//     high watermark is the applied end; applied means committed on a
//     majority. Above it the log holds entries raft has not committed,
//     which a new leader may replace.
//   - Snapshots record the high watermark at the snapshot's raft index;
//     on restart raft restores the newest one (the log is kept: it holds
//     the entries after the snapshot too) and applies the entries after
//     it as their commit becomes known.
//   - A replica that lags by more than the trailing raft log, or a new
//     replica added by a reassignment, gets the partition's data in the
//     leader's snapshot: see snapshot.go.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/storage"
)

// replicaApplyTimeout bounds how long a Produce waits to enqueue its entry.
const replicaApplyTimeout = 10 * time.Second

// ReplicaConfig says how a partition's raft group starts.
type ReplicaConfig struct {
	// TopicID and the partition's index name the group on the raft mux.
	TopicID [16]byte
	// Dir holds the group's snapshots.
	Dir string
	// Peers are the replicas, by node id.
	Peers []int32
	// Bootstrap: see cluster.GroupConfig.
	Bootstrap bool
	// SnapshotEntries, TrailingLogs and HeartbeatTimeout: see
	// cluster.GroupConfig (0: its defaults).
	SnapshotEntries  uint64
	TrailingLogs     uint64
	HeartbeatTimeout time.Duration
	Logger           *slog.Logger
}

// StartReplica starts the partition's raft group on node's mux, with the
// partition as its state machine; the caller then publishes the
// partition.
func (p *Partition) StartReplica(node *cluster.Node, rc ReplicaConfig) error {
	f := &replicaFSM{p: p}
	snaps := &replicaSnapshots{p: p}
	var store *dataLogStore
	// The group once StartGroup returns: raft may store entries before.
	var started atomic.Pointer[cluster.Group]
	g, err := node.StartGroup(cluster.GroupConfig{
		Group:     cluster.PartitionGroupID(rc.TopicID, p.index),
		Dir:       rc.Dir,
		FSM:       f,
		Peers:     rc.Peers,
		Bootstrap: rc.Bootstrap,
		LogStore: func(inner raft.LogStore) raft.LogStore {
			store = &dataLogStore{inner: inner, p: p, leading: func() bool {
				g := started.Load()
				return g != nil && g.Raft().State() == raft.Leader
			}}
			f.store = store
			return store
		},
		Prepare: func(snap *raft.SnapshotMeta, ss raft.SnapshotStore) error {
			var idx uint64
			var end int64
			if snap != nil {
				m, err := readLocalSnapshot(ss, snap.ID)
				if err != nil {
					return fmt.Errorf("partition %s: %w", p, err)
				}
				idx, end = snap.Index, m.EndOffset
			}
			return store.reconcile(idx, end)
		},
		Snapshots: func(s raft.SnapshotStore) raft.SnapshotStore {
			snaps.SnapshotStore = s
			return snaps
		},
		SnapshotEntries:  rc.SnapshotEntries,
		TrailingLogs:     rc.TrailingLogs,
		HeartbeatTimeout: rc.HeartbeatTimeout,
		Logger:           rc.Logger,
	})
	if err != nil {
		return err
	}
	p.grp = g
	p.lastApply.Store(time.Now().UnixNano())
	started.Store(g)
	p.snapsLive = &snaps.live
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
	p.resetProducersLocked()
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

// Replicated reports whether the partition is a raft group.
func (p *Partition) Replicated() bool { return p.grp != nil }

// Raft is the partition's raft, nil if it is not replicated. The broker
// uses it for what concerns the group as a whole: its members
// (reassignments), leadership transfers, observers.
func (p *Partition) Raft() *raft.Raft {
	if p.grp == nil {
		return nil
	}
	return p.grp.Raft()
}

// InSync reports whether this replica is a raft voter that has applied
// all its leader last said was committed (cluster.Group.InSync); true for
// a partition that is not replicated. A raft leader is in sync once it is
// ready (IsLeader): a replica that has just won an election may not have
// applied what earlier leaders committed yet, and its high watermark is
// then behind.
func (p *Partition) InSync() bool {
	if p.grp == nil {
		return true
	}
	if p.grp.Dormant() {
		// It slept with every entry of its leader applied (SleepAll).
		return true
	}
	if p.grp.Raft().State() == raft.Leader {
		return p.IsLeader()
	}
	return p.grp.InSync()
}

// Term is the raft term of a replicated partition, else 0.
func (p *Partition) Term() uint64 {
	if p.grp == nil {
		return 0
	}
	return p.grp.Raft().CurrentTerm()
}

// IsLeader: the local replica may serve produce and fetch: it is the raft
// leader and has applied everything committed before its term (so its
// high watermark is not behind what a consumer may have seen from the
// previous leader). Always true for a partition that is not replicated.
func (p *Partition) IsLeader() bool {
	if p.grp == nil {
		return true
	}
	r := p.grp.Raft()
	return r.State() == raft.Leader && p.readyTerm.Load() == r.CurrentTerm()
}

// UnreplicatedEpoch is the leader epoch of a partition that is not
// replicated: a single node is always its leader, at epoch 0.
const UnreplicatedEpoch = 0

// LeaderEpoch is the raft term for a replicated partition, else
// UnreplicatedEpoch.
func (p *Partition) LeaderEpoch() int32 {
	if p.grp == nil {
		return UnreplicatedEpoch
	}
	return int32(min(p.grp.Raft().CurrentTerm(), math.MaxInt32))
}

// CheckLeaderEpoch compares a client's idea of the leader epoch with ours
// and returns the Kafka error code (0: it matches or the client sent
// none).
func (p *Partition) CheckLeaderEpoch(clientEpoch int32) int16 {
	ours := p.LeaderEpoch()
	switch {
	case clientEpoch < 0 || clientEpoch == ours:
		return 0
	case clientEpoch > ours:
		return kerr.UnknownLeaderEpoch.Code
	default:
		return kerr.FencedLeaderEpoch.Code
	}
}

// ReadyLeaders runs a raft barrier on each of parts this broker leads in
// a term it is not ready in yet, concurrently, marks those that went
// through ready for their term, and waits for them all. A barrier that
// does not go through is logged at debug level with notReady; the next
// pass tries again. It reports how many did not go through.
func ReadyLeaders(parts []*Partition, notReady string) int {
	var wg sync.WaitGroup
	var failed atomic.Int32
	for _, p := range parts {
		if p == nil || p.grp == nil {
			continue
		}
		r := p.grp.Raft()
		term := r.CurrentTerm()
		if r.State() != raft.Leader || p.readyTerm.Load() == term {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cluster.AwaitBarrier(r, barrierWait, nil); err != nil {
				failed.Add(1)
				p.cfg.Logger.Debug(notReady, "partition", p.String(), "err", err)
				return
			}
			if r.CurrentTerm() == term {
				p.readyTerm.Store(term)
			} else {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(failed.Load())
}

// barrierWait bounds how long ReadyLeaders waits for one barrier.
const barrierWait = 10 * time.Second

// Replicate validates one produce partition's records and applies them
// through raft; ApplyResult waits for the returned future.
func (p *Partition) Replicate(records []byte) (raft.ApplyFuture, error) {
	if err := p.validateProduce(records); err != nil {
		return nil, err
	}
	if !p.IsLeader() {
		return nil, fmt.Errorf("%w: this broker is not the raft leader of %s; refresh metadata", kerr.NotLeaderForPartition, p)
	}
	return p.RaftApply(records), nil
}

// RaftApply hands data, one or more record batches the caller checked, to
// the partition's raft group as is; the replica state machine checks the
// producer state and appends them on every replica. ApplyResult waits for
// the returned future. The partition must be replicated.
func (p *Partition) RaftApply(data []byte) raft.ApplyFuture {
	p.lastApply.Store(time.Now().UnixNano())
	return p.grp.Raft().Apply(data, replicaApplyTimeout)
}

// RegisterObserver registers o on the replica's raft, and on the new
// instance a dormant group starts when it wakes; the partition must be
// replicated.
func (p *Partition) RegisterObserver(o *raft.Observer) { p.grp.RegisterObserver(o) }

// DeregisterObserver undoes RegisterObserver.
func (p *Partition) DeregisterObserver(o *raft.Observer) { p.grp.DeregisterObserver(o) }

// Dormant reports whether the replica's raft group sleeps
// (cluster/dormant.go): no raft instance runs; the log and the high
// watermark are as the group left them.
func (p *Partition) Dormant() bool { return p.grp != nil && p.grp.Dormant() }

// DormantLeader is the leader (node id) and term of a dormant replica's
// group when it slept; ok false otherwise.
func (p *Partition) DormantLeader() (leader int32, term uint64, ok bool) {
	if p.grp == nil {
		return -1, 0, false
	}
	return p.grp.DormantLeader()
}

// IdleFor reports whether the replica has handed raft no entry for d.
func (p *Partition) IdleFor(d time.Duration, now time.Time) bool {
	return now.Sub(time.Unix(0, p.lastApply.Load())) >= d
}

// Sleep puts the replica's idle group to sleep on every replica, this
// one being its leader (cluster.Group.SleepAll): how many followers
// slept, or cluster.ErrNotIdle.
func (p *Partition) Sleep() (int, error) {
	if p.grp == nil {
		return 0, cluster.ErrNotIdle
	}
	return p.grp.SleepAll()
}

// Elect wakes a dormant replica and makes it stand for election at once
// (its group's leader when it slept comes back that way); the broker
// readies it as any new leader. False: raft did not take it.
func (p *Partition) Elect() bool {
	if p.grp == nil {
		return false
	}
	return p.grp.Elect()
}

// ApplyResult waits for an applied entry and maps raft's errors.
func ApplyResult(f raft.ApplyFuture) AppendResult {
	if err := f.Error(); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
			errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown):
			// ErrLeadershipLost: maybe committed, maybe not; an idempotent
			// retry is deduplicated by Apply.
			return AppendResult{Err: fmt.Errorf("%w: raft leadership changed while replicating: %v", kerr.NotLeaderForPartition, err)}
		default:
			return AppendResult{Err: fmt.Errorf("%w: cannot replicate: %v", kerr.RequestTimedOut, err)}
		}
	}
	res, ok := f.Response().(AppendResult)
	if !ok {
		return AppendResult{Err: fmt.Errorf("%w: unexpected raft apply response %T", kerr.UnknownServerError, f.Response())}
	}
	return res
}

// Propose replicates a record batch the broker writes itself (the group
// coordinator's records in a partition of __consumer_offsets, the
// transaction coordinator's in one of __transaction_state)
// through the partition's raft group, like a produced batch but without
// the client-facing checks. The returned function waits until the entry
// is committed on a majority and appended to the local log by the replica
// state machine (replicaFSM.Apply), and returns why not otherwise. It
// implements group.Propose: the call only enqueues. term is the raft term
// the caller loaded its state in: a proposal in a later term is refused,
// since another leader may have written in between.
func (p *Partition) Propose(term uint64, batch []byte) func() error {
	if !p.IsLeader() || p.grp.Raft().CurrentTerm() != term {
		return func() error {
			return fmt.Errorf("%w: this broker is no longer the raft leader of %s in term %d", kerr.NotCoordinator, p, term)
		}
	}
	f := p.RaftApply(batch)
	return func() error { return ApplyResult(f).Err }
}

// replicaFSM is a replicated partition's raft state machine.
type replicaFSM struct {
	p *Partition
	// store is the group's log store, whose leader fsyncs Apply waits
	// for (nil in tests that apply entries by hand).
	store *dataLogStore
}

// Apply answers one committed entry: its batches are in the log already
// (datastore.go); the high watermark moves past them.
func (f *replicaFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	p := f.p
	ref, _, err := parseRef(l.Extensions)
	if err != nil {
		// Only a bug gets here: every command entry passes StoreLogs.
		p.cfg.Logger.Error("raft entry without its store's decision", "partition", p.String(), "index", l.Index, "err", err)
		return AppendResult{Err: fmt.Errorf("%w: raft entry %d of %s: %v", kerr.UnknownServerError, l.Index, p, err)}
	}
	if ref.kind == refWritten {
		if f.store != nil {
			if err := f.store.durable(l.Index); err != nil {
				return AppendResult{Err: fmt.Errorf("%w: %v", kerr.KafkaStorageError, err)}
			}
		}
		// Never back: an entry applied again (after a dormant group
		// wakes, see cluster/dormant.go) is behind the high watermark.
		for hw := p.hw.Load(); hw < ref.last+1 && !p.hw.CompareAndSwap(hw, ref.last+1); hw = p.hw.Load() {
		}
		p.wakeWaiters()
	}
	return ref.result()
}

// Snapshot runs on raft's FSM goroutine, so the end offset matches the
// snapshot's raft index exactly.
func (f *replicaFSM) Snapshot() (raft.FSMSnapshot, error) {
	return &replicaSnapshot{p: f.p, end: f.p.hw.Load()}, nil
}

// Restore brings the replica to the snapshot. Sent by the leader (the
// replica lags, or was just added) it carries the data, which replaces the
// local log (snapshot.go). Restored from the local store while the group
// starts it is a header: the log already holds the data, and the entries
// after the snapshot too, so it only sets the high watermark. Raft then
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
	running := p.snapsLive != nil && p.snapsLive.Load()
	if m.Data && (running || have < m.EndOffset) {
		start := time.Now()
		if err := p.installSnapshotData(br, m); err != nil {
			return err
		}
		if err := p.resetReplicaLog(m.EndOffset); err != nil {
			return err
		}
		if p.cfg.SnapshotInstalled != nil {
			p.cfg.SnapshotInstalled()
		}
		p.cfg.Logger.Info("replicated partition installed from the leader's snapshot", "partition", p.String(),
			"start_offset", m.StartOffset, "end_offset", m.EndOffset, "bytes", m.DataBytes, "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
	if have < m.EndOffset {
		return fmt.Errorf("partition %s: the snapshot ends at offset %d but this replica's log ends at %d and the snapshot carries no records; "+
			"delete this replica's partition directory and restart the broker so that it gets the data from the leader", p, m.EndOffset, have)
	}
	p.hw.Store(m.EndOffset)
	p.cfg.Logger.Info("replicated partition restored from a snapshot; raft applies the entries after it", "partition", p.String(), "end_offset", m.EndOffset)
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
