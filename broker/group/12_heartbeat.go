package group

// Heartbeat, versions 0-4.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 12, Min: 0, Max: 4},
	func(q *kmsg.HeartbeatRequest) string { return q.Group },
	func(c *Coordinator, r *kapi.Request, q *kmsg.HeartbeatRequest) kmsg.Response { return c.Heartbeat(q) })
