package broker

// ListOffsets, versions 1-6: -2 earliest (log start offset), -1 latest (high
// watermark), -3 max timestamp, otherwise the first offset whose batch has a
// timestamp >= the requested one (the time index answers it). With
// isolation level 1 (read_committed, v2+) the last stable offset takes the
// high watermark's place.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.Add(kapi.API{Key: 2, Min: 1, Max: 6}, kapi.Typed(
	func(b *Broker, r *kapi.Request, req *kmsg.ListOffsetsRequest) kmsg.Response {
		return b.handleListOffsets(req, kapi.DeniedTopics(r, kmsg.ACLOperationDescribe, req.Topics, func(t *kmsg.ListOffsetsRequestTopic) string { return t.Topic }))
	}))

// handleListOffsets answers TOPIC_AUTHORIZATION_FAILED for the denied
// topics (no Describe).
func (b *Broker) handleListOffsets(r *kmsg.ListOffsetsRequest, denied map[string]bool) *kmsg.ListOffsetsResponse {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	resp.Version = r.Version
	for _, rt := range r.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			part, code := b.readablePartition(denied, rt.Topic, rp.Partition, rp.CurrentLeaderEpoch)
			sp.ErrorCode = code
			if code == 0 {
				hw := part.HighWatermark()
				if r.Version >= 2 && r.IsolationLevel == 1 {
					hw = part.LastStableOffset(hw)
				}
				sp.LeaderEpoch = part.LeaderEpoch()
				switch rp.Timestamp {
				case -2:
					sp.Offset = part.Log().StartOffset()
				case -1:
					sp.Offset = hw
				case -3:
					off, ts := part.Log().MaxTimestamp()
					if off >= 0 && off < hw {
						sp.Offset, sp.Timestamp = off, ts
					}
				default:
					if off, ts, ok := part.Log().OffsetForTimestamp(rp.Timestamp); ok && off < hw {
						sp.Offset, sp.Timestamp = max(off, part.Log().StartOffset()), ts
					}
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
