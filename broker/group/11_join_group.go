package group

// JoinGroup, versions 0-7.
//
// Blocking: it blocks until the group's rebalance moves on.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 11, Min: 0, Max: 7, Blocking: true},
	func(rt Router, r *kapi.Request) kmsg.Response {
		q := r.Msg.(*kmsg.JoinGroupRequest)
		return routeOne(rt, q, q.Group, func(c *Coordinator) kmsg.Response { return c.JoinGroup(clientContext(r), q) })
	})
