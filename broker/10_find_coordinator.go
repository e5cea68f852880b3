package broker

// FindCoordinator, versions 0-3. This node coordinates every group.
// Transactions are not supported, so transaction coordinators are not
// available.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (b *Broker) handleFindCoordinator(r *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	resp.Version = r.Version
	if r.CoordinatorType != 0 {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		msg := "transactions are not supported by this broker"
		resp.ErrorMessage = &msg
		resp.NodeID = -1
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
