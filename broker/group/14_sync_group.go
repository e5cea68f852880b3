package group

// SyncGroup, versions 0-5.
//
// Blocking: it blocks until the group's rebalance moves on.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 14, Min: 0, Max: 5, Blocking: true},
	func(q *kmsg.SyncGroupRequest) string { return q.Group },
	func(c *Coordinator, r *kapi.Request, q *kmsg.SyncGroupRequest) kmsg.Response {
		return c.SyncGroup(clientContext(r), q)
	})
