package cluster

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
)

func TestSecurityApplySnapshotRestore(t *testing.T) {
	f := NewFSM()
	idx := uint64(0)
	apply := func(c Command) Result { idx++; return applyCmd(t, f, idx, c) }
	cred := func(m auth.ScramMechanism, b byte) *auth.ScramCredential {
		return &auth.ScramCredential{Mechanism: m, Iterations: 4096, Salt: []byte{b}, StoredKey: []byte{b, 1}, ServerKey: []byte{b, 2}}
	}
	read := auth.ACL{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "telemetry", PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: auth.User("alice"), Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow}
	write := read
	write.ResourceName, write.PatternType, write.Operation = "policy.", kmsg.ACLResourcePatternTypePrefixed, kmsg.ACLOperationWrite

	for _, c := range []Command{
		{Op: OpUpsertScram, User: "alice", Credential: cred(auth.ScramSHA512, 1)},
		{Op: OpUpsertScram, User: "alice", Credential: cred(auth.ScramSHA256, 2)},
		{Op: OpUpsertScram, User: "alice", Credential: cred(auth.ScramSHA512, 3)}, // replaces the first
		{Op: OpUpsertScram, User: "bob", Credential: cred(auth.ScramSHA256, 4)},
		{Op: OpDeleteScram, User: "bob", Mechanism: auth.ScramSHA256},
		{Op: OpCreateACLs, ACLs: []auth.ACL{read, write}},
		{Op: OpCreateACLs, ACLs: []auth.ACL{read}}, // kept once
	} {
		if r := apply(c); r.Code != "" {
			t.Fatalf("%s: %+v", c.Op, r)
		}
	}
	if r := apply(Command{Op: OpDeleteScram, User: "bob", Mechanism: auth.ScramSHA256}); !errors.Is(r.Err(), ErrNoCredential) {
		t.Fatalf("deleting a missing credential: got %v, want ErrNoCredential", r.Err())
	}
	if r := apply(Command{Op: OpUpsertScram, User: "carol"}); !errors.Is(r.Err(), ErrBadCommand) {
		t.Fatalf("upsert without a credential: got %v, want ErrBadCommand", r.Err())
	}
	bad := read
	bad.Host = ""
	if r := apply(Command{Op: OpCreateACLs, ACLs: []auth.ACL{bad}}); !errors.Is(r.Err(), ErrBadCommand) {
		t.Fatalf("invalid acl: got %v, want ErrBadCommand", r.Err())
	}

	sec := f.Metadata().Security
	if c, ok := sec.ScramCredential("alice", auth.ScramSHA512); !ok || c.Salt[0] != 3 {
		t.Errorf("alice's SCRAM-SHA-512 = %+v, %v; want the second upsert", c, ok)
	}
	if _, ok := sec.ScramCredential("alice", auth.ScramSHA256); !ok {
		t.Error("alice's SCRAM-SHA-256 is missing")
	}
	if _, ok := sec.Users["bob"]; ok {
		t.Errorf("bob has credentials after his only one was deleted: %+v", sec.Users["bob"])
	}
	if !reflect.DeepEqual(sec.ACLs, []auth.ACL{read, write}) {
		t.Errorf("acls %v, want %v", sec.ACLs, []auth.ACL{read, write})
	}

	// A snapshot carries the state; a restore brings it back.
	s, _ := f.Snapshot()
	var sink memSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(strings.NewReader(sink.String()))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Metadata().Security, sec) {
		t.Errorf("restored %+v, want %+v", g.Metadata().Security, sec)
	}

	// Deleting by filters returns what each filter deleted.
	r := apply(Command{Op: OpDeleteACLs, Filters: []ACLFilter{
		{ResourceType: kmsg.ACLResourceTypeTopic, PatternType: kmsg.ACLResourcePatternTypePrefixed, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny},
		{ResourceType: kmsg.ACLResourceTypeGroup, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny},
	}})
	if r.Code != "" || len(r.DeletedACLs) != 2 || !reflect.DeepEqual(r.DeletedACLs[0], []auth.ACL{write}) || len(r.DeletedACLs[1]) != 0 {
		t.Fatalf("delete_acls result %+v, want [[%v] []]", r, write)
	}
	if got := f.Metadata().Security.ACLs; !reflect.DeepEqual(got, []auth.ACL{read}) {
		t.Errorf("acls after deletion %v, want %v", got, []auth.ACL{read})
	}
	// The published state before the deletion did not change.
	if !reflect.DeepEqual(sec.ACLs, []auth.ACL{read, write}) {
		t.Errorf("an older state changed: %v", sec.ACLs)
	}
}

// A snapshot written before the security state existed restores with
// none.
func TestSecurityOldSnapshot(t *testing.T) {
	old := `{"cluster_id":"c","brokers":{"0":{"id":0,"kafka_addr":"k","raft_addr":"r","alive":true}},"topics":{},"index":7}`
	f := NewFSM()
	if err := f.Restore(io.NopCloser(strings.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	m := f.Metadata()
	if m.Security == nil || len(m.Security.Users) != 0 || len(m.Security.ACLs) != 0 {
		t.Fatalf("security of an old snapshot = %+v, want empty", m.Security)
	}
	if _, ok := m.Security.ScramCredential("alice", auth.ScramSHA512); ok {
		t.Fatal("a credential out of nowhere")
	}
	if r := applyCmd(t, f, 8, Command{Op: OpUpsertScram, User: "alice", Credential: &auth.ScramCredential{Mechanism: auth.ScramSHA512, Iterations: 4096}}); r.Code != "" {
		t.Fatalf("upsert after an old snapshot: %+v", r)
	}
}
