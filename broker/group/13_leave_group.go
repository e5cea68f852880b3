package group

// LeaveGroup, versions 0-4.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 13, Min: 0, Max: 4},
	func(q *kmsg.LeaveGroupRequest) string { return q.Group },
	func(c *Coordinator, r *kapi.Request, q *kmsg.LeaveGroupRequest) kmsg.Response { return c.LeaveGroup(q) })
