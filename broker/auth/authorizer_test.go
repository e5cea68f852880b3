package auth

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func acl(rt ResourceType, name string, pt PatternType, p Principal, host string, op Operation, perm Permission) ACL {
	return ACL{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: p, Host: host, Operation: op, Permission: perm}
}

const (
	topicT   = kmsg.ACLResourceTypeTopic
	groupT   = kmsg.ACLResourceTypeGroup
	literal  = kmsg.ACLResourcePatternTypeLiteral
	prefixed = kmsg.ACLResourcePatternTypePrefixed
	allow    = kmsg.ACLPermissionTypeAllow
	deny     = kmsg.ACLPermissionTypeDeny
)

func TestACLAuthorizer(t *testing.T) {
	alice, bob := User("alice"), User("bob")
	for _, tc := range []struct {
		name      string
		acls      []ACL
		super     []Principal
		allowNone bool
		p         Principal
		host      string
		op        Operation
		res       Resource
		want      bool
	}{
		{"no acl, default deny", nil, nil, false, alice, "10.0.0.1", kmsg.ACLOperationRead, Topic("a"), false},
		{"no acl, allow everyone", nil, nil, true, alice, "10.0.0.1", kmsg.ACLOperationRead, Topic("a"), true},
		{"acl on another resource counts as none", []ACL{acl(topicT, "b", literal, bob, "*", kmsg.ACLOperationRead, allow)}, nil, true, alice, "h", kmsg.ACLOperationRead, Topic("a"), true},
		{"acl on the resource for someone else", []ACL{acl(topicT, "a", literal, bob, "*", kmsg.ACLOperationRead, allow)}, nil, true, alice, "h", kmsg.ACLOperationRead, Topic("a"), false},
		{"literal allow", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("a"), true},
		{"literal allow is not write", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow)}, nil, false, alice, "h", kmsg.ACLOperationWrite, Topic("a"), false},
		{"literal is not a prefix", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("ab"), false},
		{"read implies describe", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow)}, nil, false, alice, "h", kmsg.ACLOperationDescribe, Topic("a"), true},
		{"write implies describe", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationWrite, allow)}, nil, false, alice, "h", kmsg.ACLOperationDescribe, Topic("a"), true},
		{"delete implies describe", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationDelete, allow)}, nil, false, alice, "h", kmsg.ACLOperationDescribe, Topic("a"), true},
		{"alter implies describe", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationAlter, allow)}, nil, false, alice, "h", kmsg.ACLOperationDescribe, Topic("a"), true},
		{"create does not imply describe", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationCreate, allow)}, nil, false, alice, "h", kmsg.ACLOperationDescribe, Topic("a"), false},
		{"describe does not imply read", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationDescribe, allow)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("a"), false},
		{"alter-configs implies describe-configs", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationAlterConfigs, allow)}, nil, false, alice, "h", kmsg.ACLOperationDescribeConfigs, Topic("a"), true},
		{"describe-configs does not imply alter-configs", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationDescribeConfigs, allow)}, nil, false, alice, "h", kmsg.ACLOperationAlterConfigs, Topic("a"), false},
		{"all implies everything", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationAll, allow)}, nil, false, alice, "h", kmsg.ACLOperationDelete, Topic("a"), true},
		{"prefixed matches", []ACL{acl(topicT, "policy.", prefixed, alice, "*", kmsg.ACLOperationWrite, allow)}, nil, false, alice, "h", kmsg.ACLOperationWrite, Topic("policy.ppo"), true},
		{"prefixed does not match others", []ACL{acl(topicT, "policy.", prefixed, alice, "*", kmsg.ACLOperationWrite, allow)}, nil, false, alice, "h", kmsg.ACLOperationWrite, Topic("telemetry"), false},
		{"literal wildcard name", []ACL{acl(topicT, "*", literal, alice, "*", kmsg.ACLOperationRead, allow)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("anything"), true},
		{"prefixed * is a prefix, not a wildcard", []ACL{acl(topicT, "*", prefixed, alice, "*", kmsg.ACLOperationRead, allow)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("anything"), false},
		{"wildcard principal", []ACL{acl(topicT, "a", literal, WildcardPrincipal, "*", kmsg.ACLOperationRead, allow)}, nil, false, bob, "h", kmsg.ACLOperationRead, Topic("a"), true},
		{"host must match", []ACL{acl(topicT, "a", literal, alice, "10.0.0.1", kmsg.ACLOperationRead, allow)}, nil, false, alice, "10.0.0.2", kmsg.ACLOperationRead, Topic("a"), false},
		{"host matches", []ACL{acl(topicT, "a", literal, alice, "10.0.0.1", kmsg.ACLOperationRead, allow)}, nil, false, alice, "10.0.0.1", kmsg.ACLOperationRead, Topic("a"), true},
		{"resource type must match", []ACL{acl(groupT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("a"), false},
		{"deny wins over allow", []ACL{
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow),
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, deny)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("a"), false},
		{"prefixed deny wins over literal allow", []ACL{
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationAll, allow),
			acl(topicT, "a", prefixed, WildcardPrincipal, "h", kmsg.ACLOperationWrite, deny)}, nil, false, alice, "h", kmsg.ACLOperationWrite, Topic("a"), false},
		{"deny all denies read", []ACL{
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow),
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationAll, deny)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("a"), false},
		{"deny of another op leaves the allow", []ACL{
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow),
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationWrite, deny)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("a"), true},
		{"deny read does not deny describe (implied ops only allow)", []ACL{
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationDescribe, allow),
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, deny)}, nil, false, alice, "h", kmsg.ACLOperationDescribe, Topic("a"), true},
		{"deny for someone else", []ACL{
			acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow),
			acl(topicT, "a", literal, bob, "*", kmsg.ACLOperationRead, deny)}, nil, false, alice, "h", kmsg.ACLOperationRead, Topic("a"), true},
		{"superuser despite deny", []ACL{acl(topicT, "a", literal, WildcardPrincipal, "*", kmsg.ACLOperationAll, deny)}, []Principal{alice}, false, alice, "h", kmsg.ACLOperationWrite, Topic("a"), true},
		{"superuser without acls", nil, []Principal{alice}, false, alice, "h", kmsg.ACLOperationAlter, Cluster, true},
		{"cluster acl", []ACL{acl(kmsg.ACLResourceTypeCluster, ClusterResourceName, literal, bob, "*", kmsg.ACLOperationAlter, allow)}, nil, false, bob, "h", kmsg.ACLOperationDescribe, Cluster, true},
		{"transactional id", []ACL{acl(kmsg.ACLResourceTypeTransactionalId, "sink-", prefixed, bob, "*", kmsg.ACLOperationWrite, allow)}, nil, false, bob, "h", kmsg.ACLOperationWrite, TransactionalID("sink-0"), true},
		{"group", []ACL{acl(groupT, "lake", literal, bob, "*", kmsg.ACLOperationRead, allow)}, nil, false, bob, "h", kmsg.ACLOperationRead, Group("lake"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := &ACLAuthorizer{ACLs: func() []ACL { return tc.acls }, SuperUsers: tc.super, AllowEveryoneIfNoACLFound: tc.allowNone}
			if got := z.Authorize(tc.p, tc.host, tc.op, tc.res); got != tc.want {
				t.Errorf("Authorize(%s, %s, %s, %v) = %v, want %v", tc.p, tc.host, tc.op, tc.res, got, tc.want)
			}
		})
	}
}

