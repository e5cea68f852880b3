package admin

// ListPartitionReassignments (KIP-455), version 0; cluster mode only.
// Answers from the controller metadata on the controller leader: for each
// partition moving, its replicas (old and new), the replicas being added
// and those being removed.

import (
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 46, Min: 0, Max: 0, ClusterOnly: true}, kapi.Reply(handleListPartitionReassignments))

func handleListPartitionReassignments(b Broker, kr *kapi.Request, r *kmsg.ListPartitionReassignmentsRequest, resp *kmsg.ListPartitionReassignmentsResponse) {
	_, md, err := clusterController(b, kr, kmsg.ACLOperationDescribe, "")
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorOf(err)
		return
	}
	want := map[string][]int32{} // nil slice: every partition
	if r.Topics == nil {
		for name := range md.Topics {
			want[name] = nil
		}
	}
	for _, rt := range r.Topics {
		want[rt.Topic] = append(want[rt.Topic], rt.Partitions...)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		ti := md.Topics[name]
		if ti == nil {
			continue
		}
		st := kmsg.NewListPartitionReassignmentsResponseTopic()
		st.Topic = name
		for i, a := range ti.Partitions {
			if a.Target == nil || (want[name] != nil && !slices.Contains(want[name], int32(i))) {
				continue
			}
			sp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
			sp.Partition = int32(i)
			sp.Replicas = a.Members()
			for _, t := range a.Target {
				if !slices.Contains(a.Replicas, t) {
					sp.AddingReplicas = append(sp.AddingReplicas, t)
				}
			}
			for _, o := range a.Replicas {
				if !slices.Contains(a.Target, o) {
					sp.RemovingReplicas = append(sp.RemovingReplicas, o)
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		if len(st.Partitions) > 0 {
			resp.Topics = append(resp.Topics, st)
		}
	}
}
