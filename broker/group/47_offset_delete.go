package group

// OffsetDelete, version 0.
//
// Blocking: it waits for the disk (single broker) or a raft majority.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 47, Min: 0, Max: 0, Blocking: true},
	func(q *kmsg.OffsetDeleteRequest) string { return q.Group },
	func(c *Coordinator, r *kapi.Request, q *kmsg.OffsetDeleteRequest) kmsg.Response {
		// Read on each topic besides Delete on the group (oneGroup).
		allowed, denied := kapi.SplitTopics(r, kmsg.ACLOperationRead, q.Topics, func(t *kmsg.OffsetDeleteRequestTopic) string { return t.Topic })
		if denied == nil {
			return c.OffsetDelete(q)
		}
		sub := *q
		sub.Topics = allowed
		resp := c.OffsetDelete(&sub)
		resp.Topics = append(resp.Topics, offsetDeleteTopics(denied, kerr.TopicAuthorizationFailed.Code)...)
		return resp
	})
