package admin

// CreatePartitions, versions 0-3: grow a topic's partition count.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 37, Min: 0, Max: 3}, kapi.Reply(handleCreatePartitions))

func handleCreatePartitions(b Broker, kr *kapi.Request, r *kmsg.CreatePartitionsRequest, resp *kmsg.CreatePartitionsResponse) {
	for _, rt := range r.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		if !kr.Allowed(kmsg.ACLOperationAlter, auth.Topic(rt.Topic)) {
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
		} else if err := b.CreatePartitions(rt.Topic, rt.Count, r.ValidateOnly); err != nil {
			st.ErrorCode, st.ErrorMessage = errorOf(err)
		}
		resp.Topics = append(resp.Topics, st)
	}
}
