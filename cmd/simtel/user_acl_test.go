package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simtel/simtel/internal/admin"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// simtelOK runs the simtel binary and fails the test if it fails.
func simtelOK(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := simtelRun(t, args...)
	if err != nil {
		t.Fatalf("simtel %s: %v: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

func simtelRun(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// The user and acl commands against a broker process whose authorizer
// lets only its superuser (the anonymous CLI here) change them.
func TestUserAndACLCLI(t *testing.T) {
	b := brokertest.Start(t, brokertest.SkipShort(), brokertest.Args("--authorizer", "acl", "--superusers", "User:ANONYMOUS"))
	brokers := "--brokers=" + b.Addr
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	simtelOK(t, "user", "add", "alice", "--mechanism", "SCRAM-SHA-256", "--password-file", pw, brokers)
	simtelOK(t, "user", "add", "alice", "--mechanism", "scram-sha-512", "--password-file", pw, "--iterations", "4096", brokers)
	if _, errOut, err := simtelRun(t, "user", "add", "bob", "--password-file", pw, "--iterations", "100", brokers); err == nil {
		t.Fatal("a user with 100 iterations was added")
	} else if !strings.Contains(errOut, "4096") {
		t.Errorf("the error of too few iterations does not give the bounds: %s", errOut)
	}
	var users []admin.UserCredential
	if err := json.Unmarshal([]byte(simtelOK(t, "user", "list", "-o", "json", brokers)), &users); err != nil {
		t.Fatal(err)
	}
	want := []admin.UserCredential{{User: "alice", Mechanism: "SCRAM-SHA-256", Iterations: admin.DefaultScramIterations}, {User: "alice", Mechanism: "SCRAM-SHA-512", Iterations: 4096}}
	if len(users) != 2 || users[0] != want[0] || users[1] != want[1] {
		t.Fatalf("users %+v, want %+v", users, want)
	}
	simtelOK(t, "user", "delete", "alice", brokers)
	if out := simtelOK(t, "user", "list", brokers); strings.Contains(out, "alice") {
		t.Fatalf("alice listed after her deletion:\n%s", out)
	}

	simtelOK(t, "acl", "add", "--allow", "--principal", "User:learner", "--operation", "write", "--topic", "policy.", "--prefixed", brokers)
	simtelOK(t, "acl", "add", "--deny", "--principal", "User:bob", "--operation", "read", "--group", "lake", "--host", "10.0.0.9", brokers)
	simtelOK(t, "acl", "add", "--allow", "--principal", "User:sink", "--operation", "write", "--transactional-id", "sink-", "--prefixed", brokers)
	simtelOK(t, "acl", "add", "--allow", "--principal", "User:ops", "--operation", "describe-configs", "--cluster", brokers)
	for _, bad := range [][]string{
		{"acl", "add", "--allow", "--deny", "--principal", "User:x", "--operation", "read", "--topic", "t"},
		{"acl", "add", "--allow", "--principal", "User:x", "--operation", "read", "--topic", "t", "--group", "g"},
		{"acl", "add", "--allow", "--principal", "User:x", "--operation", "fly", "--topic", "t"},
		{"acl", "add", "--allow", "--operation", "read", "--topic", "t"},
	} {
		if _, _, err := simtelRun(t, append(bad, brokers)...); err == nil {
			t.Errorf("simtel %s succeeded", strings.Join(bad, " "))
		}
	}
	list := func(args ...string) []admin.ACL {
		t.Helper()
		var acls []admin.ACL
		if err := json.Unmarshal([]byte(simtelOK(t, append([]string{"acl", "list", "-o", "json", brokers}, args...)...)), &acls); err != nil {
			t.Fatal(err)
		}
		return acls
	}
	if got := list(); len(got) != 4 {
		t.Fatalf("all acls: %+v, want 4", got)
	}
	if got := list("--topic", "policy.ppo", "--match"); len(got) != 1 || got[0].Principal != "User:learner" {
		t.Fatalf("acls matching topic policy.ppo: %+v, want the learner's", got)
	}
	if got := list("--deny"); len(got) != 1 || got[0].Principal != "User:bob" || got[0].Host != "10.0.0.9" {
		t.Fatalf("deny acls: %+v, want bob's", got)
	}
	out := simtelOK(t, "acl", "delete", "--principal", "User:bob", brokers)
	if !strings.Contains(out, "User:bob") || !strings.Contains(out, "lake") {
		t.Fatalf("delete did not list what it deleted:\n%s", out)
	}
	if got := list(); len(got) != 3 {
		t.Fatalf("acls after delete: %+v, want 3", got)
	}
}
