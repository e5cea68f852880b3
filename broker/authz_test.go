package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// aclBroker is a broker with --authorizer acl, a PLAINTEXT listener whose
// anonymous clients are superusers (setup, through tb.admin()) and a
// SASL_PLAINTEXT one (SASL) with SCRAM-SHA-512; User:admin is a superuser
// too.
type aclBroker struct {
	*testBroker
	SASL string
}

func startACLBroker(t *testing.T, mods ...func(*broker.Config)) *aclBroker {
	t.Helper()
	ab := &aclBroker{SASL: testutil.FreePort(t)}
	mods = append([]func(*broker.Config){func(c *broker.Config) {
		c.Listen = ""
		c.Listeners = []broker.ListenerSpec{
			{Name: "local", Proto: "PLAINTEXT", Addr: "127.0.0.1:0"},
			{Name: "sasl", Proto: "SASL_PLAINTEXT", Addr: ab.SASL},
		}
		c.SASL = broker.SASLConfig{Mechanisms: []string{"SCRAM-SHA-512"}}
		c.Authorizer, c.SuperUsers = broker.AuthorizerACL, []string{string(auth.Anonymous), "User:admin"}
	}}, mods...)
	ab.testBroker = startBroker(t, t.TempDir(), mods...)
	return ab
}

// users adds SCRAM-SHA-512 users through kadm; each password is the name
// with "-pw".
func (ab *aclBroker) users(t *testing.T, ctx context.Context, names ...string) {
	t.Helper()
	var up []kadm.UpsertSCRAM
	for _, n := range names {
		up = append(up, kadm.UpsertSCRAM{User: n, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: n + "-pw"})
	}
	if res, err := ab.admin().AlterUserSCRAMs(ctx, nil, up); err != nil || res.Error() != nil {
		t.Fatalf("add users %v: %v %v", names, err, res.Error())
	}
}

// seed creates topics, as a superuser, with one record "in <topic>"
// each, and returns that superuser's client.
func (ab *aclBroker) seed(t *testing.T, ctx context.Context, topics ...string) *kgo.Client {
	t.Helper()
	setup := ab.client(kgo.AllowAutoTopicCreation())
	for _, topic := range topics {
		if err := setup.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("in " + topic)}).FirstErr(); err != nil {
			t.Fatalf("setup produce to %s: %v", topic, err)
		}
	}
	return setup
}

// acls creates ACLs through kadm.
func (ab *aclBroker) acls(t *testing.T, ctx context.Context, bs ...*kadm.ACLBuilder) {
	t.Helper()
	for _, b := range bs {
		res, err := ab.admin().CreateACLs(ctx, b.AllowHosts("*"))
		if err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			t.Fatalf("create acls: %v", err)
		}
	}
}

