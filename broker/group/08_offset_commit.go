package group

// OffsetCommit, versions 0-8.
//
// Blocking: it waits for the disk (single broker) or a raft majority.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 8, Min: 0, Max: 8, Blocking: true},
	func(q *kmsg.OffsetCommitRequest) string { return q.Group },
	func(c *Coordinator, r *kapi.Request, q *kmsg.OffsetCommitRequest) kmsg.Response {
		// Read on each topic besides Read on the group (oneGroup).
		allowed, denied := kapi.SplitTopics(r, kmsg.ACLOperationRead, q.Topics, func(t *kmsg.OffsetCommitRequestTopic) string { return t.Topic })
		if denied == nil {
			return c.OffsetCommit(q)
		}
		sub, refused := *q, *q
		sub.Topics, refused.Topics = allowed, denied
		resp := c.OffsetCommit(&sub)
		resp.Topics = append(resp.Topics, offsetCommitResponse(&refused, kerr.TopicAuthorizationFailed.Code).Topics...)
		return resp
	})
