package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/internal/testutil"
)

// userCreds is what DescribeUserScramCredentials says of each user:
// mechanism → iterations.
func userCreds(t *testing.T, ctx context.Context, adm *kadm.Client) map[string]map[string]int32 {
	t.Helper()
	described, err := adm.DescribeUserSCRAMs(ctx)
	if err != nil {
		t.Fatalf("describe users: %v", err)
	}
	out := map[string]map[string]int32{}
	for _, d := range described {
		if d.Err != nil {
			t.Fatalf("describe user %s: %v", d.User, d.Err)
		}
		out[d.User] = map[string]int32{}
		for _, ci := range d.CredInfos {
			out[d.User][ci.Mechanism.String()] = ci.Iterations
		}
	}
	return out
}

func TestScramCredentialsAPI(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, dir)
	adm := tb.admin()
	ctx := ctxT(t, 30*time.Second)

	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "alice-secret"},
		{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "alice-256"},
		{User: "bob", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "bob-secret"},
	})
	if err != nil || res.Error() != nil {
		t.Fatalf("upsert: %v %v", err, res.Error())
	}
	want := map[string]map[string]int32{"alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192}, "bob": {"SCRAM-SHA-256": 4096}}
	if got := userCreds(t, ctx, adm); !equalCreds(got, want) {
		t.Fatalf("users %v, want %v", got, want)
	}

	// Each bad alteration gets Kafka's error for its user; the others
	// still apply.
	for _, tc := range []struct {
		name   string
		del    []kadm.DeleteSCRAM
		upsert []kadm.UpsertSCRAM
		want   error
	}{
		{"altered twice", []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha512}}, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "p"}}, kerr.DuplicateResource},
		{"missing credential", []kadm.DeleteSCRAM{{User: "carol", Mechanism: kadm.ScramSha256}}, nil, kerr.ResourceNotFound},
		{"empty user", nil, []kadm.UpsertSCRAM{{User: "", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "p"}}, kerr.UnacceptableCredential},
	} {
		res, err := adm.AlterUserSCRAMs(ctx, tc.del, tc.upsert)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, r := range res {
			if !errors.Is(r.Err, tc.want) {
				t.Errorf("%s: user %q got %v, want %v", tc.name, r.User, r.Err, tc.want)
			}
		}
	}
	// What kadm refuses to send: an unknown mechanism, iterations out
	// of bounds, no salt.
	for _, tc := range []struct {
		mech       int8
		iterations int32
		salt       []byte
		want       *kerr.Error
	}{
		{3, 4096, []byte("s"), kerr.UnsupportedSaslMechanism},
		{2, 4095, []byte("s"), kerr.UnacceptableCredential},
		{2, 16385, []byte("s"), kerr.UnacceptableCredential},
		{1, 4096, nil, kerr.UnacceptableCredential},
	} {
		req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
		up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		up.Name, up.Mechanism, up.Iterations, up.Salt, up.SaltedPassword = "carol", tc.mech, tc.iterations, tc.salt, []byte("p")
		req.Upsertions = append(req.Upsertions, up)
		resp, err := req.RequestWith(ctx, tb.client())
		if err != nil || len(resp.Results) != 1 || resp.Results[0].ErrorCode != tc.want.Code {
			t.Errorf("mechanism %d, %d iterations, salt %q: %v %+v, want %v", tc.mech, tc.iterations, tc.salt, err, resp, tc.want)
		}
	}
	described, err := adm.DescribeUserSCRAMs(ctx, "carol", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(described["carol"].Err, kerr.ResourceNotFound) || described["alice"].Err != nil {
		t.Fatalf("describe carol and alice: %+v", described)
	}
	if got := userCreds(t, ctx, adm); !equalCreds(got, want) {
		t.Fatalf("failed alterations changed the users: %v, want %v", got, want)
	}

	// The broker kept keys that the password derives, never the password.
	data, err := os.ReadFile(filepath.Join(dir, "security.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sec cluster.Security
	if err := json.Unmarshal(data, &sec); err != nil {
		t.Fatal(err)
	}
	c, ok := sec.ScramCredential("alice", auth.ScramSHA512)
	if !ok || !c.VerifyPassword("alice-secret") || c.VerifyPassword("alice-256") || c.Iterations != 8192 {
		t.Fatalf("alice's stored SCRAM-SHA-512 credential %+v does not match her password", c)
	}
	if strings.Contains(string(data), "alice-secret") {
		t.Fatal("the password is stored")
	}

	res, err = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "bob", Mechanism: kadm.ScramSha256}}, nil)
	if err != nil || res.Error() != nil {
		t.Fatalf("delete bob: %v %v", err, res.Error())
	}
	delete(want, "bob")

	// The credentials survive a restart.
	tb.stop()
	tb = startBroker(t, dir)
	if got := userCreds(t, ctx, tb.admin()); !equalCreds(got, want) {
		t.Fatalf("after restart: users %v, want %v", got, want)
	}
}

