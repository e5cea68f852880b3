package admin

// DescribeCluster, version 0.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 60, Min: 0, Max: 0}, kapi.Typed(
	func(b Broker, r *kapi.Request, req *kmsg.DescribeClusterRequest) kmsg.Response {
		if !r.Allowed(kmsg.ACLOperationDescribe, auth.Cluster) {
			resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
			resp.Version = req.Version
			resp.ErrorCode, resp.ErrorMessage = errorOf(errClusterAuthorization(r, kmsg.ACLOperationDescribe))
			return resp
		}
		return handleDescribeCluster(b, r.Listener, req)
	}))

func handleDescribeCluster(b Broker, listener string, r *kmsg.DescribeClusterRequest) *kmsg.DescribeClusterResponse {
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.Version = r.Version
	var brokers []BrokerAddr
	resp.ClusterID, resp.ControllerID, brokers = b.Brokers(listener)
	for _, a := range brokers {
		br := kmsg.NewDescribeClusterResponseBroker()
		br.NodeID, br.Host, br.Port = a.NodeID, a.Host, a.Port
		resp.Brokers = append(resp.Brokers, br)
	}
	resp.ClusterAuthorizedOperations = -2147483648
	return resp
}
