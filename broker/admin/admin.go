// Package admin is the broker's admin APIs: creating and deleting topics,
// adding partitions, deleting records, describing and altering configs,
// reassigning partitions and describing the cluster. Each API is declared
// in its NN_ file and served through the Broker interface, which the
// broker implements and binds with APIs.Bind: the topics, their
// partitions and the controller stay the broker's; this package turns
// requests into calls on them and their results into responses. It also
// holds the topic configs the broker understands (topic_config.go).
package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/partition"
)

// APIs are the admin APIs, each declared in its NN_ file.
var APIs kapi.Table[Broker]

// Broker is the broker the admin APIs act on. Its errors are kerr errors
// (wrapped with what went wrong) for the response.
type Broker interface {
	// NodeID is the broker's node id.
	NodeID() int32
	// Cluster is the broker's cluster node, nil on a single broker.
	Cluster() *cluster.Node
	Logger() *slog.Logger

	// Topic describes a topic the broker knows.
	Topic(name string) (t Topic, ok bool)
	// TopicByID names the topic with id.
	TopicByID(id [16]byte) (name string, ok bool)
	// CreateTopic creates a topic, or with validateOnly checks that it
	// could; partitions and replicationFactor -1 ask for the defaults.
	CreateTopic(name string, partitions int32, replicationFactor int16, configs map[string]*string, validateOnly bool) (Topic, error)
	DeleteTopic(name string) error
	// CreatePartitions raises the topic's partition count to count.
	CreatePartitions(topic string, count int32, validateOnly bool) error
	// AlterTopicConfigs replaces the topic's config overrides by what
	// update makes of a copy of them.
	AlterTopicConfigs(topic string, update func(map[string]string) error, validateOnly bool) error
	// TopicDefaults are the broker's defaults of topic configs.
	TopicDefaults() map[string]string
	// BrokerConfigs are the broker's settings as DescribeConfigs reports
	// them, by name, in a new map (the topic defaults, log.*, are added
	// from TopicDefaults).
	BrokerConfigs() map[string]string

	// Partition is the partition if the broker serves it (has it and
	// leads it), else nil, and AbsentPartitionCode says why.
	Partition(topic string, i int32) *partition.Partition
	AbsentPartitionCode(topic string, i int32) int16
	// Internal reports whether topic is a coordinator's internal topic,
	// whose records clients may not delete.
	Internal(topic string) bool
	// Brokers describes the cluster for DescribeCluster: its id, the
	// controller and the brokers (just this one on a single broker), at
	// their addresses on the named listener (the client's).
	Brokers(listener string) (clusterID string, controller int32, brokers []BrokerAddr)
	// Security is the SCRAM credentials and ACLs (security.go).
	Security() Security
}

// Topic is what CreateTopics and DeleteTopics report of a topic.
type Topic struct {
	ID         [16]byte
	Partitions int
	// ReplicationFactor, set by CreateTopic only, is the placed topic's,
	// or (validate only) the requested one resolved against the alive
	// brokers.
	ReplicationFactor int16
	Configs           map[string]string
}

// BrokerAddr is a broker as DescribeCluster names it.
type BrokerAddr struct {
	NodeID int32
	Host   string
	Port   int32
}

// OffsetsTopic is the group coordinators' internal topic; its partitions
// are not moved by reassignments.
const OffsetsTopic = "__consumer_offsets"

// Timeout bounds a change made through the controller.
const Timeout = 10 * time.Second

// NotController is the error of a topic change sent to a broker that is
// not the controller leader.
func NotController() error {
	return fmt.Errorf("%w: topic changes go to the controller leader; refresh metadata and send them to its ControllerID", kerr.NotController)
}

// controller is the broker's cluster node if it is the controller leader,
// which reassignments go to; else an error for the response (notCluster
// is added to its message on a single broker).
func controller(b Broker, notCluster string) (*cluster.Node, error) {
	n := b.Cluster()
	if n == nil {
		return nil, fmt.Errorf("%w: this broker is not part of a cluster%s", kerr.InvalidRequest, notCluster)
	}
	if !n.IsLeader() {
		return nil, NotController()
	}
	return n, nil
}

// errorOf is err as a response's error code and message.
func errorOf(err error) (int16, *string) {
	msg := err.Error()
	return kapi.ErrorCode(err), &msg
}

// ControllerError maps an error of a controller command to a Kafka error.
func ControllerError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrTopicExists):
		return fmt.Errorf("%w: %v", kerr.TopicAlreadyExists, err)
	case errors.Is(err, cluster.ErrUnknownTopic):
		return fmt.Errorf("%w: %v", kerr.UnknownTopicOrPartition, err)
	case errors.Is(err, cluster.ErrInvalidPartitions):
		return fmt.Errorf("%w: %v", kerr.InvalidPartitions, err)
	case errors.Is(err, cluster.ErrReplicationFactor):
		return fmt.Errorf("%w: %v", kerr.InvalidReplicationFactor, err)
	case errors.Is(err, cluster.ErrNoAliveBrokers):
		return fmt.Errorf("%w: %v", kerr.BrokerNotAvailable, err)
	case errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrNoLeader):
		return fmt.Errorf("%w: %v", kerr.NotController, err)
	default:
		return fmt.Errorf("%w: %v", kerr.RequestTimedOut, err)
	}
}
