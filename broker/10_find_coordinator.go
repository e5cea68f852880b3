package broker

// FindCoordinator, versions 0-3. A single node coordinates every group
// and every transactional id (key type 1). In cluster mode a group's
// coordinator is the raft leader of its __consumer_offsets partition, a
// transactional id's the raft leader of its __transaction_state partition
// (package txn).

import (
	"context"
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.Add(kapi.API{Key: 10, Min: 0, Max: 3}, kapi.Typed(
	func(b *Broker, r *kapi.Request, req *kmsg.FindCoordinatorRequest) kmsg.Response {
		// Describe on the group or transactional id, as Kafka.
		switch {
		case req.CoordinatorType == 0 && !r.Allowed(kmsg.ACLOperationDescribe, auth.Group(req.CoordinatorKey)):
			return coordinatorDenied(req, kerr.GroupAuthorizationFailed)
		case req.CoordinatorType == 1 && !r.Allowed(kmsg.ACLOperationDescribe, auth.TransactionalID(req.CoordinatorKey)):
			return coordinatorDenied(req, kerr.TransactionalIDAuthorizationFailed)
		}
		return b.handleFindCoordinator(r.Listener, req)
	}))

// coordinatorDenied is the answer to a FindCoordinator the authorizer
// refuses.
func coordinatorDenied(r *kmsg.FindCoordinatorRequest, err *kerr.Error) *kmsg.FindCoordinatorResponse {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	resp.Version = r.Version
	resp.NodeID, resp.ErrorCode = -1, err.Code
	return resp
}

// The coordinator's address is the one on the client's listener.
func (b *Broker) handleFindCoordinator(listener string, r *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	resp.Version = r.Version
	if r.CoordinatorType == 1 && r.CoordinatorKey == "" {
		resp.ErrorCode = kerr.InvalidRequest.Code
		resp.NodeID = -1
		return resp
	}
	if r.CoordinatorType > 1 {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		msg := "unknown coordinator type"
		resp.ErrorMessage = &msg
		resp.NodeID = -1
		return resp
	}
	if b.cluster != nil && r.CoordinatorType == 1 {
		b.findTxnCoordinator(listener, r.CoordinatorKey, resp)
		return resp
	}
	if b.cluster != nil {
		b.findClusterCoordinator(listener, r.CoordinatorKey, resp)
		return resp
	}
	host, port := b.advertised(listener)
	resp.NodeID, resp.Host, resp.Port = b.cfg.NodeID, host, port
	return resp
}

// findTxnCoordinator answers FindCoordinator for a transactional id in
// cluster mode.
func (b *Broker) findTxnCoordinator(listener, id string, resp *kmsg.FindCoordinatorResponse) {
	resp.NodeID = -1
	i, local, ok := b.txn.Locate(id)
	if !ok {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		msg := "the controller has not created " + txnStateTopic + " yet; retry"
		resp.ErrorMessage = &msg
		return
	}
	b.answerCoordinator(listener, resp, local, txnStateTopic, i, "the transactional id's")
}

// answerCoordinator fills a FindCoordinator answer in cluster mode: this
// broker if it coordinates the key (local), else the leader of the key's
// partition i of the internal topic; whose names the key in the error.
func (b *Broker) answerCoordinator(listener string, resp *kmsg.FindCoordinatorResponse, local bool, topic string, i int32, whose string) {
	if local {
		resp.NodeID = b.cfg.NodeID
		resp.Host, resp.Port = b.advertised(listener)
		return
	}
	b.awaitElection(topic, i)
	lb, ok := b.partitionLeaderBroker(topic, i)
	if !ok {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		msg := whose + " partition of " + topic + " is electing a leader; retry"
		resp.ErrorMessage = &msg
		return
	}
	host, port, ok := brokerAddr(listener, lb)
	if !ok {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		msg := "the coordinator has no listener named " + listener
		resp.ErrorMessage = &msg
		return
	}
	resp.NodeID, resp.Host, resp.Port = lb.ID, host, port
}

// awaitElection holds a FindCoordinator answer (up to electionWait, as
// Metadata answers) while this broker's replica of partition i of topic
// knows no live leader, other than itself: an election is running, and
// the controller's record, the answer otherwise, still names the broker
// that led before (stepped down or gone). The client sent there would
// get NOT_COORDINATOR and look the coordinator up again, backing off
// longer each time.
func (b *Broker) awaitElection(topic string, i int32) {
	p := b.localPartition(topic, i)
	if p == nil || !p.Replicated() {
		return
	}
	b.awaitHandover(context.Background(), electionWait,
		func() bool { return p.Raft().State() == raft.Leader || !b.leaderPending(p) },
		func() bool { return true })
}

// partitionLeaderBroker names the broker leading a partition: the raft
// leader a local replica knows of (it hears of a new leader before the
// controller does), else the controller's record; never a broker seen
// gone or stopping (cluster.Node.PeerDown), whose port refuses clients.
func (b *Broker) partitionLeaderBroker(topic string, i int32) (cluster.BrokerInfo, bool) {
	md := b.cluster.Metadata()
	live := func(id int32) (cluster.BrokerInfo, bool) {
		lb, ok := md.Brokers[id]
		return lb, ok && lb.Alive && !b.cluster.PeerDown(id)
	}
	if p := b.localPartition(topic, i); p != nil && p.Replicated() {
		if _, id := p.Raft().LeaderWithID(); id != "" {
			if n, err := strconv.Atoi(string(id)); err == nil {
				if lb, ok := live(int32(n)); ok {
					return lb, true
				}
			}
		}
	}
	ti := md.Topics[topic]
	if ti == nil || i < 0 || int(i) >= len(ti.Partitions) {
		return cluster.BrokerInfo{}, false
	}
	return live(ti.Partitions[i].Leader)
}
