package broker

// OffsetForLeaderEpoch, versions 0-4. A single node has one leader epoch
// (0), so the end offset of epoch 0 is the high watermark and a later
// epoch is unknown.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.Add(kapi.API{Key: 23, Min: 0, Max: 4}, kapi.Typed(
	func(b *Broker, r *kapi.Request, req *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
		return b.handleOffsetForLeaderEpoch(req, kapi.DeniedTopics(r, kmsg.ACLOperationDescribe, req.Topics, func(t *kmsg.OffsetForLeaderEpochRequestTopic) string { return t.Topic }))
	}))

// handleOffsetForLeaderEpoch answers TOPIC_AUTHORIZATION_FAILED for the
// denied topics (no Describe).
func (b *Broker) handleOffsetForLeaderEpoch(r *kmsg.OffsetForLeaderEpochRequest, denied map[string]bool) *kmsg.OffsetForLeaderEpochResponse {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	resp.Version = r.Version
	for _, rt := range r.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LeaderEpoch, sp.EndOffset = -1, -1
			part, code := b.readablePartition(denied, rt.Topic, rp.Partition, rp.CurrentLeaderEpoch)
			switch {
			case code != 0:
				sp.ErrorCode = code
			case rp.LeaderEpoch > part.LeaderEpoch():
				// Undefined epoch and offset: the client's epoch is newer.
			default:
				sp.LeaderEpoch = part.LeaderEpoch()
				sp.EndOffset = part.HighWatermark()
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
