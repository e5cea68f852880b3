package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/simtel/simtel/broker/auth"
)

// Metadata is the cluster metadata the controller replicates. A *Metadata
// handed out by Node.Metadata is immutable: the FSM builds a new one for
// every change (copy on write), so readers need no lock.
type Metadata struct {
	ClusterID string                `json:"cluster_id,omitempty"`
	Brokers   map[int32]BrokerInfo  `json:"brokers"`
	Topics    map[string]*TopicInfo `json:"topics"`
	// Security is the SCRAM credentials and ACLs (security.go); absent
	// from snapshots written before it existed, which restore empty.
	Security *Security `json:"security,omitempty"`
	// Index is the raft index of the last command applied.
	Index uint64 `json:"index"`

	// own is, while a batch of commands is applied (FSM.ApplyBatch), the
	// topics this private copy made for itself: their partition lists
	// are not shared with a published state, so a command may change
	// them in place.
	own map[*TopicInfo]bool
}

// BrokerInfo is one registered broker.
type BrokerInfo struct {
	ID        int32  `json:"id"`
	KafkaAddr string `json:"kafka_addr"`
	RaftAddr  string `json:"raft_addr"`
	// GossipAddr is the broker's gossip address (host:port) as its peers'
	// memberlist sees it: where the others look for it after it dropped
	// out of the gossip (see rejoin.go). Empty in metadata written before
	// it existed, until the broker is registered again.
	GossipAddr string `json:"gossip_addr,omitempty"`
	Alive      bool   `json:"alive"`
	// Listeners are the broker's advertised Kafka listeners, name to
	// host:port; a client learns the addresses of the listener it is
	// connected to. Empty in metadata of brokers older than named
	// listeners: they have KafkaAddr only.
	Listeners map[string]string `json:"listeners,omitempty"`
}

// TopicInfo is one topic: its id, config overrides and the assignment of
// each partition (index = partition number).
type TopicInfo struct {
	Name       string            `json:"name"`
	ID         [16]byte          `json:"id"`
	Configs    map[string]string `json:"configs,omitempty"`
	Partitions []Assignment      `json:"partitions"`
}

