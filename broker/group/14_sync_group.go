package group

// SyncGroup, versions 0-5.
//
// Blocking: it blocks until the group's rebalance moves on.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 14, Min: 0, Max: 5, Blocking: true},
	func(rt Router, r *kapi.Request) kmsg.Response {
		q := r.Msg.(*kmsg.SyncGroupRequest)
		return routeOne(rt, q, q.Group, func(c *Coordinator) kmsg.Response { return c.SyncGroup(clientContext(r), q) })
	})
