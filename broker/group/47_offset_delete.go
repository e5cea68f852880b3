package group

// OffsetDelete, version 0.
//
// Blocking: it waits for the disk (single broker) or a raft majority.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 47, Min: 0, Max: 0, Blocking: true},
	func(c *Coordinator, r *kapi.Request, q *kmsg.OffsetDeleteRequest) kmsg.Response {
		return c.OffsetDelete(q)
	})
