package group

// JoinGroup, versions 0-7.
//
// Blocking: it blocks until the group's rebalance moves on.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 11, Min: 0, Max: 7, Blocking: true},
	func(q *kmsg.JoinGroupRequest) string { return q.Group },
	func(c *Coordinator, r *kapi.Request, q *kmsg.JoinGroupRequest) kmsg.Response {
		return c.JoinGroup(clientContext(r), q)
	})
