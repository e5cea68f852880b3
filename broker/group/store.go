package group

import "errors"

// ErrStoreClosed is returned by a Store whose Close has been called.
var ErrStoreClosed = errors.New("group store closed")

// Store persists what the coordinator must not forget across restarts:
// committed offsets, which groups exist and the group metadata that lets
// members (static ones in particular) resume without a rebalance.
//
// The coordinator calls a Store from many goroutines at once, never while
// holding its own lock. It guarantees that two calls that could conflict
// (a Commit and a DeleteOffsets of the same partition, a SaveGroup and a
// DeleteGroup of the same group, ...) are never in flight at the same time,
// so an implementation only has to apply calls in the order it receives
// them. Nothing in the coordinator depends on the file format behind it,
// or on whether the log is replicated (see OpenReplicatedLogStore).
type Store interface {
	// Commit durably records offsets of a group before returning. It is
	// the latency-critical call: OffsetCommit responds only after it.
	// Recording an offset for a group the store does not know creates the
	// group.
	Commit(group string, offsets []CommittedOffset) error
	// DeleteOffsets durably removes the offsets of the given partitions.
	DeleteOffsets(group string, tps []TopicPartition) error
	// DeleteGroup durably removes a group with its offsets and metadata.
	DeleteGroup(group string) error
	// SaveGroup records the latest metadata of a group, replacing the
	// previous one. It is best effort: it need not be synced before
	// returning, and the coordinator only logs its errors.
	SaveGroup(meta GroupMeta) error
	// Load returns everything persisted, for startup.
	Load() (State, error)
	// Close releases the store. Calls after Close return ErrStoreClosed.
	Close() error
}

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// CommittedOffset is one partition's committed position in a group.
type CommittedOffset struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32 // -1 if the client did not send one
	Metadata    string
	// CommitTimeMillis is the coordinator's clock at commit, in Unix
	// milliseconds; kept for a future offset retention policy.
	CommitTimeMillis int64
}

// GroupMeta is the persisted description of a group. A group known only
// through its offsets has a GroupMeta with just Group set.
type GroupMeta struct {
	Group        string
	ProtocolType string
	Protocol     string
	Generation   int32
	Leader       string
	// Members is the membership of the saved generation. Static members
	// (InstanceID != "") are what must survive a restart; dynamic ones are
	// saved too so that a quick coordinator restart does not force every
	// consumer through a rebalance (members that do not come back expire
	// through their session timeout, as in Kafka).
	Members []MemberMeta
}

// MemberMeta is the persisted description of a group member.
type MemberMeta struct {
	MemberID               string
	InstanceID             string // "" for dynamic members
	ClientID               string
	ClientHost             string
	SessionTimeoutMillis   int32
	RebalanceTimeoutMillis int32
	Protocols              []ProtocolMeta
	Assignment             []byte
}

// ProtocolMeta is one protocol a member supports, with its metadata.
type ProtocolMeta struct {
	Name     string
	Metadata []byte
}

// State is everything a Store holds.
type State struct {
	Groups []GroupState
}

// GroupState is one persisted group: its metadata and offsets.
type GroupState struct {
	Meta    GroupMeta
	Offsets []CommittedOffset
}