func equalCreds(a, b map[string]map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for u, m := range a {
		n, ok := b[u]
		if !ok || len(m) != len(n) {
			return false
		}
		for k, v := range m {
			if n[k] != v {
				return false
			}
		}
	}
	return true
}

// listACLs lists every ACL a filter selects, as strings.
func listACLs(t *testing.T, ctx context.Context, adm *kadm.Client, b *kadm.ACLBuilder) []string {
	t.Helper()
	res, err := adm.DescribeACLs(ctx, b)
	if err != nil {
		t.Fatalf("describe acls: %v", err)
	}
	var out []string
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("describe acls: %v (%s)", r.Err, r.ErrMessage)
		}
		for _, d := range r.Described {
			out = append(out, aclString(d.Principal, d.Host, d.Type, d.Name, d.Pattern, d.Operation, d.Permission))
		}
	}
	slices.Sort(out)
	return out
}

func aclString(p, host string, rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) string {
	return auth.ACL{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: auth.Principal(p), Host: host, Operation: op, Permission: perm}.String()
}

// anyACLs is a filter selecting every ACL.
func anyACLs() *kadm.ACLBuilder {
	return kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Allow().AllowHosts().Deny().DenyHosts().Operations()
}

// createTestACLs creates four ACLs through adm and returns them as
// strings, sorted.
func createTestACLs(t *testing.T, ctx context.Context, adm *kadm.Client) []string {
	t.Helper()
	for _, b := range []*kadm.ACLBuilder{
		kadm.NewACLs().Topics("telemetry").Allow("User:alice").AllowHosts("*").Operations(kadm.OpRead),
		kadm.NewACLs().Topics("policy.").ResourcePatternType(kadm.ACLPatternPrefixed).Allow("User:learner").AllowHosts("*").Operations(kadm.OpWrite),
		kadm.NewACLs().Groups("lake").Deny("User:bob").DenyHosts("10.0.0.9").Operations(kadm.OpAll),
		kadm.NewACLs().TransactionalIDs("sink-").ResourcePatternType(kadm.ACLPatternPrefixed).Allow("User:sink").AllowHosts("*").Operations(kadm.OpWrite),
	} {
		res, err := adm.CreateACLs(ctx, b)
		if err != nil {
			t.Fatalf("create acls: %v", err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("create acl: %v (%s)", r.Err, r.ErrMessage)
			}
		}
	}
	return []string{
		aclString("User:alice", "*", kmsg.ACLResourceTypeTopic, "telemetry", kadm.ACLPatternLiteral, kadm.OpRead, kmsg.ACLPermissionTypeAllow),
		aclString("User:bob", "10.0.0.9", kmsg.ACLResourceTypeGroup, "lake", kadm.ACLPatternLiteral, kadm.OpAll, kmsg.ACLPermissionTypeDeny),
		aclString("User:learner", "*", kmsg.ACLResourceTypeTopic, "policy.", kadm.ACLPatternPrefixed, kadm.OpWrite, kmsg.ACLPermissionTypeAllow),
		aclString("User:sink", "*", kmsg.ACLResourceTypeTransactionalId, "sink-", kadm.ACLPatternPrefixed, kadm.OpWrite, kmsg.ACLPermissionTypeAllow),
	}
}