// login is a client of user on the SASL listener.
func (ab *aclBroker) login(t *testing.T, user string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(ab.SASL),
		kgo.SASL(scram.Auth{User: user, Pass: user + "-pw"}.AsSha512Mechanism()),
		kgo.RequestRetries(1), kgo.RetryTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// wantCode fails unless err or code is want.
func wantCode(t *testing.T, what string, err error, code int16, want *kerr.Error) {
	t.Helper()
	if errors.Is(err, want) || (err == nil && code == want.Code) {
		return
	}
	t.Errorf("%s: got err %v, code %v; want %s", what, err, kerr.ErrorForCode(code), want.Message)
}

func metadataTopics(t *testing.T, ctx context.Context, cl *kgo.Client, topics ...string) map[string]int16 {
	t.Helper()
	req := metadataRequest(topics...)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	out := map[string]int16{}
	for _, mt := range resp.Topics {
		out[*mt.Topic] = mt.ErrorCode
	}
	return out
}

// initProducerID sends InitProducerID, with transactional id id unless it
// is empty (an idempotent producer), and returns its error code.
func initProducerID(ctx context.Context, cl *kgo.Client, id string) (int16, error) {
	req := kmsg.NewPtrInitProducerIDRequest()
	if id != "" {
		req.TransactionalID = kmsg.StringPtr(id)
		req.TransactionTimeoutMillis = 10000
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	return resp.ErrorCode, nil
}

func describeCluster(ctx context.Context, cl *kgo.Client) (int16, error) {
	resp, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	return resp.ErrorCode, nil
}

// A principal allowed only Read on topic A (and Read on one group) can
// consume A and commit for that group, and nothing else, each refusal with
// Kafka's error code.
func TestACLEnforcement(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	ab := startACLBroker(t)
	ab.users(t, ctx, "reader", "admin")
	ab.seed(t, ctx, "a", "b")
	ab.acls(t, ctx,
		kadm.NewACLs().Allow("User:reader").Topics("a").Operations(kadm.OpRead),
		kadm.NewACLs().Allow("User:reader").Groups("g-ok").Operations(kadm.OpRead),
	)

	reader := ab.login(t, "reader", kgo.DisableIdempotentWrite())
	adm := kadm.NewClient(reader)

	t.Run("consume a", func(t *testing.T) {
		cl := ab.login(t, "reader", kgo.ConsumeTopics("a"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil || len(fs.Records()) != 1 {
			t.Fatalf("reader consumes a: %v, %d records", err, len(fs.Records()))
		}
	})
	t.Run("produce to a", func(t *testing.T) {
		err := reader.ProduceSync(ctx, &kgo.Record{Topic: "a", Value: []byte("x")}).FirstErr()
		wantCode(t, "produce to a", err, 0, kerr.TopicAuthorizationFailed)
	})
	t.Run("fetch b", func(t *testing.T) {
		resp, err := fetchOne("b", 0, 0, 1<<20).RequestWith(ctx, reader)
		code := int16(0)
		if err == nil {
			code = resp.Topics[0].Partitions[0].ErrorCode
		}
		wantCode(t, "fetch b", err, code, kerr.TopicAuthorizationFailed)
		if err == nil && len(resp.Topics[0].Partitions[0].RecordBatches) != 0 {
			t.Errorf("fetch b returned records")
		}
	})
	t.Run("list offsets of b", func(t *testing.T) {
		res, err := adm.ListEndOffsets(ctx, "b")
		code := int16(0)
		if err == nil {
			if o, ok := res.Lookup("b", 0); ok && o.Err != nil {
				err = o.Err
			}
		}
		wantCode(t, "list offsets of b", err, code, kerr.TopicAuthorizationFailed)
	})
	t.Run("metadata hides b", func(t *testing.T) {
		all := metadataTopics(t, ctx, reader)
		if _, ok := all["b"]; ok {
			t.Errorf("metadata of all topics shows b: %v", all)
		}
		if code, ok := all["a"]; !ok || code != 0 {
			t.Errorf("metadata of all topics: a %v %v", ok, kerr.ErrorForCode(code))
		}
		named := metadataTopics(t, ctx, reader, "b")
		wantCode(t, "metadata of b", nil, named["b"], kerr.TopicAuthorizationFailed)
		// Auto-creation needs Create: refused, and nothing created.
		named = metadataTopics(t, ctx, reader, "c")
		wantCode(t, "metadata auto-creating c", nil, named["c"], kerr.TopicAuthorizationFailed)
		if got := metadataTopics(t, ctx, ab.client(), "c"); got["c"] != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("c was created: %v", kerr.ErrorForCode(got["c"]))
		}
	})
	t.Run("create and delete topics", func(t *testing.T) {
		res, err := adm.CreateTopic(ctx, 1, 1, nil, "new")
		wantCode(t, "create topic", errors.Join(err, res.Err), 0, kerr.TopicAuthorizationFailed)
		dres, err := adm.DeleteTopics(ctx, "a")
		if err == nil {
			err = dres["a"].Err
		}
		wantCode(t, "delete topic a", err, 0, kerr.TopicAuthorizationFailed)
		pres, err := adm.CreatePartitions(ctx, 1, "a")
		if err == nil {
			err = pres["a"].Err
		}
		wantCode(t, "create partitions of a", err, 0, kerr.TopicAuthorizationFailed)
		rres, err := adm.DeleteRecords(ctx, kadm.Offsets{"a": {0: {At: 1}}})
		if err == nil {
			if r, ok := rres.Lookup("a", 0); ok {
				err = r.Err
			}
		}
		wantCode(t, "delete records of a", err, 0, kerr.TopicAuthorizationFailed)
	})
	t.Run("configs", func(t *testing.T) {
		rc, err := adm.DescribeTopicConfigs(ctx, "b")
		if err == nil {
			var c kadm.ResourceConfig
			c, err = rc.On("b", nil)
			err = errors.Join(err, c.Err)
		}
		wantCode(t, "describe configs of b", err, 0, kerr.TopicAuthorizationFailed)
		ac, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("1000")}}, "a")
		if err == nil {
			var c kadm.AlterConfigsResponse
			c, err = ac.On("a", nil)
			err = errors.Join(err, c.Err)
		}
		wantCode(t, "alter configs of a", err, 0, kerr.TopicAuthorizationFailed)
		bc, err := adm.DescribeBrokerConfigs(ctx)
		if err == nil && len(bc) > 0 {
			err = bc[0].Err
		}
		wantCode(t, "describe broker configs", err, 0, kerr.ClusterAuthorizationFailed)
	})
	t.Run("commit offsets", func(t *testing.T) {
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: "a", Partition: 0, At: 1})
		res, err := adm.CommitOffsets(ctx, "g-no", offs)
		if err == nil {
			err = res.Error()
		}
		wantCode(t, "commit for group g-no", err, 0, kerr.GroupAuthorizationFailed)
		if res, err := adm.CommitOffsets(ctx, "g-ok", offs); err != nil || res.Error() != nil {
			t.Errorf("commit a for group g-ok: %v %v", err, res.Error())
		}
		// kadm resolves topics through Metadata, which hides b: a
		// request of its own.
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation = "g-ok", -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "b"
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Offset = 1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		cresp, err := req.RequestWith(ctx, reader)
		code := int16(0)
		if err == nil {
			code = cresp.Topics[0].Partitions[0].ErrorCode
		}
		wantCode(t, "commit b for group g-ok", err, code, kerr.TopicAuthorizationFailed)
		fetched, err := adm.FetchOffsets(ctx, "g-ok")
		if err != nil || fetched.Error() != nil {
			t.Fatalf("fetch offsets of g-ok: %v %v", err, fetched.Error())
		}
		if o, ok := fetched.Lookup("a", 0); !ok || o.At != 1 {
			t.Errorf("g-ok's offset of a: %+v %v", o, ok)
		}
		groups, err := adm.ListGroups(ctx)
		if err != nil {
			t.Fatalf("list groups: %v", err)
		}
		if got := groups.Groups(); !slices.Equal(got, []string{"g-ok"}) {
			t.Errorf("reader lists groups %v, want [g-ok]", got)
		}
	})
	t.Run("transactional id", func(t *testing.T) {
		code, err := initProducerID(ctx, reader, "tx")
		wantCode(t, "init producer id with transactional id tx", err, code, kerr.TransactionalIDAuthorizationFailed)
		txn := ab.login(t, "reader", kgo.TransactionalID("tx"))
		wantCode(t, "begin a transaction with id tx", txn.BeginTransaction(), 0, kerr.TransactionalIDAuthorizationFailed)
		if err := txn.BeginTransaction(); err == nil {
			err = txn.ProduceSync(ctx, &kgo.Record{Topic: "a", Value: []byte("x")}).FirstErr()
			wantCode(t, "transactional produce with id tx", err, 0, kerr.TransactionalIDAuthorizationFailed)
		}
	})
	t.Run("idempotent producer", func(t *testing.T) {
		code, err := initProducerID(ctx, reader, "")
		wantCode(t, "init producer id without Write anywhere", err, code, kerr.ClusterAuthorizationFailed)
	})
	t.Run("cluster", func(t *testing.T) {
		code, err := describeCluster(ctx, reader)
		wantCode(t, "describe cluster", err, code, kerr.ClusterAuthorizationFailed)
	})
	t.Run("superuser", func(t *testing.T) {
		su := ab.login(t, "admin", kgo.AllowAutoTopicCreation())
		if err := su.ProduceSync(ctx, &kgo.Record{Topic: "b", Value: []byte("by admin")}).FirstErr(); err != nil {
			t.Fatalf("admin produces to b: %v", err)
		}
		sadm := kadm.NewClient(su)
		if res, err := sadm.CreateTopic(ctx, 1, 1, nil, "made-by-admin"); err != nil || res.Err != nil {
			t.Fatalf("admin creates a topic: %v %v", err, res.Err)
		}
		if res, err := sadm.DeleteTopics(ctx, "made-by-admin"); err != nil || res.Error() != nil {
			t.Fatalf("admin deletes a topic: %v %v", err, res.Error())
		}
		if code, err := describeCluster(ctx, su); err != nil || code != 0 {
			t.Fatalf("admin describes the cluster: %v %v", err, kerr.ErrorForCode(code))
		}
		txn := ab.login(t, "admin", kgo.TransactionalID("tx"))
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(ctx, &kgo.Record{Topic: "a", Value: []byte("in a transaction")}).FirstErr(); err != nil {
			t.Fatalf("admin's transactional produce: %v", err)
		}
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("admin commits: %v", err)
		}
	})
}

