package admin

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

func TestUsers(t *testing.T) {
	b := inproc.Start(t)
	c, ctx := newClient(t, b.Addr)
	if err := c.AddUser(ctx, "alice", kadm.ScramSha512, "a-secret", 8192); err != nil {
		t.Fatal(err)
	}
	if err := c.AddUser(ctx, "alice", kadm.ScramSha256, "a-secret", 4096); err != nil {
		t.Fatal(err)
	}
	if err := c.AddUser(ctx, "bob", kadm.ScramSha256, "b-secret", DefaultScramIterations); err != nil {
		t.Fatal(err)
	}
	if err := c.AddUser(ctx, "carol", kadm.ScramSha256, "", 4096); err == nil {
		t.Fatal("a user with an empty password was added")
	}
	want := []UserCredential{{"alice", "SCRAM-SHA-256", 4096}, {"alice", "SCRAM-SHA-512", 8192}, {"bob", "SCRAM-SHA-256", DefaultScramIterations}}
	assertUsers(t, c, want)

	if err := c.DeleteUser(ctx, "alice", kadm.ScramSha256); err != nil {
		t.Fatal(err)
	}
	assertUsers(t, c, []UserCredential{want[1], want[2]})
	if err := c.DeleteUser(ctx, "bob", 0); err != nil {
		t.Fatal(err)
	}
	assertUsers(t, c, []UserCredential{want[1]})
	if err := c.DeleteUser(ctx, "bob", 0); !errors.Is(err, kerr.ResourceNotFound) {
		t.Fatalf("deleting a deleted user: got %v, want RESOURCE_NOT_FOUND", err)
	}
	if err := c.DeleteUser(ctx, "alice", kadm.ScramSha256); !errors.Is(err, kerr.ResourceNotFound) {
		t.Fatalf("deleting a deleted credential: got %v, want RESOURCE_NOT_FOUND", err)
	}
}

func assertUsers(t *testing.T, c *Client, want []UserCredential) {
	t.Helper()
	got, err := c.ListUsers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("users %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("users %v, want %v", got, want)
		}
	}
}

func TestACLs(t *testing.T) {
	b := inproc.Start(t)
	c, ctx := newClient(t, b.Addr)
	learner := ACL{Principal: "User:learner", Host: "*", Resource: kmsg.ACLResourceTypeTopic, Name: "policy.", Pattern: kmsg.ACLResourcePatternTypePrefixed,
		Operation: kmsg.ACLOperationWrite, Permission: kmsg.ACLPermissionTypeAllow}
	bob := ACL{Principal: "User:bob", Host: "10.0.0.9", Resource: kmsg.ACLResourceTypeGroup, Name: "lake", Pattern: kmsg.ACLResourcePatternTypeLiteral,
		Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeDeny}
	ops := ACL{Principal: "User:ops", Host: "*", Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral,
		Operation: kmsg.ACLOperationAlter, Permission: kmsg.ACLPermissionTypeAllow}
	for _, a := range []ACLFilter{
		{Principal: "User:learner", Resource: kmsg.ACLResourceTypeTopic, Name: "policy.", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: kmsg.ACLOperationWrite, Permission: kmsg.ACLPermissionTypeAllow},
		{Principal: "User:bob", Host: "10.0.0.9", Resource: kmsg.ACLResourceTypeGroup, Name: "lake", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeDeny},
		{Principal: "User:ops", Resource: kmsg.ACLResourceTypeCluster, Operation: kmsg.ACLOperationAlter, Permission: kmsg.ACLPermissionTypeAllow},
	} {
		if err := c.AddACL(ctx, a); err != nil {
			t.Fatalf("add %+v: %v", a, err)
		}
	}
	for _, bad := range []ACLFilter{
		{Resource: kmsg.ACLResourceTypeTopic, Name: "t", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow},                 // no principal
		{Principal: "User:x", Name: "t", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow},                                 // no resource
		{Principal: "User:x", Resource: kmsg.ACLResourceTypeTopic, Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow},       // no name
		{Principal: "User:x", Resource: kmsg.ACLResourceTypeTopic, Name: "t", Permission: kmsg.ACLPermissionTypeAllow},                              // no operation
		{Principal: "User:x", Resource: kmsg.ACLResourceTypeTopic, Name: "t", Operation: kmsg.ACLOperationRead},                                     // no permission
		{Principal: "x", Resource: kmsg.ACLResourceTypeTopic, Name: "t", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow}, // the broker refuses
	} {
		if err := c.AddACL(ctx, bad); err == nil {
			t.Errorf("added %+v", bad)
		}
	}
	all := []ACL{learner, bob, ops}
	sortACLs(all)
	for _, tc := range []struct {
		name   string
		filter ACLFilter
		want   []ACL
	}{
		{"all", ACLFilter{}, all},
		{"topics", ACLFilter{Resource: kmsg.ACLResourceTypeTopic}, []ACL{learner}},
		{"match a topic", ACLFilter{Resource: kmsg.ACLResourceTypeTopic, Name: "policy.ppo", Pattern: kmsg.ACLResourcePatternTypeMatch}, []ACL{learner}},
		{"literal name", ACLFilter{Resource: kmsg.ACLResourceTypeTopic, Name: "policy.ppo"}, nil},
		{"principal", ACLFilter{Principal: "User:bob"}, []ACL{bob}},
		{"deny", ACLFilter{Permission: kmsg.ACLPermissionTypeDeny}, []ACL{bob}},
		{"operation", ACLFilter{Operation: kmsg.ACLOperationAlter}, []ACL{ops}},
		{"cluster", ACLFilter{Resource: kmsg.ACLResourceTypeCluster}, []ACL{ops}},
	} {
		got, err := c.ListACLs(ctx, tc.filter)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !equalACLs(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	deleted, err := c.DeleteACLs(ctx, ACLFilter{Principal: "User:bob"})
	if err != nil || !equalACLs(deleted, []ACL{bob}) {
		t.Fatalf("delete bob's: %v %+v", err, deleted)
	}
	if got, err := c.ListACLs(ctx, ACLFilter{}); err != nil || !equalACLs(got, []ACL{learner, ops}) {
		t.Fatalf("after delete: %v %+v", err, got)
	}
}

func equalACLs(a, b []ACL) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
