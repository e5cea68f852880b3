package group

// OffsetCommit, versions 0-8.
//
// Blocking: it waits for the disk (single broker) or a raft majority.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 8, Min: 0, Max: 8, Blocking: true},
	func(rt Router, r *kapi.Request) kmsg.Response {
		q := r.Msg.(*kmsg.OffsetCommitRequest)
		return routeOne(rt, q, q.Group, func(c *Coordinator) kmsg.Response { return c.OffsetCommit(q) })
	})
