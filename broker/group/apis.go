package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

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

// routeOne answers a request for one group from that group's coordinator.
func routeOne(rt Router, req kmsg.Request, group string, f func(*Coordinator) kmsg.Response) kmsg.Response {
	c, code := rt.CoordinatorFor(group)
	if code != 0 {
		return ErrorResponse(req, code)
	}
	return f(c)
}

// clientContext tags ctx with the client a membership request came from,
// which DescribeGroups reports.
func clientContext(r *kapi.Request) context.Context {
	return WithClient(r.Ctx, r.ClientID, r.Host)
}
