package group

// OffsetCommit, versions 0-8.
//
// Blocking: it waits for the disk (single broker) or a raft majority.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 8, Min: 0, Max: 8, Blocking: true},
	func(c *Coordinator, r *kapi.Request, q *kmsg.OffsetCommitRequest) kmsg.Response {
		return c.OffsetCommit(q)
	})
