package broker

// FindCoordinator, versions 0-3. A single node coordinates every group
// and every transactional id (key type 1). In cluster mode a group's
// coordinator is the raft leader of its __consumer_offsets partition, a
// transactional id's the raft leader of its __transaction_state partition
// (txn_cluster.go).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.Add(kapi.API{Key: 10, Min: 0, Max: 3},
	func(b *Broker, r *kapi.Request) kmsg.Response {
		return b.handleFindCoordinator(r.Msg.(*kmsg.FindCoordinatorRequest))
	})

func (b *Broker) handleFindCoordinator(r *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
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
		b.findTxnCoordinator(r.CoordinatorKey, resp)
		return resp
	}
	if b.cluster != nil {
		b.findClusterCoordinator(r.CoordinatorKey, resp)
		return resp
	}
	host, port := b.advertised()
	resp.NodeID, resp.Host, resp.Port = b.cfg.NodeID, host, port
	return resp
}
