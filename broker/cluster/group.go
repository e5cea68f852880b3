package cluster

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/simtel/simtel/broker/wal"
	"github.com/simtel/simtel/internal/fsutil"
)

// PartitionGroupID is the raft group id of a partition on the shared mux:
// a hash of the topic id and partition number, never 0 (the controller).
func PartitionGroupID(topicID [16]byte, partition int32) uint64 {
	h := fnv.New64a()
	h.Write(topicID[:])
	h.Write([]byte{byte(partition >> 24), byte(partition >> 16), byte(partition >> 8), byte(partition)})
	id := h.Sum64()
	if id == ControllerGroup {
		id = 1
	}
	return id
}

// GroupConfig starts one data raft group (a replicated partition).
type GroupConfig struct {
	// Group is the id on the mux (PartitionGroupID).
	Group uint64
	// Dir holds the group's snapshots. Its raft log and stable store are
	// in the broker's WAL (DATA/raft-wal, package wal), except for a
	// group created by an older version, whose raft.db here is kept.
	Dir string
	FSM raft.FSM
	// Peers are the replicas, by node id; their raft addresses come from
	// the controller metadata.
	Peers []int32
	// Bootstrap: this replica writes the initial configuration (all
	// Peers as voters) if the group has no state yet. Every initial
	// replica bootstraps with the same Peers (safe: identical
	// configurations), so the group elects even if one of them never
	// starts; replicas added later do not bootstrap.
	Bootstrap bool
	// Prepare runs after the stores are opened and before raft starts;
	// snap is the snapshot raft will restore into the FSM (nil if none:
	// raft then replays the raft log from its first entry), snaps the
	// group's snapshot store (as Snapshots wrapped it).
	Prepare func(snap *raft.SnapshotMeta, snaps raft.SnapshotStore) error
	// LogStore, if set, wraps the group's raft log store (the WAL or a
	// legacy bbolt file) before raft and its log cache use it; the
	// stable store stays as is.
	LogStore func(raft.LogStore) raft.LogStore
	// TrailingLogs is how many applied entries the raft log keeps behind
	// a snapshot, so a lagging replica catches up from the log instead of
	// needing a snapshot. Default 10240 (each entry is a produce batch, so
	// this is also a second copy on disk of the newest batches).
	TrailingLogs uint64
	// Snapshots, if set, wraps the group's file snapshot store (the
	// broker's partition snapshots add the data when one is sent).
	Snapshots func(raft.SnapshotStore) raft.SnapshotStore
	// SnapshotEntries is how many entries are applied between snapshots
	// (checked every 10 s). Default 8192.
	SnapshotEntries uint64
	// HeartbeatTimeout is raft's heartbeat and election timeout for the
	// group and its leader lease (see fullLease; the leader sends a
	// heartbeat every tenth of it). Longer: less idle CPU, slower
	// failover. Default 1s.
	HeartbeatTimeout time.Duration
	Logger           *slog.Logger
}

// Group is a running data raft group. Its raft instance is replaced when
// the group wakes from Sleep; Raft returns the current one, and the last
// one stays set after Close (its methods then report a shut-down node),
// so readers need no lock.
type Group struct {
	raft  atomic.Pointer[raft.Raft]
	id    uint64
	store groupStore
	// closeStore closes the bbolt store or releases the shared WAL.
	closeStore func() error
	wal        *wal.WAL // nil for a bbolt store
	trans      *groupTransport
	node       *Node
	// applied is the last command entry the state machine applied.
	applied atomic.Uint64
	dir     string

	closeOnce sync.Once
	closeErr  error

	// What a new raft instance is made of when the group wakes (dormant.go).
	rc       *raft.Config
	fsm      raft.FSM
	logStore raft.LogStore
	snaps    raft.SnapshotStore
	life     groupLife
}

// Raft is the group's current raft instance.
func (g *Group) Raft() *raft.Raft { return g.raft.Load() }

