package group

// OffsetFetch, versions 0-7.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = oneGroup(kapi.API{Key: 9, Min: 0, Max: 7},
	func(q *kmsg.OffsetFetchRequest) string { return q.Group },
	func(c *Coordinator, r *kapi.Request, q *kmsg.OffsetFetchRequest) kmsg.Response {
		// Describe on each topic besides Describe on the group
		// (oneGroup): a named topic without it is answered
		// TOPIC_AUTHORIZATION_FAILED, a topic of the group's "all
		// topics" answer is left out.
		if r.Authz == nil {
			return c.OffsetFetch(q)
		}
		name := func(t *kmsg.OffsetFetchResponseTopic) string { return t.Topic }
		if q.Topics == nil {
			resp := c.OffsetFetch(q)
			resp.Topics, _ = kapi.SplitTopics(r, kmsg.ACLOperationDescribe, resp.Topics, name)
			return resp
		}
		allowed, denied := kapi.SplitTopics(r, kmsg.ACLOperationDescribe, q.Topics, func(t *kmsg.OffsetFetchRequestTopic) string { return t.Topic })
		sub, refused := *q, *q
		sub.Topics, refused.Topics = allowed, denied
		if sub.Topics == nil {
			sub.Topics = []kmsg.OffsetFetchRequestTopic{} // not nil: that would ask for every topic
		}
		resp := c.OffsetFetch(&sub)
		resp.Topics = append(resp.Topics, ErrorResponse(&refused, kerr.TopicAuthorizationFailed.Code).(*kmsg.OffsetFetchResponse).Topics...)
		return resp
	})
