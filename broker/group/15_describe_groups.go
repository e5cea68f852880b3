package group

// DescribeGroups, versions 0-5. In a cluster each group is described by its
// own coordinator; a group coordinated elsewhere is answered NOT_COORDINATOR.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 15, Min: 0, Max: 5}, kapi.Typed(
	func(rt Router, r *kapi.Request, q *kmsg.DescribeGroupsRequest) kmsg.Response {
		allowed, denied := splitGroups(r, kmsg.ACLOperationDescribe, q.Groups)
		if denied != nil {
			sub, refused := *q, *q
			sub.Groups, refused.Groups = allowed, denied
			resp := describeGroups(rt, &sub)
			resp.Groups = append(resp.Groups, ErrorResponse(&refused, kerr.GroupAuthorizationFailed.Code).(*kmsg.DescribeGroupsResponse).Groups...)
			return resp
		}
		return describeGroups(rt, q)
	}))

// describeGroups answers q from each group's coordinator.
func describeGroups(rt Router, q *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	if c := rt.Single(); c != nil {
		return c.DescribeGroups(q)
	}
	resp := q.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, name := range q.Groups {
		sub := *q
		sub.Groups = []string{name}
		out := routeOne(rt, q, name, func(c *Coordinator) kmsg.Response { return c.DescribeGroups(&sub) })
		resp.Groups = append(resp.Groups, out.(*kmsg.DescribeGroupsResponse).Groups...)
	}
	return resp
}