func TestACLsAPI(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, dir)
	adm := tb.admin()
	ctx := ctxT(t, 30*time.Second)

	all := createTestACLs(t, ctx, adm)
	slices.Sort(all)
	if got := listACLs(t, ctx, adm, anyACLs()); !slices.Equal(got, all) {
		t.Fatalf("all acls:\n%q\nwant\n%q", got, all)
	}
	// Creating one again keeps it once.
	createTestACLs(t, ctx, adm)
	if got := listACLs(t, ctx, adm, anyACLs()); !slices.Equal(got, all) {
		t.Fatalf("after creating again:\n%q\nwant\n%q", got, all)
	}
	// MATCH: what applies to topic policy.ppo is the prefixed ACL.
	match := kadm.NewACLs().Topics("policy.ppo").ResourcePatternType(kadm.ACLPatternMatch).Allow().AllowHosts().Deny().DenyHosts().Operations()
	if got := listACLs(t, ctx, adm, match); !slices.Equal(got, all[2:3]) {
		t.Fatalf("matching policy.ppo: %q, want %q", got, all[2:3])
	}
	byPrincipal := kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Deny("User:bob").DenyHosts().Operations()
	if got := listACLs(t, ctx, adm, byPrincipal); !slices.Equal(got, all[1:2]) {
		t.Fatalf("bob's deny acls: %q, want %q", got, all[1:2])
	}
	literalTopics := kadm.NewACLs().Topics().Allow().AllowHosts().Operations()
	if got := listACLs(t, ctx, adm, literalTopics); !slices.Equal(got, all[:1]) {
		t.Fatalf("literal topic acls: %q, want %q", got, all[:1])
	}

	// Invalid creations and filters get INVALID_REQUEST.
	cl := tb.client()
	creq := kmsg.NewPtrCreateACLsRequest()
	for _, mod := range []func(*kmsg.CreateACLsRequestCreation){
		func(c *kmsg.CreateACLsRequestCreation) { c.Host = "" },
		func(c *kmsg.CreateACLsRequestCreation) { c.Principal = "alice" },
		func(c *kmsg.CreateACLsRequestCreation) { c.ResourcePatternType = kmsg.ACLResourcePatternTypeMatch },
		func(c *kmsg.CreateACLsRequestCreation) { c.ResourceType = kmsg.ACLResourceTypeCluster },
	} {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.Principal, c.Host = kmsg.ACLResourceTypeTopic, "x", "User:x", "*"
		c.Operation, c.PermissionType = kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
		mod(&c)
		creq.Creations = append(creq.Creations, c)
	}
	cresp, err := creq.RequestWith(ctx, cl)
	if err != nil || len(cresp.Results) != 4 {
		t.Fatalf("invalid creations: %v %+v", err, cresp)
	}
	for i, r := range cresp.Results {
		if r.ErrorCode != kerr.InvalidRequest.Code {
			t.Errorf("invalid creation %d: code %d, want INVALID_REQUEST", i, r.ErrorCode)
		}
	}
	dreq := kmsg.NewPtrDescribeACLsRequest()
	dreq.ResourceType = kmsg.ACLResourceTypeUnknown
	if dresp, err := dreq.RequestWith(ctx, cl); err != nil || dresp.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("describe with an UNKNOWN filter: %v %+v", err, dresp)
	}

	// DeleteAcls returns what each filter deleted.
	del, err := adm.DeleteACLs(ctx, kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternPrefixed).Allow().AllowHosts().Operations(kadm.OpWrite))
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, r := range del {
		if r.Err != nil {
			t.Fatalf("delete: %v", r.Err)
		}
		for _, d := range r.Deleted {
			deleted = append(deleted, aclString(d.Principal, d.Host, d.Type, d.Name, d.Pattern, d.Operation, d.Permission))
		}
	}
	slices.Sort(deleted)
	if !slices.Equal(deleted, all[2:]) {
		t.Fatalf("deleted %q, want %q", deleted, all[2:])
	}
	left := all[:2]
	if got := listACLs(t, ctx, adm, anyACLs()); !slices.Equal(got, left) {
		t.Fatalf("after delete: %q, want %q", got, left)
	}

	// The ACLs survive a restart.
	tb.stop()
	tb = startBroker(t, dir)
	if got := listACLs(t, ctx, tb.admin(), anyACLs()); !slices.Equal(got, left) {
		t.Fatalf("after restart: %q, want %q", got, left)
	}
}

