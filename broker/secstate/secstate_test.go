package secstate

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
)

// A single broker's users and ACLs survive a restart through its file,
// and the ACL authorizer follows the state as it changes.
func TestSingleBrokerStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, ACL: true, SuperUsers: []string{"User:admin"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	alice := auth.User("alice")
	read := auth.ACL{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "telemetry", PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: alice, Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow}
	if s.Authorizer().Authorize(alice, "10.0.0.1", kmsg.ACLOperationRead, auth.Topic("telemetry")) {
		t.Fatal("alice may read before any ACL")
	}
	if !s.Authorizer().Authorize("User:admin", "10.0.0.1", kmsg.ACLOperationRead, auth.Topic("telemetry")) {
		t.Fatal("a superuser is refused")
	}
	cred := &auth.ScramCredential{Mechanism: auth.ScramSHA256, Iterations: 4096, Salt: []byte{1}, StoredKey: []byte{2}, ServerKey: []byte{3}}
	for _, c := range []cluster.Command{
		{Op: cluster.OpUpsertScram, User: "alice", Credential: cred},
		{Op: cluster.OpCreateACLs, ACLs: []auth.ACL{read}},
	} {
		if _, err := s.Apply(ctx, c); err != nil {
			t.Fatalf("%s: %v", c.Op, err)
		}
	}
	if !s.Authorizer().Authorize(alice, "10.0.0.1", kmsg.ACLOperationRead, auth.Topic("telemetry")) {
		t.Fatal("alice may not read after the ACL was added")
	}
	// A refused command changes nothing, not even the file.
	if _, err := s.Apply(ctx, cluster.Command{Op: cluster.OpDeleteScram, User: "bob", Mechanism: auth.ScramSHA256}); err == nil {
		t.Fatal("deleting a credential nobody has was accepted")
	}

	s, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.ScramCredential("alice", auth.ScramSHA256); !ok || got.Iterations != 4096 {
		t.Fatalf("alice's credential after a restart: %+v, %v", got, ok)
	}
	st, err := s.State(ctx, true)
	if err != nil || len(st.ACLs) != 1 || st.ACLs[0] != read {
		t.Fatalf("ACLs after a restart: %+v, %v", st, err)
	}
	if !s.Authorizer().Authorize(alice, "10.0.0.1", kmsg.ACLOperationRead, auth.Topic("telemetry")) {
		t.Fatal("alice may not read after a restart")
	}
}

// A cluster broker ignores a single broker's file (its state comes from
// the controller once attached), and without ACL there is no authorizer.
func TestClusteredIgnoresFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, File), []byte(`{"users":{"alice":[]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	single, err := Open(Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := single.State(context.Background(), false); len(st.Users) != 1 {
		t.Fatalf("a single broker did not read its file: %+v", st.Users)
	}
	s, err := Open(Config{Dir: dir, Clustered: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := s.State(context.Background(), false); len(st.Users) != 0 {
		t.Fatalf("a cluster broker took the users of a single broker's file: %+v", st.Users)
	}
	if s.Authorizer() != nil {
		t.Fatal("an authorizer without ACL")
	}
	if err := os.WriteFile(filepath.Join(dir, File), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err == nil {
		t.Fatal("a single broker opened a broken security file")
	}
}
