package group

// LeaveGroup, versions 0-4.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 13, Min: 0, Max: 4},
	func(rt Router, r *kapi.Request) kmsg.Response {
		q := r.Msg.(*kmsg.LeaveGroupRequest)
		return routeOne(rt, q, q.Group, func(c *Coordinator) kmsg.Response { return c.LeaveGroup(q) })
	})