// With --authorizer acl the ACL and SCRAM APIs need Describe (to read) or
// Alter (to change) on the cluster.
func TestAuthorizerGuardsSecurityAPIs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// kadm fills in the salt of the upsertions it is given: a new
	// slice each time.
	upsert := func() []kadm.UpsertSCRAM {
		return []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "p"}}
	}
	// kadm turns an authorization error of every user into the call's
	// error.
	alterRefused := func(res kadm.AlteredUserSCRAMs, err error) bool {
		return errors.Is(err, kerr.ClusterAuthorizationFailed) || (err == nil && errors.Is(res["alice"].Err, kerr.ClusterAuthorizationFailed))
	}
	readCluster := kadm.NewACLs().Clusters().Allow(string(auth.Anonymous)).AllowHosts("*").Operations(kadm.OpDescribe)

	t.Run("no acl, default deny", func(t *testing.T) {
		tb := startBroker(t, t.TempDir(), func(c *broker.Config) { c.Authorizer = broker.AuthorizerACL })
		adm := tb.admin()
		if _, err := adm.DescribeUserSCRAMs(ctx); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
			t.Errorf("describe users: got %v, want CLUSTER_AUTHORIZATION_FAILED", err)
		}
		if res, err := adm.AlterUserSCRAMs(ctx, nil, upsert()); !alterRefused(res, err) {
			t.Errorf("alter users: got %v %+v, want CLUSTER_AUTHORIZATION_FAILED", err, res)
		}
		if res, err := adm.CreateACLs(ctx, readCluster); err != nil || len(res) != 1 || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
			t.Errorf("create acls: got %v %+v, want CLUSTER_AUTHORIZATION_FAILED", err, res)
		}
		if res, err := adm.DescribeACLs(ctx, anyACLs()); !errors.Is(err, kerr.ClusterAuthorizationFailed) && (err != nil || len(res) == 0 || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed)) {
			t.Errorf("describe acls: got %v %+v, want CLUSTER_AUTHORIZATION_FAILED", err, res)
		}
		if res, err := adm.DeleteACLs(ctx, anyACLs()); !errors.Is(err, kerr.ClusterAuthorizationFailed) && (err != nil || len(res) == 0 || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed)) {
			t.Errorf("delete acls: got %v %+v, want CLUSTER_AUTHORIZATION_FAILED", err, res)
		}
	})
	t.Run("superuser", func(t *testing.T) {
		tb := startBroker(t, t.TempDir(), func(c *broker.Config) {
			c.Authorizer, c.SuperUsers = broker.AuthorizerACL, []string{string(auth.Anonymous)}
		})
		adm := tb.admin()
		if res, err := adm.AlterUserSCRAMs(ctx, nil, upsert()); err != nil || res.Error() != nil {
			t.Fatalf("alter users as a superuser: %v %v", err, res.Error())
		}
		if got := userCreds(t, ctx, adm); len(got) != 1 {
			t.Fatalf("users %v, want alice", got)
		}
	})
	t.Run("allow if no acl found", func(t *testing.T) {
		tb := startBroker(t, t.TempDir(), func(c *broker.Config) {
			c.Authorizer, c.AllowEveryoneIfNoACLFound = broker.AuthorizerACL, true
		})
		adm := tb.admin()
		// No ACL names the cluster yet: everything is allowed, so
		// this creation is; afterwards the cluster has an ACL that
		// grants Describe only.
		if res, err := adm.CreateACLs(ctx, readCluster); err != nil || res[0].Err != nil {
			t.Fatalf("create the first cluster acl: %v %+v", err, res)
		}
		if res, err := adm.AlterUserSCRAMs(ctx, nil, upsert()); !alterRefused(res, err) {
			t.Errorf("alter users with Describe only: got %v %+v, want CLUSTER_AUTHORIZATION_FAILED", err, res)
		}
		if _, err := adm.DescribeUserSCRAMs(ctx); err != nil {
			t.Errorf("describe users with Describe: %v", err)
		}
		if got := listACLs(t, ctx, adm, anyACLs()); len(got) != 1 {
			t.Errorf("acls %q, want the one", got)
		}
	})
}

