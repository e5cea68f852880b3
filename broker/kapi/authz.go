package kapi

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
)

// DeniedTopics is the set of topics among a request's the principal may
// not do op on, name reading each topic's name; nil (nothing denied, no
// map) without an authorizer, so the handlers' lookups cost nothing when
// --authorizer is none.
func DeniedTopics[T any](r *Request, op auth.Operation, topics []T, name func(*T) string) map[string]bool {
	if r.Authz == nil {
		return nil
	}
	var denied map[string]bool
	for i := range topics {
		n := name(&topics[i])
		if _, seen := denied[n]; seen {
			continue
		}
		if !r.Allowed(op, auth.Topic(n)) {
			if denied == nil {
				denied = map[string]bool{}
			}
			denied[n] = true
		}
	}
	return denied
}

// SplitTopics divides a request's topics into those the principal may do
// op on and those it may not; denied is nil when every one is allowed
// (allowed is then topics itself).
func SplitTopics[T any](r *Request, op auth.Operation, topics []T, name func(*T) string) (allowed, denied []T) {
	d := DeniedTopics(r, op, topics, name)
	if d == nil {
		return topics, nil
	}
	for _, t := range topics {
		if d[name(&t)] {
			denied = append(denied, t)
		} else {
			allowed = append(allowed, t)
		}
	}
	return allowed, denied
}

// MayCreateTopic reports whether the principal may create topic: Create on
// the cluster or on the topic, as Kafka's CreateTopics and auto-creation
// require.
func MayCreateTopic(r *Request, topic string) bool {
	return r.Allowed(kmsg.ACLOperationCreate, auth.Cluster) || r.Allowed(kmsg.ACLOperationCreate, auth.Topic(topic))
}

// AllowedAny reports whether the principal may do op on some resource of
// type t (Kafka's authorizeByResourceType); an authorizer that cannot tell
// says no.
func (r *Request) AllowedAny(op auth.Operation, t auth.ResourceType) bool {
	if r.Authz == nil {
		return true
	}
	z, ok := r.Authz.(auth.TypeAuthorizer)
	return ok && z.AuthorizeAny(r.Principal, r.Host, op, t)
}
