package group

// OffsetFetch, versions 0-7.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 9, Min: 0, Max: 7},
	func(c *Coordinator, r *kapi.Request, q *kmsg.OffsetFetchRequest) kmsg.Response {
		return c.OffsetFetch(q)
	})
