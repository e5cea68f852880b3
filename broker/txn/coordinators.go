package txn

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/storage"
)

// StateTopic holds the transaction coordinators' state. It is created
// when the first transactional id initializes (single node) or when a
// transactional request first finds it missing (cluster).
const StateTopic = "__transaction_state"

// offsetsTopic is the group coordinators' internal topic: a transaction
// may not write to it, and in a cluster StateTopic is created after it.
const offsetsTopic = "__consumer_offsets"

// APIs are the transaction APIs, each declared in its NN_ file; the
// broker binds them to its Coordinators.
var APIs kapi.Table[*Coordinators]

// Broker is what the coordinators use of the broker they run in.
type Broker interface {
	// StatePartition is this broker's replica of partition i of
	// StateTopic, nil if it has none.
	StatePartition(i int32) StatePartition
	// StatePartitions are this broker's replicas of the partitions of
	// StateTopic by index (nil where it has none), after the raft
	// barrier of those it has just become the leader of: the log of a
	// ready leader holds every committed state record.
	StatePartitions() []StatePartition
	// CreateTopic creates an internal topic with a replication factor
	// of the broker's choosing: on a single node at once, in a cluster
	// through the controller (a topic that exists already is no error).
	CreateTopic(ctx context.Context, name string, partitions int32, configs map[string]string) error
	// Partition is the data partition this broker serves (it has it
	// and leads it), nil otherwise.
	Partition(topic string, i int32) Partition
	// PartitionKnown reports whether a topic partition exists anywhere
	// in the cluster, so a transaction may include it.
	PartitionKnown(topic string, i int32) bool
	// ClusterPartitions is the partition count of topic in the cluster
	// metadata, 0 before the controller created it.
	ClusterPartitions(topic string) int
	// LeaderOf names the broker leading a partition (cluster mode): its
	// node id and Kafka address.
	LeaderOf(topic string, i int32) (id int32, addr string, ok bool)
	// GroupCoordinator returns the coordinator of group on this broker,
	// or the error code to answer with.
	GroupCoordinator(group string) (*group.Coordinator, int16)
	// GroupCoordinatorAddr is the Kafka address of the other broker that
	// coordinates group (cluster mode), or why there is none ready.
	GroupCoordinatorAddr(group string) (string, error)
	// GroupCoordinatorSince is when this broker began coordinating
	// group's offsets partition (cluster mode); false if it does not.
	GroupCoordinatorSince(group string) (time.Time, bool)
	// NewProducerID allocates a producer id this broker never handed
	// out before, even across crashes.
	NewProducerID() (int64, error)
}

// StatePartition is a replica of a partition of StateTopic.
type StatePartition interface {
	// Log holds the state records.
	Log() *storage.Log
	// Replicated reports whether the partition is a raft group.
	Replicated() bool
	// IsLeader reports whether this broker is the partition's ready
	// leader (always true unreplicated), Term its raft term.
	IsLeader() bool
	Term() uint64
	// Propose replicates a batch written by the broker itself, refused
	// once term is over; the returned function waits until it is
	// committed and applied.
	Propose(term uint64, batch []byte) func() error
	// Commit waits until the log is durable up to offset last.
	Commit(ctx context.Context, last int64) error
}

// Partition is a data partition this broker leads, where the coordinator
// writes transaction markers.
type Partition interface {
	fmt.Stringer
	// AppendMarker appends a marker to an unreplicated partition and
	// returns its offset; Commit (or CommitLater) makes it durable.
	AppendMarker(pid int64, epoch int16, ct storage.ControlType) (int64, error)
	CommitLater()
	Commit(ctx context.Context, last int64) error
	// WriteMarker writes a marker and waits until it is durable: through
	// raft on a replicated partition, carrying the coordinator's epoch.
	WriteMarker(ctx context.Context, pid int64, epoch int16, ct storage.ControlType, coordEpoch int32) error
}

// Config is how a broker runs its transaction coordinators.
type Config struct {
	// NodeID is the broker's node id: the low 16 bits of the producer
	// ids it allocates in a cluster, and its name to the other brokers.
	NodeID int32
	// Clustered is true for a broker of a cluster: a coordinator for
	// each partition of StateTopic it leads (Sync). Otherwise a single
	// coordinator for every transactional id (Open, Run).
	Clustered bool
	Logger    *slog.Logger
	// Registerer takes the coordinators' metrics.
	Registerer prometheus.Registerer
	Broker     Broker
	// PeerTLS, when set, gives the TLS configuration of the clients to
	// the other brokers (nil from it: plaintext).
	PeerTLS func() *tls.Config
	// TxnIDExpiration is transactional.id.expiration.ms: an id with no
	// open transaction and no change for this long is forgotten (its
	// state record tombstoned). 0: 7 days; negative: never.
	TxnIDExpiration time.Duration
}

// idExpiration is Config.TxnIDExpiration with its default; 0: never.
func (s *Coordinators) idExpiration() time.Duration {
	switch {
	case s.cfg.TxnIDExpiration == 0:
		return txnIDExpiration
	case s.cfg.TxnIDExpiration < 0:
		return 0
	}
	return s.cfg.TxnIDExpiration
}