// Assignment places one partition: its replicas (the first is the
// preferred leader), its leader and the leader's epoch, and a reassignment
// in progress.
type Assignment struct {
	Replicas    []int32 `json:"replicas"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	// Target is the replica set a reassignment moves the partition to;
	// nil when none is in progress. The partition's raft leader carries it
	// out through raft membership changes (see the broker's reassign.go)
	// and then applies OpFinishReassignment.
	Target []int32 `json:"target,omitempty"`
	// Progress is the applied end offset each new replica (in Target, not
	// in Replicas) last reported while catching up.
	Progress map[int32]int64 `json:"progress,omitempty"`
	// Moved is set once the replica set has changed after creation: the
	// group exists, so no replica may bootstrap it again.
	Moved bool `json:"moved,omitempty"`
}

// Members is every broker with a replica: Replicas, then those of Target
// not in it.
func (a Assignment) Members() []int32 {
	out := slices.Clone(a.Replicas)
	for _, r := range a.Target {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// AliveBrokers returns the alive brokers sorted by id.
func (m *Metadata) AliveBrokers() []BrokerInfo {
	var out []BrokerInfo
	for _, b := range m.Brokers {
		if b.Alive {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Fewest is the broker of brokers with the lowest count that is not in
// exclude (the first of brokers on ties: the lowest id, as AliveBrokers
// sorts them), or -1 if every one is excluded. Placement puts new replicas
// and leaders there.
func Fewest(brokers []BrokerInfo, count map[int32]int, exclude []int32) int32 {
	best := int32(-1)
	for _, b := range brokers {
		if slices.Contains(exclude, b.ID) {
			continue
		}
		if best < 0 || count[b.ID] < count[best] {
			best = b.ID
		}
	}
	return best
}

func (m *Metadata) clone() *Metadata {
	n := &Metadata{ClusterID: m.ClusterID, Index: m.Index, Brokers: maps.Clone(m.Brokers), Topics: maps.Clone(m.Topics), Security: m.Security}
	if n.Brokers == nil {
		n.Brokers = map[int32]BrokerInfo{}
	}
	if n.Topics == nil {
		n.Topics = map[string]*TopicInfo{}
	}
	if n.Security == nil {
		n.Security = &Security{}
	}
	return n
}

// MaxPartitions bounds a topic's partition count (the broker refuses more
// before applying; the FSM checks again so no entry can make it allocate
// without bound).
const MaxPartitions = 100000

// Op names a controller command.
type Op string

const (
	OpSetClusterID     Op = "set_cluster_id"
	OpRegisterBroker   Op = "register_broker"
	OpSetBrokerAlive   Op = "set_broker_alive"
	OpCreateTopic      Op = "create_topic"
	OpDeleteTopic      Op = "delete_topic"
	OpCreatePartitions Op = "create_partitions"
	OpSetTopicConfigs  Op = "set_topic_configs"
	// OpSetPartitionLeader records the raft leader of a partition's group
	// (reported by that leader); ignored when older than what is known.
	OpSetPartitionLeader Op = "set_partition_leader"
	// OpReassign sets a partition's Target (Replicas: the new set, in
	// preferred-leader order); refused while another is in progress
	// unless Override is set.
	OpReassign Op = "reassign"
	// OpReplicaProgress records a new replica's applied end offset
	// (Leader: the replica's broker, LeaderEpoch unused, Offset).
	OpReplicaProgress Op = "replica_progress"
	// OpFinishReassignment makes Target the replica set (sent by the
	// partition's raft leader once the raft voters are exactly Target).
	OpFinishReassignment Op = "finish_reassignment"

	// opReadIndex is not a raft command: a forwarded request for the
	// leader's applied index (see Node.CatchUp).
	opReadIndex Op = "read_index"
)

// Command is one change to the metadata, applied through raft. Which
// fields matter depends on Op.
type Command struct {
	Op         Op                `json:"op"`
	ClusterID  string            `json:"cluster_id,omitempty"`
	Broker     *BrokerInfo       `json:"broker,omitempty"`
	BrokerID   int32             `json:"broker_id,omitempty"`
	Alive      bool              `json:"alive,omitempty"`
	Topic      string            `json:"topic,omitempty"`
	TopicID    [16]byte          `json:"topic_id,omitzero"`
	Partitions int32             `json:"partitions,omitempty"`
	Configs    map[string]string `json:"configs,omitempty"`
	// ReplicationFactor of a new topic: 0 or -1 takes the default (3, or
	// the number of alive brokers when fewer).
	ReplicationFactor int16 `json:"replication_factor,omitempty"`
	// Partition, Leader and LeaderEpoch are set_partition_leader's.
	Partition   int32 `json:"partition,omitempty"`
	Leader      int32 `json:"leader,omitempty"`
	LeaderEpoch int32 `json:"leader_epoch,omitempty"`
	// Replicas is reassign's and finish_reassignment's replica set.
	Replicas []int32 `json:"replicas,omitempty"`
	// Offset is replica_progress's applied end offset.
	Offset int64 `json:"offset,omitempty"`
	// Override lets reassign replace the target of a reassignment in
	// progress (the controller does when a target broker is gone).
	Override bool `json:"override,omitempty"`

	// User, Credential and Mechanism are the SCRAM commands' (security.go).
	User       string                `json:"user,omitempty"`
	Credential *auth.ScramCredential `json:"credential,omitempty"`
	Mechanism  auth.ScramMechanism   `json:"mechanism,omitempty"`
	// ACLs are create_acls', Filters delete_acls'.
	ACLs    []auth.ACL  `json:"acls,omitempty"`
	Filters []ACLFilter `json:"filters,omitempty"`
}

// Errors a command can fail with; Apply returns them wrapped, classify
// with errors.Is.
var (
	ErrTopicExists       = errors.New("topic already exists")
	ErrUnknownTopic      = errors.New("topic does not exist")
	ErrInvalidPartitions = errors.New("invalid partition count")
	ErrNoAliveBrokers    = errors.New("no alive broker to place partitions on")
	ErrBadCommand        = errors.New("malformed controller command")
	ErrReplicationFactor = errors.New("invalid replication factor")
	// ErrReassignment: a reassignment is already in progress, names a
	// broker that is not registered, or finishes one that is not current.
	ErrReassignment = errors.New("invalid reassignment")
)

var resultErrors = map[string]error{
	"topic_exists": ErrTopicExists, "unknown_topic": ErrUnknownTopic,
	"invalid_partitions": ErrInvalidPartitions, "no_alive_brokers": ErrNoAliveBrokers,
	"bad_command": ErrBadCommand, "replication_factor": ErrReplicationFactor,
	"reassignment": ErrReassignment,
}

// Result is what applying a command returned. It crosses the forwarding
// RPC, so the error travels as a code plus message.
type Result struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Index   uint64 `json:"index"`
	// DeletedACLs are the ACLs a delete_acls command deleted, one list
	// per filter.
	DeletedACLs [][]auth.ACL `json:"deleted_acls,omitempty"`
}

// Err turns a Result back into an error wrapping the sentinel.
func (r Result) Err() error {
	if r.Code == "" {
		return nil
	}
	if s, ok := resultErrors[r.Code]; ok {
		return fmt.Errorf("%w: %s", s, r.Message)
	}
	return errors.New(r.Message)
}

func failure(sentinel error, format string, args ...any) Result {
	for code, s := range resultErrors {
		if s == sentinel {
			return Result{Code: code, Message: fmt.Sprintf(format, args...)}
		}
	}
	return Result{Code: "other", Message: fmt.Sprintf(format, args...)}
}

// FSM is the controller's raft state machine. It does no I/O: Apply builds
// the next Metadata from the current one and publishes it.
type FSM struct {
	state atomic.Pointer[Metadata]
	// subs are the channels of Changes.
	subs tokens
	// applyMu serializes Apply/Restore against Snapshot's read; raft
	// already calls Apply from one goroutine.
	applyMu sync.Mutex
}

// NewFSM returns an empty state machine.
func NewFSM() *FSM {
	f := &FSM{}
	f.state.Store((&Metadata{}).clone())
	return f
}

// Metadata is the current state (immutable).
func (f *FSM) Metadata() *Metadata { return f.state.Load() }

// Changes returns a new channel that receives a token after each later
// change of the state (tokens coalesce: one may stand for several
// changes). Every reader takes its own: with one channel shared, a token
// one reader took was a change the others never heard of (the broker
// then opened a new topic's partitions only on its next periodic pass,
// seconds later, and its clients were told it led partitions it did not
// have yet).
func (f *FSM) Changes() <-chan struct{} { return f.subs.subscribe() }

func (f *FSM) publish(m *Metadata) {
	f.state.Store(m)
	f.subs.notify()
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM: the commands raft commits
// together change one private copy, published once, and a topic's
// partition list is copied once per batch instead of once per command. A
// broker taking over thousands of partitions reports their leaders in
// bursts, and each copy of a topic's list is about 70 bytes a partition.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	next := f.state.Load().clone()
	next.own = map[*TopicInfo]bool{}
	out := make([]any, len(logs))
	for i, l := range logs {
		next.Index = l.Index
		if l.Type != raft.LogCommand {
			continue
		}
		var c Command
		var res Result
		if err := json.Unmarshal(l.Data, &c); err != nil {
			res = failure(ErrBadCommand, "cannot decode command at index %d: %v", l.Index, err)
		} else {
			// A failed command changes nothing but the applied index. No
			// command changes a list in place and then fails, so the
			// topics this batch owns stay owned.
			before := next.clone()
			before.own = next.own
			if res = next.apply(c); res.Code != "" {
				next = before
				next.Index = l.Index
			}
		}
		res.Index = l.Index
		out[i] = res
	}
	next.own = nil
	f.publish(next)
	return out
}

// apply changes m (a private clone) by c.
func (m *Metadata) apply(c Command) Result {
	switch c.Op {
	case OpSetClusterID:
		if m.ClusterID == "" {
			m.ClusterID = c.ClusterID
		}
	case OpRegisterBroker:
		if c.Broker == nil {
			return failure(ErrBadCommand, "register_broker without a broker")
		}
		m.Brokers[c.Broker.ID] = *c.Broker
	case OpSetBrokerAlive:
		b, ok := m.Brokers[c.BrokerID]
		if !ok {
			return failure(ErrBadCommand, "broker %d is not registered", c.BrokerID)
		}
		b.Alive = c.Alive
		m.Brokers[c.BrokerID] = b
	case OpCreateTopic:
		if _, ok := m.Topics[c.Topic]; ok {
			return failure(ErrTopicExists, "topic %q already exists", c.Topic)
		}
		if c.Partitions <= 0 || c.Partitions > MaxPartitions {
			return failure(ErrInvalidPartitions, "topic %q: partition count %d must be between 1 and %d", c.Topic, c.Partitions, MaxPartitions)
		}
		rf, res := m.replicationFactor(c.ReplicationFactor)
		if res.Code != "" {
			return res
		}
		assign, err := m.place(int(c.Partitions), rf)
		if err != nil {
			return failure(ErrNoAliveBrokers, "cannot place topic %q: no broker is alive", c.Topic)
		}
		m.Topics[c.Topic] = &TopicInfo{Name: c.Topic, ID: c.TopicID, Configs: maps.Clone(c.Configs), Partitions: assign}
	case OpDeleteTopic:
		if _, ok := m.Topics[c.Topic]; !ok {
			return failure(ErrUnknownTopic, "topic %q does not exist", c.Topic)
		}
		delete(m.Topics, c.Topic)
	case OpCreatePartitions:
		t, ok := m.Topics[c.Topic]
		if !ok {
			return failure(ErrUnknownTopic, "topic %q does not exist", c.Topic)
		}
		if c.Partitions > MaxPartitions {
			return failure(ErrInvalidPartitions, "topic %q: partition count %d is above %d", c.Topic, c.Partitions, MaxPartitions)
		}
		if int(c.Partitions) <= len(t.Partitions) {
			return failure(ErrInvalidPartitions, "topic %q has %d partitions; the new count %d must be larger", c.Topic, len(t.Partitions), c.Partitions)
		}
		rf := 1
		if len(t.Partitions) > 0 {
			rf = len(t.Partitions[0].Replicas)
		}
		if rf > len(m.AliveBrokers()) {
			return failure(ErrReplicationFactor, "topic %q has replication factor %d but only %d brokers are alive", c.Topic, rf, len(m.AliveBrokers()))
		}
		assign, err := m.place(int(c.Partitions)-len(t.Partitions), rf)
		if err != nil {
			return failure(ErrNoAliveBrokers, "cannot place partitions of %q: no broker is alive", c.Topic)
		}
		nt := *t
		nt.Partitions = append(slices.Clone(t.Partitions), assign...)
		m.Topics[c.Topic] = &nt
	case OpSetTopicConfigs:
		t, ok := m.Topics[c.Topic]
		if !ok {
			return failure(ErrUnknownTopic, "topic %q does not exist", c.Topic)
		}
		nt := *t
		nt.Configs = maps.Clone(c.Configs)
		m.Topics[c.Topic] = &nt
	case OpSetPartitionLeader:
		t, res := m.commandPartition(c)
		if t == nil {
			return res
		}
		a := t.Partitions[c.Partition]
		if !slices.Contains(a.Members(), c.Leader) || c.LeaderEpoch < a.LeaderEpoch ||
			(c.LeaderEpoch == a.LeaderEpoch && c.Leader == a.Leader) {
			return Result{} // stale or already known
		}
		a.Leader, a.LeaderEpoch = c.Leader, c.LeaderEpoch
		m.ownTopic(t).Partitions[c.Partition] = a
	case OpReassign, OpReplicaProgress, OpFinishReassignment:
		return m.applyReassignment(c)
	case OpUpsertScram, OpDeleteScram, OpCreateACLs, OpDeleteACLs:
		var res Result
		m.Security, res = m.Security.Apply(c)
		return res
	default:
		return failure(ErrBadCommand, "unknown command %q", c.Op)
	}
	return Result{}
}

// commandPartition returns the topic of a partition command (same name and
// id, partition in range), or nil and the failure.
func (m *Metadata) commandPartition(c Command) (*TopicInfo, Result) {
	t, ok := m.Topics[c.Topic]
	if !ok || t.ID != c.TopicID {
		return nil, failure(ErrUnknownTopic, "topic %q does not exist", c.Topic)
	}
	if c.Partition < 0 || int(c.Partition) >= len(t.Partitions) {
		return nil, failure(ErrInvalidPartitions, "topic %q has no partition %d", c.Topic, c.Partition)
	}
	return t, Result{}
}

// applyReassignment applies the three reassignment commands.
func (m *Metadata) applyReassignment(c Command) Result {
	t, res := m.commandPartition(c)
	if t == nil {
		return res
	}
	a := t.Partitions[c.Partition]
	a.Progress = maps.Clone(a.Progress)
	switch c.Op {
	case OpReassign:
		if a.Target != nil && !c.Override {
			return failure(ErrReassignment, "%s/%d is already being reassigned to %v", c.Topic, c.Partition, a.Target)
		}
		if len(c.Replicas) == 0 || len(c.Replicas) > len(m.Brokers) {
			return failure(ErrReassignment, "%s/%d: replica set %v must name 1 to %d brokers", c.Topic, c.Partition, c.Replicas, len(m.Brokers))
		}
		for i, r := range c.Replicas {
			if _, ok := m.Brokers[r]; !ok || slices.Contains(c.Replicas[:i], r) {
				return failure(ErrReassignment, "%s/%d: replica set %v names broker %d twice or one that is not registered", c.Topic, c.Partition, c.Replicas, r)
			}
		}
		if len(a.Replicas) < 2 || len(c.Replicas) < 2 {
			return failure(ErrReassignment, "%s/%d: only partitions replicated by raft (2 or more replicas) can move", c.Topic, c.Partition)
		}
		a.Target = slices.Clone(c.Replicas)
		for id := range a.Progress {
			if !slices.Contains(a.Target, id) {
				delete(a.Progress, id)
			}
		}
		if len(a.Progress) == 0 {
			a.Progress = nil
		}
	case OpReplicaProgress:
		if a.Target == nil || !slices.Contains(a.Target, c.Leader) {
			return Result{} // finished meanwhile
		}
		if a.Progress == nil {
			a.Progress = map[int32]int64{}
		}
		a.Progress[c.Leader] = max(a.Progress[c.Leader], c.Offset)
	case OpFinishReassignment:
		if a.Target == nil || !slices.Equal(a.Target, c.Replicas) {
			return failure(ErrReassignment, "%s/%d: no reassignment to %v in progress (target %v)", c.Topic, c.Partition, c.Replicas, a.Target)
		}
		a.Moved = a.Moved || !slices.Equal(sortedCopy(a.Replicas), sortedCopy(a.Target))
		a.Replicas, a.Target, a.Progress = a.Target, nil, nil
	}
	m.ownTopic(t).Partitions[c.Partition] = a
	return Result{}
}

// ownTopic returns a copy of topic t whose partition list m may change:
// t itself if this batch made it, else a new one in m.Topics.
func (m *Metadata) ownTopic(t *TopicInfo) *TopicInfo {
	if m.own[t] {
		return t
	}
	nt := *t
	nt.Partitions = slices.Clone(t.Partitions)
	m.Topics[nt.Name] = &nt
	if m.own != nil {
		m.own[&nt] = true
	}
	return &nt
}

func sortedCopy(s []int32) []int32 {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// DefaultReplicationFactor is a new topic's replica count when the
// request leaves it open (capped by the alive brokers).
const DefaultReplicationFactor = 3

// replicationFactor resolves a requested factor against the alive brokers.
func (m *Metadata) replicationFactor(req int16) (int, Result) {
	alive := len(m.AliveBrokers())
	if req <= 0 {
		if req != 0 && req != -1 {
			return 0, failure(ErrReplicationFactor, "replication factor %d must be positive (or -1 for the default)", req)
		}
		return max(1, min(DefaultReplicationFactor, alive)), Result{}
	}
	if int(req) > alive {
		return 0, failure(ErrReplicationFactor, "replication factor %d is larger than the %d alive brokers", req, alive)
	}
	return int(req), Result{}
}

// place assigns n new partitions with rf replicas each to alive brokers.
// The leader (first replica) of each goes to the broker leading the fewest
// partitions so far (lowest id on ties); the other replicas to the
// brokers holding the fewest replicas, so both leaders and replicas stay
// spread evenly, also after a broker joins.
func (m *Metadata) place(n, rf int) ([]Assignment, error) {
	alive := m.AliveBrokers()
	if len(alive) == 0 {
		return nil, ErrNoAliveBrokers
	}
	rf = max(1, min(rf, len(alive)))
	leads, holds := map[int32]int{}, map[int32]int{}
	for _, b := range alive {
		leads[b.ID], holds[b.ID] = 0, 0
	}
	for _, t := range m.Topics {
		for _, a := range t.Partitions {
			if _, ok := leads[a.Leader]; ok {
				leads[a.Leader]++
			}
			for _, r := range a.Replicas {
				if _, ok := holds[r]; ok {
					holds[r]++
				}
			}
		}
	}
	out := make([]Assignment, n)
	for i := range out {
		best := Fewest(alive, leads, nil)
		leads[best]++
		holds[best]++
		replicas := []int32{best}
		for len(replicas) < rf {
			next := Fewest(alive, holds, replicas)
			holds[next]++
			replicas = append(replicas, next)
		}
		out[i] = Assignment{Replicas: replicas, Leader: best}
	}
	return out, nil
}

// Snapshot implements raft.FSM. The state is immutable, so the snapshot
// just keeps the pointer; Persist encodes it off the apply path.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{m: f.state.Load()}, nil
}

// Restore implements raft.FSM: it replaces the state with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var m Metadata
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		return fmt.Errorf("cannot decode controller snapshot: %w", err)
	}
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.publish(m.clone())
	return nil
}

type fsmSnapshot struct{ m *Metadata }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.m); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cannot write controller snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