// SCRAM users and ACLs created through one broker of a cluster are seen by
// every broker, and hold there: a user logs in on each broker's SASL
// listener, and each enforces the ACLs on it. Also after all of them
// restart.
func TestSecurityStateCluster(t *testing.T) {
	sasl := map[*clusterBroker]string{}
	bs, _ := startClusterWith(t, 3, func(b *clusterBroker) []string {
		sasl[b] = testutil.FreePort(t)
		// The PLAINTEXT listener's anonymous clients (the setup here,
		// and the brokers to each other) are superusers.
		return []string{"--listeners", "plain=PLAINTEXT://" + b.Addr + ",sasl=SASL_PLAINTEXT://" + sasl[b],
			"--sasl-mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512", "--authorizer", "acl", "--superusers", string(auth.Anonymous)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bs[1].Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "a"},
		{User: "bob", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "b"},
	})
	if err != nil || res.Error() != nil {
		t.Fatalf("upsert: %v %v", err, res.Error())
	}
	// CreateAcls goes to any broker, which forwards it to the controller.
	// alice may read telemetry, nothing else.
	acls := createTestACLs(t, ctx, adm)
	slices.Sort(acls)
	for _, topic := range []string{"telemetry", "secret"} {
		if r, err := adm.CreateTopic(ctx, 1, 3, nil, topic); err != nil || r.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, r.Err)
		}
	}

	check := func(when string) {
		t.Helper()
		for _, b := range bs {
			// Each broker on its own, retried while the controller
			// is elected after a restart.
			deadline := time.Now().Add(90 * time.Second)
			for {
				err := checkBrokerSecurity(ctx, b.Addr, acls)
				if err == nil {
					err = checkBrokerEnforces(ctx, sasl[b])
				}
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: broker %d: %v", when, b.ID, err)
				}
				time.Sleep(500 * time.Millisecond)
			}
		}
	}
	check("after creation")
	for _, b := range bs {
		if err := b.Proc.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range bs {
		var join []string
		if i > 0 {
			join = []string{bs[0].GossipAddr}
		}
		b.StartNode(join, 0)
	}
	check("after all restarted")
}

// checkBrokerEnforces logs in as alice on the SASL listener at addr and
// checks that this broker alone lets her see telemetry and not secret,
// and refuses her a produce to telemetry (she may only read it).
func checkBrokerEnforces(ctx context.Context, addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: "alice", Pass: "a"}.AsSha512Mechanism()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	seed := cl.SeedBrokers()[0]
	mresp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, seed)
	if err != nil {
		return fmt.Errorf("alice's login and metadata: %w", err)
	}
	var seen []string
	for _, mt := range mresp.Topics {
		seen = append(seen, *mt.Topic)
	}
	if !slices.Equal(seen, []string{"telemetry"}) {
		return fmt.Errorf("alice sees topics %q, want [telemetry]", seen)
	}
	pr := produceRequest("telemetry", 0, []byte{}, 1, 5000) // refused before the records are read
	presp, err := pr.RequestWith(ctx, seed)
	if err != nil {
		return err
	}
	if code := presp.Topics[0].Partitions[0].ErrorCode; code != kerr.TopicAuthorizationFailed.Code {
		return fmt.Errorf("alice's produce to telemetry: %v, want TOPIC_AUTHORIZATION_FAILED", kerr.ErrorForCode(code))
	}
	return nil
}