// Coordinators are the transaction coordinators of one broker and what
// they share: the clients to the other brokers and, in a cluster, the
// offsets this broker passed on as a group coordinator.
type Coordinators struct {
	cfg Config
	b   Broker
	log *slog.Logger

	// single is the coordinator of a single node (nil in a cluster and
	// until Open).
	single *coordinator
	// cluster is the cluster-mode state (cluster.go).
	cluster clusterState
}

// New returns the coordinators of a broker; nothing runs until Open (a
// single node) or Sync (a cluster).
func New(cfg Config) *Coordinators {
	s := &Coordinators{cfg: cfg, b: cfg.Broker, log: cfg.Logger}
	s.cluster.wake = make(chan struct{}, 1)
	return s
}

// Open loads the single-node coordinator's state, if any, and finishes
// the transactions that were being completed when the broker stopped.
// The group coordinator must be running: a committed transaction's
// offsets go to it.
func (s *Coordinators) Open() error {
	c := &coordinator{s: s, log: s.log.With("part", "txn"), now: time.Now, pending: map[pendingKey]map[string]struct{}{}}
	c.mu.txns = map[string]*txnEntry{}
	c.metrics = newMetrics(s.cfg.Registerer, c.count)
	if p := s.b.StatePartition(0); p != nil {
		c.state = p
		if err := c.load(); err != nil {
			return err
		}
	}
	s.single = c
	return nil
}

// Run aborts the single-node coordinator's timed-out transactions and
// retries unfinished completions until ctx ends.
func (s *Coordinators) Run(ctx context.Context) {
	if s.single != nil {
		s.single.run(ctx)
	}
}

// all returns every transaction coordinator of this broker.
func (s *Coordinators) all() []*coordinator {
	if !s.cfg.Clustered {
		if s.single == nil {
			return nil
		}
		return []*coordinator{s.single}
	}
	s.cluster.mu.RLock()
	defer s.cluster.mu.RUnlock()
	out := make([]*coordinator, 0, len(s.cluster.slots))
	for _, sl := range s.cluster.slots {
		out = append(out, sl.c)
	}
	return out
}

// coordinatorFor returns the coordinator of a transactional id on this
// broker, or the error code to answer with.
func (s *Coordinators) coordinatorFor(id string) (*coordinator, int16) {
	if !s.cfg.Clustered {
		if s.single == nil {
			return nil, kerr.CoordinatorNotAvailable.Code
		}
		return s.single, 0
	}
	n := s.statePartitions()
	if n == 0 {
		s.cluster.want()
		return nil, kerr.CoordinatorNotAvailable.Code
	}
	i := partitionOf(id, n)
	p := s.b.StatePartition(i)
	s.cluster.mu.RLock()
	sl := s.cluster.slots[i]
	s.cluster.mu.RUnlock()
	if sl != nil && p != nil && sl.valid(p) {
		return sl.c, 0
	}
	if p != nil && p.IsLeader() {
		return nil, kerr.CoordinatorLoadInProgress.Code
	}
	return nil, kerr.NotCoordinator.Code
}

// withCoordinator returns what f returns on the coordinator of a
// transactional id, or the error code of why this broker has none.
func (s *Coordinators) withCoordinator(id string, f func(*coordinator) int16) int16 {
	c, code := s.coordinatorFor(id)
	if code != 0 {
		return code
	}
	return f(c)
}

// Locate names the coordinator of a transactional id in a cluster
// (FindCoordinator): its partition of StateTopic and whether this broker
// coordinates it. ok is false while StateTopic does not exist; the
// coordinators then have the controller create it.
func (s *Coordinators) Locate(id string) (partition int32, local, ok bool) {
	n := s.statePartitions()
	if n == 0 {
		s.cluster.want()
		return 0, false, false
	}
	c, _ := s.coordinatorFor(id)
	return partitionOf(id, n), c != nil, true
}

// PendingOffset reports whether a transaction holds an uncommitted offset
// for the group partition: one recorded by a coordinator here, one this
// broker as the group's coordinator passed to another broker's, or, while
// this broker has coordinated the group for less than the longest
// transaction timeout, one a previous coordinator of the group passed on
// (asked of the other brokers' transaction coordinators: the marks of
// passed-on offsets are in the memory of the broker that passed them).
// The group coordinator asks it for RequireStable OffsetFetches.
func (s *Coordinators) PendingOffset(grp, topic string, part int32) bool {
	for _, c := range s.all() {
		if c.pendingOffset(grp, topic, part) {
			return true
		}
	}
	if !s.cfg.Clustered {
		return false
	}
	s.cluster.fwdMu.Lock()
	marked := len(s.cluster.forwarded[pendingKey{grp, topic, part}]) > 0
	s.cluster.fwdMu.Unlock()
	if marked || !s.recentGroupCoordinator(grp) {
		return marked
	}
	ans := s.remotePending(grp)
	return ans.all || ans.keys[pendingKey{grp, topic, part}]
}

// newProducerID allocates a producer id unique in the cluster (see
// 22_init_producer_id.go).
func (s *Coordinators) newProducerID() (int64, error) {
	id, err := s.b.NewProducerID()
	if err != nil {
		return 0, err
	}
	if s.cfg.Clustered {
		id = id<<16 | int64(s.cfg.NodeID)
	}
	return id, nil
}
