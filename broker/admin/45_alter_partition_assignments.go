package admin

// AlterPartitionAssignments (KIP-455), version 0; cluster mode only (a
// single-node broker does not advertise it and answers INVALID_REQUEST).
//
// Runs on the controller leader (others answer NOT_CONTROLLER, and
// clients send it to the controller named in Metadata). Each partition's
// replica list becomes its reassignment target (OpReassign); the
// partition's raft leader then carries it out (the broker's reassign.go) and the
// answer does not wait for that: ListPartitionReassignments shows moves in
// progress. A null replica list (cancel) is refused: a move cannot be
// cancelled. Only partitions with two or more replicas (raft groups) can
// move, to two or more replicas.

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 45, Min: 0, Max: 0, ClusterOnly: true, Blocking: true}, kapi.Reply(handleAlterPartitionAssignments))

func handleAlterPartitionAssignments(b Broker, kr *kapi.Request, r *kmsg.AlterPartitionAssignmentsRequest, resp *kmsg.AlterPartitionAssignmentsResponse) {
	n, md, err := clusterController(b, kr, kmsg.ACLOperationAlter, "; partitions have one replica here")
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorOf(err)
		return
	}
	for _, rt := range r.Topics {
		st := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		st.Topic = rt.Topic
		ti := md.Topics[rt.Topic]
		for _, rp := range rt.Partitions {
			sp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			sp.Partition = rp.Partition
			if err := reassignPartition(kr.Ctx, b, n, ti, rt.Topic, rp.Partition, rp.Replicas); err != nil {
				sp.ErrorCode, sp.ErrorMessage = errorOf(err)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
}

func reassignPartition(ctx context.Context, b Broker, n *cluster.Node, ti *cluster.TopicInfo, topic string, part int32, replicas []int32) error {
	switch {
	case ti == nil || topic == OffsetsTopic:
		return fmt.Errorf("%w: topic %q does not exist or cannot be moved", kerr.UnknownTopicOrPartition, topic)
	case part < 0 || int(part) >= len(ti.Partitions):
		return fmt.Errorf("%w: topic %q has no partition %d", kerr.UnknownTopicOrPartition, topic, part)
	case replicas == nil:
		return fmt.Errorf("%w: a reassignment cannot be cancelled; reassign the partition again once it has finished", kerr.InvalidReplicaAssignment)
	}
	actx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	_, err := n.Apply(actx, cluster.Command{Op: cluster.OpReassign, Topic: topic, TopicID: ti.ID, Partition: part, Replicas: replicas})
	switch {
	case err == nil:
		b.Logger().Info("reassignment requested", "topic", topic, "partition", part, "target", replicas)
		return nil
	case errors.Is(err, cluster.ErrReassignment):
		return fmt.Errorf("%w: %v", kerr.InvalidReplicaAssignment, err)
	default:
		return ControllerError(err)
	}
}
