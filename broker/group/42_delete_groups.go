package group

// DeleteGroups, versions 0-2. Blocking: deleting waits for the disk (single
// broker) or a raft majority. In a cluster each group is deleted by its own
// coordinator.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 42, Min: 0, Max: 2, Blocking: true}, kapi.Typed(
	func(rt Router, r *kapi.Request, q *kmsg.DeleteGroupsRequest) kmsg.Response {
		allowed, denied := splitGroups(r, kmsg.ACLOperationDelete, q.Groups)
		if denied != nil {
			sub, refused := *q, *q
			sub.Groups, refused.Groups = allowed, denied
			resp := deleteGroups(rt, &sub)
			resp.Groups = append(resp.Groups, ErrorResponse(&refused, kerr.GroupAuthorizationFailed.Code).(*kmsg.DeleteGroupsResponse).Groups...)
			return resp
		}
		return deleteGroups(rt, q)
	}))

// deleteGroups deletes each group of q at its coordinator.
func deleteGroups(rt Router, q *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	if c := rt.Single(); c != nil {
		return c.DeleteGroups(q)
	}
	resp := q.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, name := range q.Groups {
		sub := *q
		sub.Groups = []string{name}
		out := routeOne(rt, q, name, func(c *Coordinator) kmsg.Response { return c.DeleteGroups(&sub) })
		resp.Groups = append(resp.Groups, out.(*kmsg.DeleteGroupsResponse).Groups...)
	}
	return resp
}
