package broker

// DescribeCluster, version 0.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.Add(kapi.API{Key: 60, Min: 0, Max: 0},
	func(b *Broker, r *kapi.Request) kmsg.Response {
		return b.handleDescribeCluster(r.Msg.(*kmsg.DescribeClusterRequest))
	})

func (b *Broker) handleDescribeCluster(r *kmsg.DescribeClusterRequest) *kmsg.DescribeClusterResponse {
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.Version = r.Version
	if b.cluster != nil {
		b.describeClusterMembers(resp)
		return resp
	}
	resp.ClusterID = b.clusterID
	resp.ControllerID = b.cfg.NodeID
	host, port := b.advertised()
	br := kmsg.NewDescribeClusterResponseBroker()
	br.NodeID, br.Host, br.Port = b.cfg.NodeID, host, port
	resp.Brokers = []kmsg.DescribeClusterResponseBroker{br}
	resp.ClusterAuthorizedOperations = -2147483648
	return resp
}
