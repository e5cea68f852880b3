package auth

import (
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Resource is what an operation is done on: a topic, a group, the
// cluster (named ClusterResourceName) or a transactional id.
type Resource struct {
	Type ResourceType
	Name string
}

// Topic, Group, Cluster and TransactionalID name resources.
func Topic(name string) Resource { return Resource{kmsg.ACLResourceTypeTopic, name} }
func Group(name string) Resource { return Resource{kmsg.ACLResourceTypeGroup, name} }
func TransactionalID(name string) Resource {
	return Resource{kmsg.ACLResourceTypeTransactionalId, name}
}

// Cluster is the cluster resource.
var Cluster = Resource{kmsg.ACLResourceTypeCluster, ClusterResourceName}

// Authorizer decides whether principal p, connected from host, may do op
// on res. A handler asks it before acting and answers Kafka's
// *_AUTHORIZATION_FAILED code when it says no.
type Authorizer interface {
	Authorize(p Principal, host string, op Operation, res Resource) bool
}

// ACLAuthorizer is Kafka's ACL authorizer (kafka.security.authorizer.
// AclAuthorizer), deciding in this order:
//
//  1. a superuser may do everything;
//  2. with no ACL at all on the resource (literal name, literal "*" or a
//     prefix of the name), the answer is AllowEveryoneIfNoACLFound;
//  3. a DENY ACL for the principal (or User:*), the host (or *) and the
//     operation (or ALL) refuses: deny wins over allow;
//  4. an ALLOW ACL for the principal, the host and the operation, an
//     operation implying it (see Implies) or ALL permits;
//  5. otherwise refused.
type ACLAuthorizer struct {
	// ACLs returns the current ACLs; the authorizer does not change or
	// keep the slice.
	ACLs func() []ACL
	// SuperUsers may do everything (--superusers).
	SuperUsers []Principal
	// AllowEveryoneIfNoACLFound is allow.everyone.if.no.acl.found.
	AllowEveryoneIfNoACLFound bool
}

// Authorize implements Authorizer.
func (z *ACLAuthorizer) Authorize(p Principal, host string, op Operation, res Resource) bool {
	if slices.Contains(z.SuperUsers, p) {
		return true
	}
	found, allowed := false, false
	for _, a := range z.ACLs() {
		if a.ResourceType != res.Type || !patternApplies(a, res.Name) {
			continue
		}
		found = true
		if (a.Principal != p && a.Principal != WildcardPrincipal) || (a.Host != host && a.Host != Wildcard) {
			continue
		}
		switch a.Permission {
		case kmsg.ACLPermissionTypeDeny:
			if a.Operation == op || a.Operation == kmsg.ACLOperationAll {
				return false
			}
		case kmsg.ACLPermissionTypeAllow:
			allowed = allowed || Implies(a.Operation, op)
		}
	}
	if !found {
		return z.AllowEveryoneIfNoACLFound
	}
	return allowed
}

// Implies reports whether an ALLOW ACL for granted permits op, as Kafka
// implies operations: ALL permits every operation, DESCRIBE is implied by
// READ, WRITE, DELETE and ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS.
func Implies(granted, op Operation) bool {
	if granted == op || granted == kmsg.ACLOperationAll {
		return true
	}
	switch op {
	case kmsg.ACLOperationDescribe:
		switch granted {
		case kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDelete, kmsg.ACLOperationAlter:
			return true
		}
	case kmsg.ACLOperationDescribeConfigs:
		return granted == kmsg.ACLOperationAlterConfigs
	}
	return false
}

// TypeAuthorizer is an Authorizer that also answers Kafka's
// authorizeByResourceType: may the principal do op on some resource of a
// type. InitProducerId asks it for an idempotent producer without
// IdempotentWrite on the cluster (Write on any topic will do).
type TypeAuthorizer interface {
	AuthorizeAny(p Principal, host string, op Operation, t ResourceType) bool
}

// AuthorizeAny implements TypeAuthorizer as Kafka's default does: a
// superuser may; with no ACL of the type at all the answer is
// AllowEveryoneIfNoACLFound; else an ALLOW ACL for the principal, host and
// operation must name some resource that no DENY of the same (a DENY on
// the literal "*", the same literal name, or a prefix of the allowed name)
// takes back.
func (z *ACLAuthorizer) AuthorizeAny(p Principal, host string, op Operation, t ResourceType) bool {
	if slices.Contains(z.SuperUsers, p) {
		return true
	}
	var allows, denies []ACL
	found := false
	for _, a := range z.ACLs() {
		if a.ResourceType != t {
			continue
		}
		found = true
		if (a.Principal != p && a.Principal != WildcardPrincipal) || (a.Host != host && a.Host != Wildcard) {
			continue
		}
		switch {
		case a.Permission == kmsg.ACLPermissionTypeDeny && (a.Operation == op || a.Operation == kmsg.ACLOperationAll):
			denies = append(denies, a)
		case a.Permission == kmsg.ACLPermissionTypeAllow && Implies(a.Operation, op):
			allows = append(allows, a)
		}
	}
	if !found {
		return z.AllowEveryoneIfNoACLFound
	}
	for _, a := range allows {
		if !slices.ContainsFunc(denies, func(d ACL) bool { return denyCovers(d, a) }) {
			return true
		}
	}
	return false
}

// denyCovers reports whether DENY d refuses every resource ALLOW a names.
func denyCovers(d, a ACL) bool {
	switch d.PatternType {
	case kmsg.ACLResourcePatternTypeLiteral:
		return d.ResourceName == Wildcard || (a.PatternType == kmsg.ACLResourcePatternTypeLiteral && d.ResourceName == a.ResourceName)
	case kmsg.ACLResourcePatternTypePrefixed:
		return strings.HasPrefix(a.ResourceName, d.ResourceName)
	}
	return false
}
