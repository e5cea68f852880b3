package admin

// CreateTopics, versions 0-7. A single node takes replication factor 1 (or
// -1 for the default); explicit replica assignments must name this node.
// In cluster mode only the controller leader creates topics (others answer
// NOT_CONTROLLER), with replication factor 1 and no explicit assignment.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 19, Min: 0, Max: 7}, kapi.Reply(handleCreateTopics))

func handleCreateTopics(b Broker, kr *kapi.Request, r *kmsg.CreateTopicsRequest, resp *kmsg.CreateTopicsResponse) {
	seen := map[string]int{}
	for _, rt := range r.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range r.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		st.NumPartitions, st.ReplicationFactor = -1, -1
		configs := map[string]*string{}
		for _, c := range rt.Configs {
			configs[c.Name] = c.Value
		}
		parts := rt.NumPartitions
		var err error
		switch {
		case !kapi.MayCreateTopic(kr, rt.Topic):
			err = fmt.Errorf("%w: %s may not create topic %s", kerr.TopicAuthorizationFailed, kr.Principal, rt.Topic)
		case seen[rt.Topic] > 1:
			err = fmt.Errorf("%w: topic %q appears more than once in the request", kerr.InvalidRequest, rt.Topic)
		case len(rt.ReplicaAssignment) > 0 && b.Cluster() != nil:
			err = fmt.Errorf("%w: explicit replica assignments are not supported in cluster mode yet; give a partition count and the controller places the partitions", kerr.InvalidReplicaAssignment)
		case len(rt.ReplicaAssignment) > 0:
			if rt.NumPartitions != -1 || rt.ReplicationFactor != -1 {
				err = fmt.Errorf("%w: give either a replica assignment or partitions and replication factor", kerr.InvalidRequest)
				break
			}
			parts = int32(len(rt.ReplicaAssignment))
			for _, a := range rt.ReplicaAssignment {
				if len(a.Replicas) != 1 || a.Replicas[0] != b.NodeID() {
					err = fmt.Errorf("%w: partition %d assigned to %v; the only broker is %d", kerr.InvalidReplicaAssignment, a.Partition, a.Replicas, b.NodeID())
				}
			}
		}
		var t Topic
		if err == nil {
			t, err = b.CreateTopic(rt.Topic, parts, rt.ReplicationFactor, configs, r.ValidateOnly)
		}
		if err != nil {
			st.ErrorCode, st.ErrorMessage = errorOf(err)
		} else {
			st.TopicID = t.ID
			st.NumPartitions = int32(t.Partitions)
			st.ReplicationFactor = t.ReplicationFactor
			defaults := b.TopicDefaults()
			for _, name := range topicConfigNames() {
				v, src := TopicConfig(defaults, t.Configs, name)
				c := kmsg.NewCreateTopicsResponseTopicConfig()
				c.Name, c.Value, c.Source = name, &v, int8(src)
				st.Configs = append(st.Configs, c)
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
}
