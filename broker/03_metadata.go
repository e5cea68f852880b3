package broker

// Metadata, versions 0-11. This node is the only broker, the controller and
// every partition's leader (epoch 0). Topics named by a client that do not
// exist are created when auto-creation is on and the request allows it
// (v4+ AllowAutoTopicCreation; always for older versions).

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/partition"
)

var _ = apis.Add(kapi.API{Key: 3, Min: 0, Max: 11},
	func(b *Broker, r *kapi.Request) kmsg.Response {
		return b.handleMetadata(r.Ctx, r.Listener, r.Msg.(*kmsg.MetadataRequest))
	})

// brokerList is this broker at its address on the client's listener.
func (b *Broker) brokerList(listener string) []kmsg.MetadataResponseBroker {
	host, port := b.advertised(listener)
	br := kmsg.NewMetadataResponseBroker()
	br.NodeID, br.Host, br.Port = b.cfg.NodeID, host, port
	return []kmsg.MetadataResponseBroker{br}
}

func (b *Broker) handleMetadata(ctx context.Context, listener string, r *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	if b.cluster != nil {
		return b.handleClusterMetadata(ctx, listener, r)
	}
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	resp.Version = r.Version
	resp.Brokers = b.brokerList(listener)
	resp.ClusterID = &b.clusterID
	resp.ControllerID = b.cfg.NodeID

	var topics []*topic
	var missing []kmsg.MetadataResponseTopic
	if r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0) {
		topics = b.allTopics()
	} else {
		autoCreate := !b.cfg.DisableAutoCreate && (r.Version < 4 || r.AllowAutoTopicCreation)
		for _, rt := range r.Topics {
			var t *topic
			switch {
			case rt.Topic != nil:
				t = b.topic(*rt.Topic)
			case rt.TopicID != [16]byte{}:
				t = b.topicByID(rt.TopicID)
			}
			if t == nil && rt.Topic != nil && autoCreate {
				var err error
				t, err = b.createTopic(*rt.Topic, -1, -1, nil, false)
				if err != nil && errors.Is(err, kerr.TopicAlreadyExists) {
					t, err = b.topic(*rt.Topic), nil
				}
				if err != nil {
					mt := kmsg.NewMetadataResponseTopic()
					mt.Topic = rt.Topic
					mt.ErrorCode = kapi.ErrorCode(err)
					missing = append(missing, mt)
					continue
				}
			}
			if t == nil {
				mt := kmsg.NewMetadataResponseTopic()
				mt.Topic, mt.TopicID = rt.Topic, rt.TopicID
				mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
				missing = append(missing, mt)
				continue
			}
			topics = append(topics, t)
		}
	}
	for _, t := range topics {
		mt := kmsg.NewMetadataResponseTopic()
		name := t.name
		mt.Topic = &name
		mt.TopicID = t.id
		mt.IsInternal = t.name == offsetsTopic || t.name == txnStateTopic
		mt.AuthorizedOperations = -2147483648
		for i := range t.parts {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition = int32(i)
			mp.Leader = b.cfg.NodeID
			mp.LeaderEpoch = partition.UnreplicatedEpoch
			mp.Replicas = []int32{b.cfg.NodeID}
			mp.ISR = []int32{b.cfg.NodeID}
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	resp.Topics = append(resp.Topics, missing...)
	resp.AuthorizedOperations = -2147483648
	return resp
}
