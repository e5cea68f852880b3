package admin

// DescribeCluster, version 0.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 60, Min: 0, Max: 0}, kapi.Reply(handleDescribeCluster))

func handleDescribeCluster(b Broker, r *kapi.Request, req *kmsg.DescribeClusterRequest, resp *kmsg.DescribeClusterResponse) {
	if err := errClusterDenied(r, kmsg.ACLOperationDescribe); err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorOf(err)
		return
	}
	var brokers []BrokerAddr
	resp.ClusterID, resp.ControllerID, brokers = b.Brokers(r.Listener)
	for _, a := range brokers {
		br := kmsg.NewDescribeClusterResponseBroker()
		br.NodeID, br.Host, br.Port = a.NodeID, a.Host, a.Port
		resp.Brokers = append(resp.Brokers, br)
	}
	resp.ClusterAuthorizedOperations = -2147483648
}
