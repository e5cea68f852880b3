package admin

// DeleteRecords, versions 0-2: advance a partition's log start offset
// (-1 means the high watermark). The new start is checkpointed durably by
// the log before the response.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 21, Min: 0, Max: 2, Blocking: true}, kapi.Reply(handleDeleteRecords))

// handleDeleteRecords answers TOPIC_AUTHORIZATION_FAILED for the topics
// the principal may not Delete.
func handleDeleteRecords(b Broker, kr *kapi.Request, r *kmsg.DeleteRecordsRequest, resp *kmsg.DeleteRecordsResponse) {
	denied := kapi.DeniedTopics(kr, kmsg.ACLOperationDelete, r.Topics, func(t *kmsg.DeleteRecordsRequestTopic) string { return t.Topic })
	for _, rt := range r.Topics {
		st := kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewDeleteRecordsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LowWatermark = -1
			if denied[rt.Topic] {
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			part := b.Partition(rt.Topic, rp.Partition)
			if b.Internal(rt.Topic) {
				// Deleting records here would silently drop committed
				// offsets; use DeleteGroups or OffsetDelete.
				sp.ErrorCode = kerr.InvalidRequest.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			if part == nil {
				sp.ErrorCode = b.AbsentPartitionCode(rt.Topic, rp.Partition)
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			hw := part.HighWatermark()
			off := rp.Offset
			if off == -1 {
				off = hw
			}
			if off > hw && off <= part.Log().EndOffset() {
				// Acknowledged (acks=1) but not yet durable: make it
				// durable first, as a client that just produced expects
				// to be able to delete up to what it was told.
				if err := part.Commit(kr.Ctx, off-1); err == nil {
					hw = part.HighWatermark()
				}
			}
			if off < 0 || off > hw {
				sp.ErrorCode = kerr.OffsetOutOfRange.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			start, err := part.Log().DeleteRecords(off)
			if err != nil {
				b.Logger().Error("cannot delete records", "topic", rt.Topic, "partition", rp.Partition, "offset", off, "err", err)
				sp.ErrorCode = kerr.KafkaStorageError.Code
			} else {
				sp.LowWatermark = start
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
}
