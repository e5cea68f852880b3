package learner_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
	"github.com/simtel/simtel/learner"
)

// On a broker with --authorizer acl only a principal with Write on
// policy.<name> can publish a version of policy <name>: one that may read
// every policy and write another one's topic gets TOPIC_AUTHORIZATION_FAILED,
// one that may write nothing cannot even start its producer
// (CLUSTER_AUTHORIZATION_FAILED), and neither leaves a version behind;
// with Write on the topic the same principal publishes. Every publisher
// (simtel learner publish, the agent's policy POST) writes through
// learner.Publisher with its own credentials, so this is the check they
// all meet.
func TestPublishNeedsWriteOnThePolicyTopic(t *testing.T) {
	saslAddr := testutil.FreePort(t)
	b := inproc.StartConfig(t, func(c *broker.Config) {
		c.Listen = ""
		c.Listeners = []broker.ListenerSpec{
			{Name: "local", Proto: "PLAINTEXT", Addr: "127.0.0.1:0"},
			{Name: "sasl", Proto: "SASL_PLAINTEXT", Addr: saslAddr},
		}
		c.SASL = broker.SASLConfig{Mechanisms: []string{"SCRAM-SHA-512"}}
		// The local listener's anonymous clients set things up.
		c.Authorizer, c.SuperUsers = broker.AuthorizerACL, []string{string(auth.Anonymous)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	setup, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	adm := kadm.NewClient(setup)
	up := []kadm.UpsertSCRAM{
		{User: "other-learner", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "other-learner-pw"},
		{User: "node", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "node-pw"},
	}
	if res, err := adm.AlterUserSCRAMs(ctx, nil, up); err != nil || res.Error() != nil {
		t.Fatalf("add users: %v %v", err, res.Error())
	}
	createACLs := func(bs ...*kadm.ACLBuilder) {
		t.Helper()
		for _, b := range bs {
			res, err := adm.CreateACLs(ctx, b.AllowHosts("*"))
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
			if err != nil {
				t.Fatalf("create acls: %v", err)
			}
		}
	}
	// Both may read every policy (what a node's subscriber needs, and
	// what Publish reads before it writes); other-learner writes policy
	// other.
	createACLs(
		kadm.NewACLs().Allow("User:other-learner", "User:node").Topics("policy.").
			ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpRead, kadm.OpDescribeConfigs),
		kadm.NewACLs().Allow("User:other-learner").Topics("policy.other").Operations(kadm.OpWrite),
	)

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	publish := func(cl *kgo.Client) (learner.Manifest, error) {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return learner.NewPublisher(cl, logger).Publish(pctx, "ppo", bytes.NewReader([]byte("weights")), nil, nil)
	}
	latest := func() int64 {
		t.Helper()
		m, ok, err := learner.Latest(ctx, setup, "ppo")
		if err != nil {
			t.Fatalf("latest version of ppo: %v", err)
		}
		if !ok {
			return 0
		}
		return m.Version
	}
	// The operator's first version creates the topic (with the configs
	// the publisher wants, so the others need not alter them).
	if m, err := publish(setup); err != nil || m.Version != 1 {
		t.Fatalf("the superuser publishes: version %d, %v", m.Version, err)
	}

	login := func(user string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(saslAddr),
			kgo.SASL(scram.Auth{User: user, Pass: user + "-pw"}.AsSha512Mechanism()),
			kgo.RequestRetries(2), kgo.RetryTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	other, node := login("other-learner"), login("node")
	if _, err := publish(other); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("a learner with Write on policy.other publishes ppo: got %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	// Kafka's rule: an idempotent producer needs IdempotentWrite on the
	// cluster or Write on some topic.
	if _, err := publish(node); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("a node that may write nothing publishes ppo: got %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	if v := latest(); v != 1 {
		t.Fatalf("newest version of ppo after the refused publishes: %d, want 1", v)
	}

	createACLs(kadm.NewACLs().Allow("User:other-learner").Topics("policy.ppo").Operations(kadm.OpWrite))
	m, err := publish(other)
	if err != nil || m.Version != 2 {
		t.Fatalf("with Write on policy.ppo: version %d, %v; want version 2", m.Version, err)
	}
	if v := latest(); v != 2 {
		t.Fatalf("newest version of ppo: %d, want 2", v)
	}
}
