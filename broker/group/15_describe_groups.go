package group

// DescribeGroups, versions 0-5. In a cluster each group is described by its
// own coordinator; a group coordinated elsewhere is answered NOT_COORDINATOR.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = manyGroups(kapi.API{Key: 15, Min: 0, Max: 5}, kmsg.ACLOperationDescribe,
	func(q *kmsg.DescribeGroupsRequest) *[]string { return &q.Groups },
	func(p *kmsg.DescribeGroupsResponse) *[]kmsg.DescribeGroupsResponseGroup { return &p.Groups },
	(*Coordinator).DescribeGroups)
