package broker

// Metadata, versions 0-11. This node is the only broker, the controller and
// every partition's leader (epoch 0). Topics named by a client that do not
// exist are created when auto-creation is on and the request allows it
// (v4+ AllowAutoTopicCreation; always for older versions).

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/partition"
)

var _ = apis.Add(kapi.API{Key: 3, Min: 0, Max: 11},
	func(b *Broker, r *kapi.Request) kmsg.Response {
		req := r.Msg.(*kmsg.MetadataRequest)
		mayCreate := func(topic string) error {
			if !r.Allowed(kmsg.ACLOperationDescribe, auth.Topic(topic)) || !kapi.MayCreateTopic(r, topic) {
				return fmt.Errorf("%w: %s may not create topic %s", kerr.TopicAuthorizationFailed, r.Principal, topic)
			}
			return nil
		}
		resp := b.handleMetadata(r.Ctx, r.Listener, req, mayCreate)
		if r.Authz != nil {
			hideTopics(r, resp, req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0))
		}
		return resp
	})

// hideTopics applies Describe on each topic of a Metadata answer, as
// Kafka does: a topic the principal may not describe is left out of a
// listing of all topics, and answered TOPIC_AUTHORIZATION_FAILED (without
// its partitions or id) when the request named it.
func hideTopics(r *kapi.Request, resp *kmsg.MetadataResponse, all bool) {
	kept := resp.Topics[:0]
	for _, mt := range resp.Topics {
		if mt.Topic == nil || r.Allowed(kmsg.ACLOperationDescribe, auth.Topic(*mt.Topic)) || mt.ErrorCode == kerr.TopicAuthorizationFailed.Code {
			kept = append(kept, mt)
			continue
		}
		if all {
			continue
		}
		denied := kmsg.NewMetadataResponseTopic()
		denied.Topic, denied.IsInternal = mt.Topic, mt.IsInternal
		denied.ErrorCode = kerr.TopicAuthorizationFailed.Code
		kept = append(kept, denied)
	}
	resp.Topics = kept
}

// brokerList is this broker at its address on the client's listener.
func (b *Broker) brokerList(listener string) []kmsg.MetadataResponseBroker {
	host, port := b.advertised(listener)
	br := kmsg.NewMetadataResponseBroker()
	br.NodeID, br.Host, br.Port = b.cfg.NodeID, host, port
	return []kmsg.MetadataResponseBroker{br}
}

// autoCreate reports whether a Metadata request may create the topics it
// names.
func autoCreate(cfg Config, r *kmsg.MetadataRequest) bool {
	return !cfg.DisableAutoCreate && (r.Version < 4 || r.AllowAutoTopicCreation)
}

// requestedTopics finds the topics a Metadata request names, single node
// and cluster alike: lookup finds one by name or id (nil: none); one named
// by name that is missing is made by create when it is set (a nil topic:
// still missing), and its error is answered for that topic. A topic still
// missing is answered UNKNOWN_TOPIC_OR_PARTITION.
func requestedTopics[T any](reqs []kmsg.MetadataRequestTopic, lookup func(kmsg.MetadataRequestTopic) *T, create func(string) (*T, error)) (found []*T, missing []kmsg.MetadataResponseTopic) {
	for _, rt := range reqs {
		t := lookup(rt)
		if t == nil && rt.Topic != nil && create != nil {
			var err error
			if t, err = create(*rt.Topic); err != nil {
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
		found = append(found, t)
	}
	return found, missing
}

// handleMetadata answers r; a topic it would auto-create is created only
// if mayCreate (the authorizer's Create) returns nil, else answered with
// its error.
func (b *Broker) handleMetadata(ctx context.Context, listener string, r *kmsg.MetadataRequest, mayCreate func(string) error) *kmsg.MetadataResponse {
	if b.cluster != nil {
		return b.handleClusterMetadata(ctx, listener, r, mayCreate)
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
		lookup := func(rt kmsg.MetadataRequestTopic) *topic {
			switch {
			case rt.Topic != nil:
				return b.topic(*rt.Topic)
			case rt.TopicID != [16]byte{}:
				return b.topicByID(rt.TopicID)
			}
			return nil
		}
		var create func(string) (*topic, error)
		if autoCreate(b.cfg, r) {
			create = func(name string) (*topic, error) {
				err := mayCreate(name)
				var t *topic
				if err == nil {
					t, err = b.createTopic(name, -1, -1, nil, false)
				}
				if err != nil && errors.Is(err, kerr.TopicAlreadyExists) {
					t, err = b.topic(name), nil
				}
				return t, err
			}
		}
		topics, missing = requestedTopics(r.Topics, lookup, create)
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