// StartGroup opens (or creates) a data raft group's stores in cfg.Dir and
// starts its raft instance on this node's mux.
func (n *Node) StartGroup(cfg GroupConfig) (*Group, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create raft directory %s: %w", cfg.Dir, err)
	}
	g := &Group{dir: cfg.Dir, id: cfg.Group, node: n}
	if legacy := filepath.Join(cfg.Dir, "raft.db"); fileExists(legacy) {
		bs, err := openBoltStore(legacy)
		if err != nil {
			return nil, err
		}
		g.store, g.closeStore = bs, bs.Close
	} else {
		w, err := n.openGroupWAL(cfg)
		if err != nil {
			return nil, err
		}
		g.store, g.closeStore, g.wal = w.Store(cfg.Group), n.wal.release, w
	}
	var err error
	ok := false
	defer func() {
		if !ok {
			_ = g.Close()
		}
	}()
	hl := hclogFor(cfg.Logger, "raft", n.logRepeats)
	hl.SetLevel(hclog.Warn)
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hl)
	if err != nil {
		return nil, fmt.Errorf("cannot open raft snapshots in %s: %w", cfg.Dir, err)
	}
	var snaps raft.SnapshotStore = newListCache(fileSnaps)
	if cfg.Snapshots != nil {
		snaps = cfg.Snapshots(snaps)
	}
	list, err := snaps.List()
	if err != nil {
		return nil, fmt.Errorf("cannot list raft snapshots in %s: %w", cfg.Dir, err)
	}
	var logStore raft.LogStore = g.store
	if cfg.LogStore != nil {
		logStore = cfg.LogStore(g.store)
	}
	hasState, err := raft.HasExistingState(logStore, g.store, snaps)
	if err != nil {
		return nil, fmt.Errorf("cannot read raft state in %s: %w", cfg.Dir, err)
	}
	if cfg.Prepare != nil {
		var snap *raft.SnapshotMeta
		if len(list) > 0 {
			snap = list[0]
		}
		if err := cfg.Prepare(snap, snaps); err != nil {
			return nil, err
		}
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(strconv.Itoa(int(n.cfg.NodeID)))
	rc.Logger = hl
	rc.TrailingLogs = cfg.TrailingLogs
	if rc.TrailingLogs == 0 {
		rc.TrailingLogs = 10240
	}
	rc.SnapshotThreshold = cfg.SnapshotEntries
	if rc.SnapshotThreshold == 0 {
		rc.SnapshotThreshold = 8192
	}
	rc.SnapshotInterval = 10 * time.Second
	if d := cfg.HeartbeatTimeout; d > 0 {
		rc.HeartbeatTimeout, rc.ElectionTimeout = d, d
	}
	fullLease(rc)
	// An idle leader sends each follower an AppendEntries every
	// CommitTimeout to 2×CommitTimeout (50-100 ms by default) to move its
	// commit index; with hundreds of groups that was most of the idle CPU
	// once heartbeats were coalesced (transport.go). Its only use is
	// telling followers that the last entries are committed: they learn
	// it with the next entry anyway, a new leader runs a barrier before
	// serving, and followers serve no reads. So an idle follower applies
	// the last entries up to 2-4 heartbeat timeouts late.
	rc.CommitTimeout = 2 * rc.HeartbeatTimeout
	g.trans = n.newTransport(cfg.Group, 2, hl, func(t *groupTransport) {
		t.hbEvery = rc.HeartbeatTimeout / 4
		if n.hub != nil {
			t.quiet.hb = rc.HeartbeatTimeout
		}
		wake, sleep := g.wakeForRPC, g.sleepAsFollower
		t.wakeFn.Store(&wake)
		t.sleepFn.Store(&sleep)
		t.owner.Store(g)
	})
	if n.hub != nil {
		// Quiet when idle (quiet.go); the links' empty frames tell
		// both ends the other broker is there.
		n.hub.setPing(rc.HeartbeatTimeout / 4)
		for {
			old := n.quietHB.Load()
			if old != 0 && old <= int64(rc.HeartbeatTimeout) || n.quietHB.CompareAndSwap(old, int64(rc.HeartbeatTimeout)) {
				break
			}
		}
	}
	bootstrapped := false
	if !hasState && cfg.Bootstrap {
		bootstrapped = true
		var servers []raft.Server
		md := n.Metadata()
		for _, id := range cfg.Peers {
			b, found := md.Brokers[id]
			if !found {
				return nil, fmt.Errorf("cannot bootstrap raft group %d: broker %d is not registered", cfg.Group, id)
			}
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(strconv.Itoa(int(id))), Address: raft.ServerAddress(b.RaftAddr)})
		}
		if err := raft.BootstrapCluster(rc, logStore, g.store, snaps, g.trans, raft.Configuration{Servers: servers}); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return nil, fmt.Errorf("cannot bootstrap raft group %d: %w", cfg.Group, err)
		}
	}
	// A new group's replicas open it at different times, seconds apart
	// on a broker opening thousands: with the normal timeouts the first
	// ones to open stood for election again and again, each try held by
	// the peers' muxes until they had the group (new streams, each with
	// its buffers, every timeout), and a replica other than the preferred
	// one often won. So every replica of a new group starts with long
	// timeouts: the preferred replica stands once at once (below) and
	// waits that long for the votes of peers that open the group later,
	// the others wait that long for it; the first leader any of them
	// sees brings the normal timeouts back (holdFirstElection). If the
	// preferred replica never stands, the others elect after the long
	// timeout. Timeouts only decide when raft stands, never what it
	// accepts, so safety is raft's.
	normal := rc.HeartbeatTimeout
	// A group that wakes (dormant.go) starts with the normal timeouts.
	wakeRC := *rc
	held := bootstrapped && len(cfg.Peers) > 1
	if held {
		rc.HeartbeatTimeout, rc.ElectionTimeout = heldElectionTimeouts*normal, heldElectionTimeouts*normal
	}
	// Several produce requests' entries go to raft in one log write.
	rc.BatchApplyCh = true
	// Replication and the followers' FSM read recent entries from memory.
	wakeRC.BatchApplyCh = rc.BatchApplyCh
	// The state machine of a group that wakes is where the new instance
	// would restore it to (Sleep took a snapshot of it last): restoring
	// it would only cost a read of the snapshot (for a partition, a copy
	// of its log).
	wakeRC.NoSnapshotRestoreOnStart = true
	g.rc, g.fsm, g.logStore, g.snaps = &wakeRC, trackedFSM{cfg.FSM, &g.applied, snaps}, logStore, snaps
	r, err := g.newRaft(rc)
	if err != nil {
		return nil, err
	}
	if held {
		holdFirstElection(r, normal)
	}
	if bootstrapped && len(cfg.Peers) > 1 && cfg.Peers[0] == n.cfg.NodeID {
		// The first replica is the preferred leader: it starts the first
		// election at once rather than after a randomized timeout that
		// another replica may reach first, so a new group starts with
		// the leader placement chose and is not handed back to it a
		// little later (a leadership change clients notice).
		g.trans.timeoutNow()
	}
	ok = true
	return g, nil
}

