package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// markersAllowed asks the broker at addr to write a marker to a partition
// that does not exist: false if it refuses for want of ClusterAction (the
// check comes before the partition is looked up).
func markersAllowed(ctx context.Context, addr string) (bool, error) {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = 1, 0, true
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = "no-such-topic", []int32{0}
	m.Topics = append(m.Topics, mt)
	req.Markers = append(req.Markers, m)
	resp, err := seedRequest(ctx, addr, req)
	if err != nil {
		return false, err
	}
	for _, rm := range resp.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode == kerr.ClusterAuthorizationFailed.Code {
					return false, nil
				}
			}
		}
	}
	return true, nil
}

// A transaction across brokers whose markers the other brokers refuse
// (the brokers' principal lost ClusterAction while it was open) does not
// end silently: EndTxn does not answer success, the coordinator logs the
// refusal at error level and counts it, and the records stay unreadable;
// once the principal has ClusterAction again the coordinator writes the
// markers, the producer's commit returns and every record is readable.
func TestTxnMarkersRefused(t *testing.T) {
	bs := brokertest.StartCluster(t, 3,
		brokertest.Args("--authorizer", "acl", "--allow-everyone-if-no-acl-found"),
		brokertest.Topic("spread", 3))
	ctx := ctxT(t, 4*time.Minute)
	seeds := brokertest.Addrs(bs)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	// The coordinator writes the marker of a partition it leads itself;
	// with the leaders on two brokers or more, some partition is led by
	// another broker whatever broker coordinates.
	waitUntil(t, 60*time.Second, "the partitions' leaders on two brokers", func() string {
		md, err := adm.Metadata(ctx, "spread")
		if err != nil {
			return err.Error()
		}
		leaders := map[int32]bool{}
		for _, p := range md.Topics["spread"].Partitions {
			leaders[p.Leader] = true
		}
		if len(leaders) < 2 {
			return fmt.Sprintf("leaders %v", leaders)
		}
		return ""
	})

	// Every client here and each broker to the others is User:ANONYMOUS
	// on the PLAINTEXT listener. Once the cluster has an ACL it is no
	// longer open to everyone: the ACLs name what ANONYMOUS may do on it.
	anon := string(auth.Anonymous)
	base := kadm.NewACLs().Allow(anon).AllowHosts("*").Clusters().
		Operations(kadm.OpIdempotentWrite, kadm.OpAlter, kadm.OpDescribe)
	clusterAction := kadm.NewACLs().Allow(anon).AllowHosts("*").Clusters().
		ResourcePatternType(kadm.ACLPatternLiteral).Operations(kadm.OpClusterAction)
	for _, b := range []*kadm.ACLBuilder{base, clusterAction} {
		res, err := adm.CreateACLs(ctx, b)
		for _, r := range res {
			err = errors.Join(err, r.Err)
		}
		if err != nil {
			t.Fatalf("create acls: %v", err)
		}
	}
	markersEverywhere := func(want bool) {
		t.Helper()
		for _, b := range bs {
			waitUntil(t, 90*time.Second, fmt.Sprintf("broker %d allowing markers: %v", b.ID, want), func() string {
				ok, err := markersAllowed(ctx, b.Addr)
				if err != nil {
					return err.Error()
				}
				if ok != want {
					return fmt.Sprintf("broker %d allows markers: %v", b.ID, ok)
				}
				return ""
			})
		}
	}
	markersEverywhere(true)

	// The transaction outlives the waits for the ACL changes.
	p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("refused-tx"), kgo.TransactionTimeout(3*time.Minute),
		kgo.DefaultProduceTopic("spread"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for part := range int32(3) {
		if err := p.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte(fmt.Sprint(part))}).FirstErr(); err != nil {
			t.Fatalf("transactional produce to partition %d: %v", part, err)
		}
	}

	// The brokers' principal loses ClusterAction before the commit.
	if res, err := adm.DeleteACLs(ctx, clusterAction); err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("delete the ClusterAction acl: %v %+v", err, res)
	}
	markersEverywhere(false)

	committed := make(chan error, 1)
	go func() { committed <- p.EndTransaction(ctx, kgo.TryCommit) }()

	refusals := func() float64 {
		n := 0.0
		for _, b := range bs {
			v, _ := metricSum(b.HTTPAddr, "simtel_broker_txn_completion_failures_total", `reason="refused"`)
			n += v
		}
		return n
	}
	completing := func() float64 {
		n := 0.0
		for _, b := range bs {
			v, _ := metricSum(b.HTTPAddr, "simtel_broker_txn_completing")
			n += v
		}
		return n
	}
	waitUntil(t, 60*time.Second, "the refused markers counted and logged", func() string {
		if n := refusals(); n < 2 {
			return fmt.Sprintf("%v refusals counted", n)
		}
		if completing() != 1 {
			return "no transaction counted as completing"
		}
		for _, b := range bs {
			log, _ := os.ReadFile(b.Proc.Log)
			for _, line := range strings.Split(string(log), "\n") {
				if strings.Contains(line, "level=ERROR") && strings.Contains(line, "refuses this transaction's markers") &&
					strings.Contains(line, "refused-tx") {
					return ""
				}
			}
		}
		return "no error logged"
	})
	select {
	case err := <-committed:
		t.Fatalf("the commit returned (%v) while its markers are refused", err)
	default:
	}
	if got := readCommittedWithin(ctx, seeds, 3*time.Second); len(got) == 3 {
		t.Fatalf("all records of the transaction are readable while its markers are refused: %q", got)
	}

	// The operator grants ClusterAction again: the coordinator writes the
	// markers and the producer's commit succeeds.
	res, err := adm.CreateACLs(ctx, clusterAction)
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("create the ClusterAction acl again: %v %+v", err, res)
	}
	select {
	case err := <-committed:
		if err != nil {
			t.Fatalf("commit once the markers are allowed: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the commit did not return within 90s of the markers being allowed")
	}
	if got := readCommittedWithin(ctx, seeds, 30*time.Second); !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Fatalf("read committed %q, want the transaction's three records", got)
	}
	if n := completing(); n != 0 {
		t.Errorf("%v transactions still counted as completing", n)
	}
}

// readCommittedWithin reads topic spread with read_committed for at most
// d (less once it has three records) and returns the values, sorted.
func readCommittedWithin(ctx context.Context, seeds []string, d time.Duration) []string {
	c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("spread"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return []string{err.Error()}
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var got []string
	for len(got) < 3 && ctx.Err() == nil {
		c.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	slices.Sort(got)
	return got
}
