package group

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrorResponse returns the response to a group request with every group
// and partition in it failed with code. A broker that hosts several
// coordinators (cluster mode: one per partition of __consumer_offsets it
// leads) answers with it for a group it does not coordinate
// (NOT_COORDINATOR, so the client looks the coordinator up again) or
// is still loading (COORDINATOR_LOAD_IN_PROGRESS, so it retries). It
// returns nil for a request that is not a group request.
func ErrorResponse(req kmsg.Request, code int16) kmsg.Response {
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = code
		resp.Generation = -1
		resp.MemberID = r.MemberID
		return resp
	case *kmsg.SyncGroupRequest:
		resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.HeartbeatRequest:
		resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.LeaveGroupRequest:
		resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.OffsetCommitRequest:
		return offsetCommitResponse(r, code)
	case *kmsg.OffsetFetchRequest:
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = code
		for _, rt := range r.Topics {
			t := kmsg.NewOffsetFetchResponseTopic()
			t.Topic = rt.Topic
			for _, part := range rt.Partitions {
				p := kmsg.NewOffsetFetchResponseTopicPartition()
				p.Partition = part
				p.Offset = -1
				p.ErrorCode = code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		for _, rg := range r.Groups {
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group = rg.Group
			g.ErrorCode = code
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	case *kmsg.OffsetDeleteRequest:
		resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.DescribeGroupsRequest:
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, name := range r.Groups {
			g := kmsg.NewDescribeGroupsResponseGroup()
			g.Group = name
			g.ErrorCode = code
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	case *kmsg.DeleteGroupsRequest:
		resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
		for _, name := range r.Groups {
			g := kmsg.NewDeleteGroupsResponseGroup()
			g.Group = name
			g.ErrorCode = code
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	}
	return nil
}
