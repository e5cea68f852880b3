package broker

// ListPartitionReassignments (KIP-455), version 0; cluster mode only.
// Answers from the controller metadata on the controller leader: for each
// partition moving, its replicas (old and new), the replicas being added
// and those being removed.

import (
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.Add(kapi.API{Key: 46, Min: 0, Max: 0, ClusterOnly: true},
	func(b *Broker, r *kapi.Request) kmsg.Response {
		return b.handleListPartitionReassignments(r.Msg.(*kmsg.ListPartitionReassignmentsRequest))
	})

func (b *Broker) handleListPartitionReassignments(r *kmsg.ListPartitionReassignmentsRequest) *kmsg.ListPartitionReassignmentsResponse {
	resp := r.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	resp.Version = r.Version
	fail := func(err error) *kmsg.ListPartitionReassignmentsResponse {
		resp.ErrorCode = kerrCode(err)
		msg := err.Error()
		resp.ErrorMessage = &msg
		return resp
	}
	if b.cluster == nil {
		return fail(fmt.Errorf("%w: this broker is not part of a cluster", kerr.InvalidRequest))
	}
	if !b.cluster.IsLeader() {
		return fail(notControllerErr())
	}
	md := b.cluster.Metadata()
	want := map[string][]int32{} // nil slice: every partition
	if r.Topics == nil {
		for name := range md.Topics {
			want[name] = nil
		}
	}
	for _, rt := range r.Topics {
		want[rt.Topic] = append(want[rt.Topic], rt.Partitions...)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
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
	return resp
}
