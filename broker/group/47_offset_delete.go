package group

// OffsetDelete, version 0.
//
// Blocking: it waits for the disk (single broker) or a raft majority.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 47, Min: 0, Max: 0, Blocking: true},
	func(rt Router, r *kapi.Request) kmsg.Response {
		q := r.Msg.(*kmsg.OffsetDeleteRequest)
		return routeOne(rt, q, q.Group, func(c *Coordinator) kmsg.Response { return c.OffsetDelete(q) })
	})
