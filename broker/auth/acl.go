package auth

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Operation, ResourceType, PatternType and Permission are Kafka's ACL
// enums as kmsg numbers and names them (JSON and flags use the names:
// "READ", "TOPIC", "PREFIXED", "ALLOW").
type (
	Operation    = kmsg.ACLOperation
	ResourceType = kmsg.ACLResourceType
	PatternType  = kmsg.ACLResourcePatternType
	Permission   = kmsg.ACLPermissionType
)

// ClusterResourceName is the only name of the cluster resource.
const ClusterResourceName = "kafka-cluster"

// Wildcard, as a literal resource name, a principal or a host, matches
// every one.
const Wildcard = "*"

// WildcardPrincipal is the principal an ACL names to apply to every user.
const WildcardPrincipal Principal = "User:*"

// ACL is one access control entry bound to a resource pattern, as Kafka's
// CreateAcls carries it: Principal may (Allow) or may not (Deny) do
// Operation on the resources the pattern names, from Host.
type ACL struct {
	ResourceType ResourceType `json:"resource_type"`
	ResourceName string       `json:"resource_name"`
	PatternType  PatternType  `json:"pattern_type"`
	Principal    Principal    `json:"principal"`
	Host         string       `json:"host"`
	Operation    Operation    `json:"operation"`
	Permission   Permission   `json:"permission"`
}

// ErrInvalidACL is what Validate returns (wrapped with the reason).
var ErrInvalidACL = errors.New("invalid acl")

// Validate reports why a could not be created, as Kafka checks a new
// binding: a concrete resource type, a literal or prefixed pattern with a
// name (the cluster's is kafka-cluster), a concrete operation and
// permission, a principal of the form Type:name and a host.
func (a ACL) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidACL, fmt.Sprintf(format, args...))
	}
	switch a.ResourceType {
	case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeCluster,
		kmsg.ACLResourceTypeTransactionalId, kmsg.ACLResourceTypeDelegationToken, kmsg.ACLResourceTypeUser:
	default:
		return bad("resource type %s cannot be used in an acl", a.ResourceType)
	}
	if a.PatternType != kmsg.ACLResourcePatternTypeLiteral && a.PatternType != kmsg.ACLResourcePatternTypePrefixed {
		return bad("pattern type %s: an acl is LITERAL or PREFIXED", a.PatternType)
	}
	if a.ResourceName == "" {
		return bad("empty resource name")
	}
	if a.ResourceType == kmsg.ACLResourceTypeCluster && (a.ResourceName != ClusterResourceName || a.PatternType != kmsg.ACLResourcePatternTypeLiteral) {
		return bad("the cluster resource is the literal %q, not %s %q", ClusterResourceName, a.PatternType, a.ResourceName)
	}
	if a.Operation <= kmsg.ACLOperationAny || a.Operation > kmsg.ACLOperationDescribeTokens {
		return bad("operation %s cannot be used in an acl", a.Operation)
	}
	if a.Permission != kmsg.ACLPermissionTypeAllow && a.Permission != kmsg.ACLPermissionTypeDeny {
		return bad("permission %s: an acl is ALLOW or DENY", a.Permission)
	}
	if typ, name, ok := strings.Cut(string(a.Principal), ":"); !ok || typ == "" || name == "" {
		return bad("principal %q is not of the form User:name", a.Principal)
	}
	if a.Host == "" {
		return bad("empty host (use * for every host)")
	}
	return nil
}

// String is the ACL as Kafka's tools print it.
func (a ACL) String() string {
	return fmt.Sprintf("(principal=%s, host=%s, operation=%s, permission=%s) on %s:%s:%s",
		a.Principal, a.Host, a.Operation, a.Permission, a.ResourceType, a.PatternType, a.ResourceName)
}

// ACLFilter selects ACLs for DescribeAcls and DeleteAcls. Enum fields
// set to ANY, and nil strings, match every value. PatternType MATCH with a
// name selects the ACLs that apply to a resource of that name: the
// literal one, the literal wildcard "*" and every prefix of it.
type ACLFilter struct {
	ResourceType ResourceType
	ResourceName *string
	PatternType  PatternType
	Principal    *string
	Host         *string
	Operation    Operation
	Permission   Permission
}

// ErrInvalidFilter is what ACLFilter.Validate returns (wrapped).
var ErrInvalidFilter = errors.New("invalid acl filter")

// Validate refuses a filter with an UNKNOWN value, which Kafka answers
// with INVALID_REQUEST.
func (f ACLFilter) Validate() error {
	switch {
	case f.ResourceType == kmsg.ACLResourceTypeUnknown || f.ResourceType > kmsg.ACLResourceTypeUser:
		return fmt.Errorf("%w: resource type %s", ErrInvalidFilter, f.ResourceType)
	case f.PatternType == kmsg.ACLResourcePatternTypeUnknown || f.PatternType > kmsg.ACLResourcePatternTypePrefixed:
		return fmt.Errorf("%w: pattern type %s", ErrInvalidFilter, f.PatternType)
	case f.Operation == kmsg.ACLOperationUnknown || f.Operation > kmsg.ACLOperationDescribeTokens:
		return fmt.Errorf("%w: operation %s", ErrInvalidFilter, f.Operation)
	case f.Permission == kmsg.ACLPermissionTypeUnknown || f.Permission > kmsg.ACLPermissionTypeAllow:
		return fmt.Errorf("%w: permission %s", ErrInvalidFilter, f.Permission)
	}
	return nil
}

// Matches reports whether the filter selects a.
func (f ACLFilter) Matches(a ACL) bool {
	if f.ResourceType != kmsg.ACLResourceTypeAny && f.ResourceType != a.ResourceType {
		return false
	}
	if !f.matchesPattern(a) {
		return false
	}
	if f.Principal != nil && *f.Principal != string(a.Principal) {
		return false
	}
	if f.Host != nil && *f.Host != a.Host {
		return false
	}
	if f.Operation != kmsg.ACLOperationAny && f.Operation != a.Operation {
		return false
	}
	return f.Permission == kmsg.ACLPermissionTypeAny || f.Permission == a.Permission
}

func (f ACLFilter) matchesPattern(a ACL) bool {
	switch f.PatternType {
	case kmsg.ACLResourcePatternTypeAny:
		return f.ResourceName == nil || *f.ResourceName == a.ResourceName
	case kmsg.ACLResourcePatternTypeMatch:
		return f.ResourceName == nil || patternApplies(a, *f.ResourceName)
	default:
		return f.PatternType == a.PatternType && (f.ResourceName == nil || *f.ResourceName == a.ResourceName)
	}
}

// patternApplies reports whether a's resource pattern names the resource
// called name (of a's type).
func patternApplies(a ACL, name string) bool {
	switch a.PatternType {
	case kmsg.ACLResourcePatternTypeLiteral:
		return a.ResourceName == name || a.ResourceName == Wildcard
	case kmsg.ACLResourcePatternTypePrefixed:
		return strings.HasPrefix(name, a.ResourceName)
	}
	return false
}