// Close stops the group's raft and closes its stores; the files stay.
// Safe to call more than once.
func (g *Group) Close() error {
	g.closeOnce.Do(func() {
		g.closeErr = errors.Join(g.closeErr, g.stopRaft())
		if g.trans != nil {
			g.node.unregister(g.id, g.trans)
			g.closeErr = errors.Join(g.closeErr, g.trans.Close())
		}
		if g.closeStore != nil {
			g.closeErr = errors.Join(g.closeErr, g.closeStore())
		}
	})
	return g.closeErr
}

// stopRaft marks the group closed and shuts its raft down (detached from
// the transport first). Close and Remove both stop it this way; Remove
// must do so before it drops the group from the shared WAL.
func (g *Group) stopRaft() error {
	g.life.Lock()
	g.life.closed = true
	g.life.Unlock()
	r := g.Raft()
	if r == nil {
		return nil
	}
	if g.trans != nil {
		g.trans.detach()
	}
	return r.Shutdown().Error()
}

// Remove closes the group and deletes its files.
func (g *Group) Remove() error {
	var err error
	if g.wal != nil {
		// Before Close releases it (the broker's other groups keep it
		// open anyway).
		_ = g.stopRaft()
		err = g.wal.DropGroup(g.id)
	}
	return errors.Join(err, g.Close(), fsutil.RemoveAll(g.dir))
}

// heldElectionTimeouts: a new group's replicas start with this many
// normal heartbeat timeouts as their heartbeat and election timeouts, see
// StartGroup.
const heldElectionTimeouts = 10

// holdFirstElection gives r back the normal heartbeat and election
// timeouts once it sees a leader (itself or another replica).
func holdFirstElection(r *raft.Raft, normal time.Duration) {
	var once sync.Once
	release := func() {
		once.Do(func() {
			rc := r.ReloadableConfig()
			if rc.HeartbeatTimeout != heldElectionTimeouts*normal {
				// Already changed (a quiet follower, quiet.go).
				return
			}
			rc.HeartbeatTimeout, rc.ElectionTimeout = normal, normal
			_ = r.ReloadConfig(rc)
		})
	}
	r.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" {
			release()
		}
		return false
	}))
	// A leader seen before the observer was registered.
	if _, id := r.LeaderWithID(); id != "" {
		release()
	}
}

// fullLease makes a raft leader step down only once it has heard from no
// quorum for a whole heartbeat timeout, not half of one (raft's default).
// A leader steps down when its heartbeats go unanswered for the lease,
// while its followers start an election only after a heartbeat timeout
// without hearing from it: on a CPU-starved machine heartbeat round trips
// between half and one timeout are common, and with the shorter lease a
// leader that every follower still followed stepped down, the group had
// no leader until one of them timed out, and the leadership often moved
// (for __consumer_offsets, the group coordinator with it). The lease
// guards no read here (followers serve none, and a new leader runs a
// barrier before serving), so the longer one only lets a leader cut off
// from its followers accept entries that cannot commit for half a
// timeout more. Raft does not allow a lease longer than the timeout.
func fullLease(rc *raft.Config) {
	rc.LeaderLeaseTimeout = rc.HeartbeatTimeout
}

// groupStore is a group's raft log and stable store.
type groupStore interface {
	raft.LogStore
	raft.StableStore
}

// groupLogCache and groupLogCacheBytes bound the recent entries of a
// group kept in memory (logCache): a few round trips' worth of small
// entries, a few large ones.
const (
	groupLogCache      = 64
	groupLogCacheBytes = 4 << 20
)

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// AwaitBarrier runs a barrier on r and waits for it until wait has passed
// or stop is closed (nil: never). A barrier still queued when its raft
// shuts down is never answered (unlike Apply's futures, raft's barrier
// future does not watch for the shutdown), so waiting without a bound
// kept a broker whose groups closed meanwhile from finishing its
// shutdown; the goroutine left waiting stays until the process exits.
func AwaitBarrier(r *raft.Raft, wait time.Duration, stop <-chan struct{}) error {
	f := r.Barrier(wait)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("the raft barrier is not done after %v", wait)
	case <-stop:
		return raft.ErrRaftShutdown
	}
}
