package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

// Router finds the coordinators a broker runs. A single broker runs one
// coordinator for every group; a broker of a cluster runs one for each
// offsets partition it leads.
type Router interface {
	// Single is the coordinator of a single broker, nil in a cluster.
	Single() *Coordinator
	// CoordinatorFor returns the coordinator of group on this broker,
	// or the error code to answer with.
	CoordinatorFor(group string) (*Coordinator, int16)
	// Served returns every coordinator this broker runs.
	Served() []*Coordinator
}

// APIs are the group APIs, each declared in its NN_ file; the broker binds
// them to its Router.
var APIs kapi.Table[Router]

// oneGroup declares an API whose requests name one group (group reads it
// from a request), answered by that group's coordinator.
func oneGroup[Q kmsg.Request](api kapi.API, group func(Q) string, handle func(*Coordinator, *kapi.Request, Q) kmsg.Response) struct{} {
	return APIs.Add(api, func(rt Router, r *kapi.Request) kmsg.Response {
		q := r.Msg.(Q)
		g := group(q)
		if !r.Allowed(groupOperation(q), auth.Group(g)) {
			return ErrorResponse(q, kerr.GroupAuthorizationFailed.Code)
		}
		return routeOne(rt, q, g, func(c *Coordinator) kmsg.Response { return handle(c, r, q) })
	})
}

// manyGroups declares an API whose requests name many groups
// (DescribeGroups, DeleteGroups; Q is *T): the groups the principal may not
// do op on are answered GROUP_AUTHORIZATION_FAILED, each other group by its
// own coordinator. groups is a request's group list, answers a response's
// list of per-group results.
func manyGroups[T any, Q interface {
	*T
	kmsg.Request
}, P kmsg.Response, G any](api kapi.API, op auth.Operation, groups func(Q) *[]string, answers func(P) *[]G, handle func(*Coordinator, Q) P) struct{} {
	naming := func(q Q, names []string) Q {
		sub := *q
		*groups(&sub) = names
		return &sub
	}
	// each answers q from its groups' coordinators.
	each := func(rt Router, q Q) P {
		if c := rt.Single(); c != nil {
			return handle(c, q)
		}
		resp := q.ResponseKind().(P)
		for _, name := range *groups(q) {
			sub := naming(q, []string{name})
			out := routeOne(rt, sub, name, func(c *Coordinator) kmsg.Response { return handle(c, sub) })
			*answers(resp) = append(*answers(resp), *answers(out.(P))...)
		}
		return resp
	}
	return APIs.Add(api, func(rt Router, r *kapi.Request) kmsg.Response {
		q := r.Msg.(Q)
		allowed, denied := splitGroups(r, op, *groups(q))
		if denied == nil {
			return each(rt, q)
		}
		resp := each(rt, naming(q, allowed))
		refused := ErrorResponse(naming(q, denied), kerr.GroupAuthorizationFailed.Code).(P)
		*answers(resp) = append(*answers(resp), *answers(refused)...)
		return resp
	})
}

// groupOperation is what Kafka authorizes on the group of a one-group
// request: Describe to fetch offsets, Delete to delete them, Read to join,
// sync, heartbeat, leave and commit.
func groupOperation(req kmsg.Request) auth.Operation {
	switch req.(type) {
	case *kmsg.OffsetFetchRequest:
		return kmsg.ACLOperationDescribe
	case *kmsg.OffsetDeleteRequest:
		return kmsg.ACLOperationDelete
	}
	return kmsg.ACLOperationRead
}

// splitGroups divides a request's groups into those the principal may do
// op on and those it may not; denied is nil when every one is allowed.
func splitGroups(r *kapi.Request, op auth.Operation, groups []string) (allowed, denied []string) {
	if r.Authz == nil {
		return groups, nil
	}
	for _, g := range groups {
		if r.Allowed(op, auth.Group(g)) {
			allowed = append(allowed, g)
		} else {
			denied = append(denied, g)
		}
	}
	if denied == nil {
		return groups, nil
	}
	return allowed, denied
}

// routeOne answers a request for one group from that group's coordinator.
func routeOne(rt Router, req kmsg.Request, group string, f func(*Coordinator) kmsg.Response) kmsg.Response {
	c, code := rt.CoordinatorFor(group)
	if code != 0 {
		return ErrorResponse(req, code)
	}
	return f(c)
}

// clientContext tags ctx with the client a membership request came from,
// which DescribeGroups reports as Kafka does: the host after a slash.
func clientContext(r *kapi.Request) context.Context {
	return WithClient(r.Ctx, r.ClientID, "/"+r.Host)
}