func TestACLAuthorizeAny(t *testing.T) {
	alice, bob := User("alice"), User("bob")
	write := kmsg.ACLOperationWrite
	for _, tc := range []struct {
		name      string
		acls      []ACL
		super     []Principal
		allowNone bool
		p         Principal
		want      bool
	}{
		{"no acl, default deny", nil, nil, false, alice, false},
		{"no acl of the type, allow everyone", []ACL{acl(groupT, "g", literal, bob, "*", kmsg.ACLOperationRead, allow)}, nil, true, alice, true},
		{"a topic acl, even for someone else, ends allow-everyone", []ACL{acl(topicT, "a", literal, bob, "*", write, allow)}, nil, true, alice, false},
		{"superuser", nil, []Principal{alice}, false, alice, true},
		{"write on one topic", []ACL{acl(topicT, "a", literal, alice, "*", write, allow)}, nil, false, alice, true},
		{"all on a prefix", []ACL{acl(topicT, "policy.", prefixed, alice, "*", kmsg.ACLOperationAll, allow)}, nil, false, alice, true},
		{"read is not write", []ACL{acl(topicT, "a", literal, alice, "*", kmsg.ACLOperationRead, allow)}, nil, false, alice, false},
		{"another host", []ACL{acl(topicT, "a", literal, alice, "10.9.9.9", write, allow)}, nil, false, alice, false},
		{"denied on the same literal", []ACL{
			acl(topicT, "a", literal, alice, "*", write, allow),
			acl(topicT, "a", literal, alice, "*", write, deny)}, nil, false, alice, false},
		{"denied on a prefix of it", []ACL{
			acl(topicT, "policy.ppo", literal, alice, "*", write, allow),
			acl(topicT, "policy.", prefixed, WildcardPrincipal, "*", kmsg.ACLOperationAll, deny)}, nil, false, alice, false},
		{"denied everywhere", []ACL{
			acl(topicT, "a", literal, alice, "*", write, allow),
			acl(topicT, "*", literal, alice, "*", write, deny)}, nil, false, alice, false},
		{"a deny elsewhere leaves the allow", []ACL{
			acl(topicT, "a", literal, alice, "*", write, allow),
			acl(topicT, "b", literal, alice, "*", write, deny)}, nil, false, alice, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := &ACLAuthorizer{ACLs: func() []ACL { return tc.acls }, SuperUsers: tc.super, AllowEveryoneIfNoACLFound: tc.allowNone}
			if got := z.AuthorizeAny(tc.p, "h", write, topicT); got != tc.want {
				t.Errorf("AuthorizeAny(%s, WRITE, TOPIC) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestACLFilterMatches(t *testing.T) {
	str := func(s string) *string { return &s }
	lit := acl(topicT, "telemetry", literal, User("alice"), "*", kmsg.ACLOperationRead, allow)
	wild := acl(topicT, "*", literal, User("bob"), "*", kmsg.ACLOperationRead, allow)
	pre := acl(topicT, "tele", prefixed, User("bob"), "10.0.0.1", kmsg.ACLOperationWrite, deny)
	grp := acl(groupT, "telemetry", literal, User("alice"), "*", kmsg.ACLOperationRead, allow)
	all := []ACL{lit, wild, pre, grp}
	anyF := ACLFilter{ResourceType: kmsg.ACLResourceTypeAny, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	with := func(mod func(*ACLFilter)) ACLFilter { f := anyF; mod(&f); return f }
	for _, tc := range []struct {
		name string
		f    ACLFilter
		want []ACL
	}{
		{"any", anyF, all},
		{"topics", with(func(f *ACLFilter) { f.ResourceType = topicT }), []ACL{lit, wild, pre}},
		{"name any pattern", with(func(f *ACLFilter) { f.ResourceName = str("telemetry") }), []ACL{lit, grp}},
		{"literal name", with(func(f *ACLFilter) { f.ResourceName, f.PatternType = str("tele"), literal }), nil},
		{"prefixed name", with(func(f *ACLFilter) { f.ResourceName, f.PatternType = str("tele"), prefixed }), []ACL{pre}},
		{"match", with(func(f *ACLFilter) {
			f.ResourceType, f.ResourceName, f.PatternType = topicT, str("telemetry"), kmsg.ACLResourcePatternTypeMatch
		}), []ACL{lit, wild, pre}},
		{"match other name", with(func(f *ACLFilter) {
			f.ResourceType, f.ResourceName, f.PatternType = topicT, str("policy"), kmsg.ACLResourcePatternTypeMatch
		}), []ACL{wild}},
		{"principal", with(func(f *ACLFilter) { f.Principal = str("User:bob") }), []ACL{wild, pre}},
		{"host", with(func(f *ACLFilter) { f.Host = str("10.0.0.1") }), []ACL{pre}},
		{"operation", with(func(f *ACLFilter) { f.Operation = kmsg.ACLOperationWrite }), []ACL{pre}},
		{"permission", with(func(f *ACLFilter) { f.Permission = deny }), []ACL{pre}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.f.Validate(); err != nil {
				t.Fatal(err)
			}
			var got []ACL
			for _, a := range all {
				if tc.f.Matches(a) {
					got = append(got, a)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestACLValidate(t *testing.T) {
	good := acl(topicT, "a", literal, User("alice"), "*", kmsg.ACLOperationRead, allow)
	if err := good.Validate(); err != nil {
		t.Fatalf("valid acl refused: %v", err)
	}
	for name, mod := range map[string]func(*ACL){
		"any resource":         func(a *ACL) { a.ResourceType = kmsg.ACLResourceTypeAny },
		"match pattern":        func(a *ACL) { a.PatternType = kmsg.ACLResourcePatternTypeMatch },
		"empty name":           func(a *ACL) { a.ResourceName = "" },
		"cluster name":         func(a *ACL) { a.ResourceType = kmsg.ACLResourceTypeCluster },
		"any operation":        func(a *ACL) { a.Operation = kmsg.ACLOperationAny },
		"unknown operation":    func(a *ACL) { a.Operation = 99 },
		"any permission":       func(a *ACL) { a.Permission = kmsg.ACLPermissionTypeAny },
		"principal without :":  func(a *ACL) { a.Principal = "alice" },
		"principal empty name": func(a *ACL) { a.Principal = "User:" },
		"empty host":           func(a *ACL) { a.Host = "" },
	} {
		a := good
		mod(&a)
		if err := a.Validate(); err == nil {
			t.Errorf("%s: %v accepted", name, a)
		}
	}
}