// checkBrokerSecurity asks the broker at addr alone for the users and
// ACLs.
func checkBrokerSecurity(ctx context.Context, addr string, acls []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	seed := cl.SeedBrokers()[0] // addr itself, not a broker kgo picks
	ureq := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	uresp, err := ureq.RequestWith(ctx, seed)
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(uresp.ErrorCode); err != nil {
		return err
	}
	users := map[string]int8{}
	for _, r := range uresp.Results {
		for _, ci := range r.CredentialInfos {
			users[r.User] = ci.Mechanism
		}
	}
	if len(users) != 2 || users["alice"] != int8(auth.ScramSHA512) || users["bob"] != int8(auth.ScramSHA256) {
		return errors.New("users: " + jsonString(users))
	}
	areq := kmsg.NewPtrDescribeACLsRequest()
	areq.ResourceType, areq.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	areq.Operation, areq.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	aresp, err := areq.RequestWith(ctx, seed)
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(aresp.ErrorCode); err != nil {
		return err
	}
	var got []string
	for _, r := range aresp.Resources {
		for _, a := range r.ACLs {
			got = append(got, aclString(a.Principal, a.Host, r.ResourceType, r.ResourceName, r.ResourcePatternType, a.Operation, a.PermissionType))
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, acls) {
		return errors.New("acls: " + jsonString(got))
	}
	return nil
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Users created through AlterUserScramCredentials log in over SASL (the
// broker's own store backs SCRAM and PLAIN), their principal is what the
// authorizer judges, and a deleted user cannot log in any more.
func TestScramUsersLogIn(t *testing.T) {
	saslAddr := testutil.FreePort(t)
	tb := startBroker(t, t.TempDir(), func(c *broker.Config) {
		c.Listen = ""
		c.Listeners = []broker.ListenerSpec{
			{Name: "local", Proto: "PLAINTEXT", Addr: "127.0.0.1:0"},
			{Name: "sasl", Proto: "SASL_PLAINTEXT", Addr: saslAddr},
		}
		c.SASL = broker.SASLConfig{Mechanisms: []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"}}
		// The local listener's anonymous clients set things up.
		c.Authorizer, c.SuperUsers = broker.AuthorizerACL, []string{string(auth.Anonymous), "User:admin"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := tb.admin().AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "alice-pw"},
		{User: "admin", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "admin-pw"},
	})
	if err != nil || res.Error() != nil {
		t.Fatalf("add users: %v %v", err, res.Error())
	}
	login := func(m sasl.Mechanism) (*kgo.Client, error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(saslAddr), kgo.SASL(m))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
		defer rcancel()
		_, err = kmsg.NewPtrMetadataRequest().RequestWith(rctx, cl)
		return cl, err
	}

	alice, err := login(scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha512Mechanism())
	if err != nil {
		t.Fatalf("alice's SCRAM-SHA-512 login: %v", err)
	}
	// alice is neither a superuser nor granted anything on the cluster.
	if _, err := kadm.NewClient(alice).DescribeUserSCRAMs(ctx); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice describes users: got %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	if _, err := login(plain.Auth{User: "alice", Pass: "alice-pw"}.AsMechanism()); err != nil {
		t.Fatalf("alice's PLAIN login: %v", err)
	}
	if _, err := login(scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism()); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a wrong password: got %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	if _, err := login(scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism()); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a mechanism alice has no credential for: got %v, want SASL_AUTHENTICATION_FAILED", err)
	}

	admin, err := login(scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism())
	if err != nil {
		t.Fatalf("admin's login: %v", err)
	}
	res, err = kadm.NewClient(admin).AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha512}}, nil)
	if err != nil || res.Error() != nil {
		t.Fatalf("the superuser deletes alice: %v %v", err, res.Error())
	}
	if _, err := login(scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha512Mechanism()); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("alice after her deletion: got %v, want SASL_AUTHENTICATION_FAILED", err)
	}
}
