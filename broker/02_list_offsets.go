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

var _ = apis.Add(kapi.API{Key: 2, Min: 1, Max: 6},
	func(b *Broker, r *kapi.Request) kmsg.Response {
		return b.handleListOffsets(r.Msg.(*kmsg.ListOffsetsRequest))
	})

func (b *Broker) handleListOffsets(r *kmsg.ListOffsetsRequest) *kmsg.ListOffsetsResponse {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	resp.Version = r.Version
	for _, rt := range r.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			part := b.partition(rt.Topic, rp.Partition)
			switch {
			case part == nil:
				sp.ErrorCode = b.absentPartitionCode(rt.Topic, rp.Partition)
			case part.checkLeaderEpoch(rp.CurrentLeaderEpoch) != 0:
				sp.ErrorCode = part.checkLeaderEpoch(rp.CurrentLeaderEpoch)
			default:
				hw := part.highWatermark()
				if r.Version >= 2 && r.IsolationLevel == 1 {
					hw = part.lastStableOffset(hw)
				}
				sp.LeaderEpoch = part.leaderEpoch()
				switch rp.Timestamp {
				case -2:
					sp.Offset = part.log.StartOffset()
				case -1:
					sp.Offset = hw
				case -3:
					off, ts := part.log.MaxTimestamp()
					if off >= 0 && off < hw {
						sp.Offset, sp.Timestamp = off, ts
					}
				default:
					if off, ts, ok := part.log.OffsetForTimestamp(rp.Timestamp); ok && off < hw {
						sp.Offset, sp.Timestamp = max(off, part.log.StartOffset()), ts
					}
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
