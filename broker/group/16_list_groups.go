package group

// ListGroups, versions 0-5 (v4 filters by state, v5 by type and reports
// GroupType). In a cluster each broker lists the groups it coordinates;
// clients ask every broker.

import (
	"cmp"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 16, Min: 0, Max: 5}, kapi.Typed(
	func(rt Router, r *kapi.Request, q *kmsg.ListGroupsRequest) kmsg.Response {
		resp := listGroups(rt, q)
		// Groups the principal may not describe are left out, as
		// Kafka does (Describe on the cluster shows them all).
		if r.Authz != nil && !r.Allowed(kmsg.ACLOperationDescribe, auth.Cluster) {
			resp.Groups = slices.DeleteFunc(resp.Groups, func(g kmsg.ListGroupsResponseGroup) bool {
				return !r.Allowed(kmsg.ACLOperationDescribe, auth.Group(g.Group))
			})
		}
		return resp
	}))

// listGroups lists the groups of every coordinator this broker runs.
func listGroups(rt Router, q *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	if c := rt.Single(); c != nil {
		return c.ListGroups(q)
	}
	resp := q.ResponseKind().(*kmsg.ListGroupsResponse)
	for _, c := range rt.Served() {
		out := c.ListGroups(q)
		if out.ErrorCode != 0 {
			continue // closing: its groups are being handed over
		}
		resp.Groups = append(resp.Groups, out.Groups...)
	}
	slices.SortFunc(resp.Groups, func(x, y kmsg.ListGroupsResponseGroup) int { return cmp.Compare(x.Group, y.Group) })
	return resp
}
