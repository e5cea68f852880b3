package admin

// DeleteTopics, versions 0-6 (v6 names topics by name or id). Deleting a
// topic removes its partition directories and its groups' committed offsets.
// The internal __consumer_offsets cannot be deleted (INVALID_REQUEST).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 20, Min: 0, Max: 6}, kapi.Reply(handleDeleteTopics))

func handleDeleteTopics(b Broker, kr *kapi.Request, r *kmsg.DeleteTopicsRequest, resp *kmsg.DeleteTopicsResponse) {
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if r.Version >= 6 {
		for _, t := range r.Topics {
			targets = append(targets, target{name: t.Topic, id: t.TopicID})
		}
	} else {
		for i := range r.TopicNames {
			targets = append(targets, target{name: &r.TopicNames[i]})
		}
	}
	for _, tg := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = tg.name, tg.id
		name := ""
		switch {
		case tg.name != nil:
			name = *tg.name
		case tg.id != [16]byte{}:
			if n, ok := b.TopicByID(tg.id); ok {
				name = n
				st.Topic = &n
			}
		}
		if name != "" && !kr.Allowed(kmsg.ACLOperationDelete, auth.Topic(name)) {
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
		} else if name == "" {
			if tg.id != [16]byte{} {
				st.ErrorCode = kerr.UnknownTopicID.Code
			} else {
				st.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
		} else if t, ok := b.Topic(name); ok {
			st.TopicID = t.ID
			if err := b.DeleteTopic(name); err != nil {
				st.ErrorCode, st.ErrorMessage = errorOf(err)
			}
		} else {
			st.ErrorCode = kerr.UnknownTopicOrPartition.Code
		}
		resp.Topics = append(resp.Topics, st)
	}
}