// With --allow-everyone-if-no-acl-found a resource no ACL names is open to
// everyone; one that has an ACL is not.
func TestACLAllowEveryoneIfNoACLFound(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	ab := startACLBroker(t, func(c *broker.Config) { c.AllowEveryoneIfNoACLFound = true })
	ab.users(t, ctx, "bob")
	ab.acls(t, ctx, kadm.NewACLs().Allow("User:someone").Topics("guarded").Operations(kadm.OpAll))
	bob := ab.login(t, "bob", kgo.AllowAutoTopicCreation())
	if err := bob.ProduceSync(ctx, &kgo.Record{Topic: "open", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("bob produces to a topic no acl names: %v", err)
	}
	createTopicRF1(t, ctx, kadm.NewClient(ab.client()), "guarded", 1)
	err := bob.ProduceSync(ctx, &kgo.Record{Topic: "guarded", Value: []byte("x")}).FirstErr()
	wantCode(t, "bob produces to a guarded topic", err, 0, kerr.TopicAuthorizationFailed)
}

// seedRequest sends req to the broker at addr itself (not one a client
// picks from the metadata).
func seedRequest(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return cl.SeedBrokers()[0].Request(ctx, req)
}

// ACLs created through one broker of a cluster are enforced by every
// broker, and the brokers' own requests to each other (transaction
// markers) pass once their principal has ClusterAction on the cluster.
func TestACLEnforcementCluster(t *testing.T) {
	bs := brokertest.StartCluster(t, 3,
		brokertest.Args("--authorizer", "acl", "--allow-everyone-if-no-acl-found"),
		brokertest.Topic("open", 3), brokertest.Topic("closed", 1))
	ctx := ctxT(t, 3*time.Minute)
	cl, err := kgo.NewClient(kgo.SeedBrokers(bs[1].Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	create := func(b *kadm.ACLBuilder) {
		t.Helper()
		res, err := adm.CreateACLs(ctx, b)
		for _, r := range res {
			err = errors.Join(err, r.Err)
		}
		if err != nil {
			t.Fatalf("create acls: %v", err)
		}
	}
	// Every client here, and each broker to the others, is
	// User:ANONYMOUS on the PLAINTEXT listener.
	create(kadm.NewACLs().Deny(string(auth.Anonymous)).DenyHosts("*").Topics("closed").Operations(kadm.OpAll))

	for _, b := range bs {
		waitUntil(t, 90*time.Second, "the acl on every broker", func() string {
			pr := produceRequest("closed", 0, []byte{}, 1, 5000) // refused before the records are read
			resp, err := seedRequest(ctx, b.Addr, pr)
			if err != nil {
				return err.Error()
			}
			if code := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.TopicAuthorizationFailed.Code {
				return fmt.Sprintf("broker %d: produce to closed: %v", b.ID, kerr.ErrorForCode(code))
			}
			mresp, err := seedRequest(ctx, b.Addr, kmsg.NewPtrMetadataRequest())
			if err != nil {
				return err.Error()
			}
			for _, mt := range mresp.(*kmsg.MetadataResponse).Topics {
				if *mt.Topic == "closed" {
					return fmt.Sprintf("broker %d lists closed", b.ID)
				}
			}
			return ""
		})
	}

	transact := func(id string, n int) {
		t.Helper()
		p, err := kgo.NewClient(kgo.SeedBrokers(brokertest.Addrs(bs)...), kgo.TransactionalID(id),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := p.ProduceSync(ctx, &kgo.Record{Topic: "open", Value: []byte(fmt.Sprintf("%s-%d", id, i))}).FirstErr(); err != nil {
				t.Fatalf("%s: produce: %v", id, err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("%s: commit: %v", id, err)
		}
	}
	// No ACL names the cluster yet: allowed to everyone.
	transact("tx-open", 3)
	// Once the cluster has ACLs, the brokers' principal needs
	// ClusterAction for the markers and IdempotentWrite for producers.
	create(kadm.NewACLs().Allow(string(auth.Anonymous)).AllowHosts("*").Clusters().
		Operations(kadm.OpClusterAction, kadm.OpIdempotentWrite, kadm.OpAlter, kadm.OpDescribe))
	transact("tx-granted", 3)

	c, err := kgo.NewClient(kgo.SeedBrokers(brokertest.Addrs(bs)...), kgo.ConsumeTopics("open"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Without the markers the records never become readable: wait
	// a minute at most.
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var got []string
	for len(got) < 6 && pctx.Err() == nil {
		c.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	slices.Sort(got)
	want := []string{"tx-granted-0", "tx-granted-1", "tx-granted-2", "tx-open-0", "tx-open-1", "tx-open-2"}
	if !slices.Equal(got, want) {
		t.Fatalf("committed records %q, want %q", got, want)
	}
}

// A principal's transactional requests each need their own ACL: Write on
// the transactional id (Describe is not enough), Read on the group whose
// offsets the transaction commits and on each topic of those offsets.
// Each refusal carries Kafka's error code; with the ACLs the transaction
// commits its records and offsets.
func TestACLEnforcementTransactions(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	ab := startACLBroker(t)
	ab.users(t, ctx, "etl")
	setup := ab.seed(t, ctx, "in", "out")
	ab.acls(t, ctx,
		kadm.NewACLs().Allow("User:etl").Topics("in").Operations(kadm.OpRead),
		kadm.NewACLs().Allow("User:etl").Topics("out").Operations(kadm.OpWrite),
		kadm.NewACLs().Allow("User:etl").TransactionalIDs("etl-ok").Operations(kadm.OpWrite),
		kadm.NewACLs().Allow("User:etl").TransactionalIDs("etl-describe").Operations(kadm.OpDescribe),
		kadm.NewACLs().Allow("User:etl").Groups("g-ok").Operations(kadm.OpRead),
	)
	etl := ab.login(t, "etl")

	t.Run("transactional id with Describe only", func(t *testing.T) {
		code, err := initProducerID(ctx, etl, "etl-describe")
		wantCode(t, "init producer id with etl-describe", err, code, kerr.TransactionalIDAuthorizationFailed)
		end := kmsg.NewPtrEndTxnRequest()
		end.TransactionalID, end.ProducerID, end.Commit = "etl-describe", 1, true
		eresp, err := end.RequestWith(ctx, etl)
		if err == nil {
			code = eresp.ErrorCode
		}
		wantCode(t, "end a transaction of etl-describe", err, code, kerr.TransactionalIDAuthorizationFailed)
	})

	txn := ab.login(t, "etl", kgo.TransactionalID("etl-ok"))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte("etl")}).FirstErr(); err != nil {
		t.Fatalf("transactional produce to out: %v", err)
	}
	pid, epoch, err := txn.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addOffsets := func(group string) (int16, error) {
		req := kmsg.NewPtrAddOffsetsToTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = "etl-ok", pid, epoch, group
		resp, err := req.RequestWith(ctx, etl)
		if err != nil {
			return 0, err
		}
		return resp.ErrorCode, nil
	}
	commitOffset := func(group, topic string) (int16, error) {
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = "etl-ok", group, pid, epoch
		req.Generation = -1
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Offset = 1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, etl)
		if err != nil {
			return 0, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return 0, fmt.Errorf("answer for %d topics", len(resp.Topics))
		}
		return resp.Topics[0].Partitions[0].ErrorCode, nil
	}
	code, err := addOffsets("g-no")
	wantCode(t, "add offsets of a group without Read", err, code, kerr.GroupAuthorizationFailed)
	code, err = commitOffset("g-no", "in")
	wantCode(t, "transactional commit for a group without Read", err, code, kerr.GroupAuthorizationFailed)
	if code, err := addOffsets("g-ok"); err != nil || code != 0 {
		t.Fatalf("add offsets of g-ok: %v %v", err, kerr.ErrorForCode(code))
	}
	code, err = commitOffset("g-ok", "out")
	wantCode(t, "transactional commit of a topic without Read", err, code, kerr.TopicAuthorizationFailed)
	if code, err := commitOffset("g-ok", "in"); err != nil || code != 0 {
		t.Fatalf("transactional commit of in for g-ok: %v %v", err, kerr.ErrorForCode(code))
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	fetched, err := kadm.NewClient(setup).FetchOffsets(ctx, "g-ok")
	if err != nil || fetched.Error() != nil {
		t.Fatalf("fetch offsets of g-ok: %v %v", err, fetched.Error())
	}
	if o, ok := fetched.Lookup("in", 0); !ok || o.At != 1 {
		t.Errorf("g-ok's committed offset of in: %+v %v, want 1", o, ok)
	}
	if _, ok := fetched.Lookup("out", 0); ok {
		t.Errorf("g-ok has an offset of out, which etl may not read")
	}
}

// An ACL naming a host matches clients connecting from that address: the
// authorizer sees the bare address, as ACLs write it.
func TestACLHostMatch(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	ab := startACLBroker(t)
	ab.users(t, ctx, "bob")
	for _, b := range []*kadm.ACLBuilder{
		kadm.NewACLs().Allow("User:bob").AllowHosts("127.0.0.1").Topics("here").Operations(kadm.OpWrite, kadm.OpDescribe),
		kadm.NewACLs().Allow("User:bob").AllowHosts("10.9.9.9").Topics("there").Operations(kadm.OpWrite, kadm.OpDescribe),
	} {
		res, err := ab.admin().CreateACLs(ctx, b)
		for _, r := range res {
			err = errors.Join(err, r.Err)
		}
		if err != nil {
			t.Fatalf("create acls: %v", err)
		}
	}
	createTopicRF1(t, ctx, kadm.NewClient(ab.client()), "here", 1)
	createTopicRF1(t, ctx, kadm.NewClient(ab.client()), "there", 1)
	bob := ab.login(t, "bob")
	if err := bob.ProduceSync(ctx, &kgo.Record{Topic: "here", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("bob produces from the host his ACL names: %v", err)
	}
	err := bob.ProduceSync(ctx, &kgo.Record{Topic: "there", Value: []byte("x")}).FirstErr()
	wantCode(t, "bob produces from a host his ACL does not name", err, 0, kerr.TopicAuthorizationFailed)
}
