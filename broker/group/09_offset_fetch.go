package group

// OffsetFetch, versions 0-7.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 9, Min: 0, Max: 7},
	func(rt Router, r *kapi.Request) kmsg.Response {
		q := r.Msg.(*kmsg.OffsetFetchRequest)
		return routeOne(rt, q, q.Group, func(c *Coordinator) kmsg.Response { return c.OffsetFetch(q) })
	})
