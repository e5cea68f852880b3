package broker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusterTxnExactlyOnceUnderKills is TestTxnExactlyOnceUnderKills on
// three brokers with replication factor 3: the transactional worker
// process (GroupTransactSession copying txn-in to txn-out) is SIGKILLed
// at random points and restarted, and twice (while it copies) the broker that coordinates
// the worker's transactional id (the raft leader of its partition of
// __transaction_state) is SIGKILLed and later restarted while the worker
// runs. Afterwards txn-out read with read_committed holds every input
// record exactly once.
func TestClusterTxnExactlyOnceUnderKills(t *testing.T) {
	const records = 8000
	const kills = 6
	logDir := keptLogDir(t)
	bs, controller, seeds, ctx := startGroupCluster(t, 10*time.Minute)

	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	ctl, err := kgo.NewClient(kgo.SeedBrokers(bs[controller].Addr))
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"txn-in", "txn-out"} {
		if r, err := kadm.NewClient(ctl).CreateTopic(ctx, 3, 3, nil, topic); err != nil || r.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, r.Err)
		}
	}
	ctl.Close()
	progress := writeCopyInput(t, ctx, seeds, adm, records)
	done := func() bool { return progress() == records }
	// txnCoordinator finds the broker coordinating the worker's
	// transactional id.
	txnCoordinator := func() *clusterBroker {
		id := findCoordinator(t, ctx, admCl, 1, "copier")
		if int(id) >= len(bs) {
			t.Fatalf("coordinator %d is not one of the %d brokers", id, len(bs))
		}
		return bs[id]
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	sup := startSupervisor(t, strings.Join(seeds, ","), logDir)
	var down *clusterBroker
	coordKills := 0
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(500+rng.IntN(3000)) * time.Millisecond)
		if down != nil {
			restartWithJoin(t, down, bs)
			t.Logf("restarted broker %d", down.ID)
			down = nil
		}
		if k == 1 || k == 4 {
			down = txnCoordinator()
			at := progress()
			down.Proc.Kill()
			t.Logf("kill %d: SIGKILL of broker %d, the transaction coordinator of the worker, at %d of %d input records committed", k, down.ID, at, records)
			if at >= 0 && at < records {
				coordKills++ // the worker still had work
			}
			continue
		}
		t.Logf("kill %d: SIGKILL of the worker", k)
		sup.worker.Kill()
		sup.replaceExited()
	}
	if down != nil {
		restartWithJoin(t, down, bs)
	}
	sup.runUntil(ctx, done)
	t.Logf("%d worker processes, %d kills (%d of the transaction coordinator's broker while the worker was copying)", sup.started, kills, coordKills)

	seen, total := readOutput(t, ctx, seeds, "txn-out", true)
	checkExactlyOnce(t, seen, total, records, logDir)
}

// TestClusterTxnOffsetsAcrossCoordinators commits transactional offsets
// for a group whose coordinator is another broker than the transactional
// id's: the group's coordinator passes the offsets on to the transaction
// coordinator. That hop once went out at the peer client's highest
// version, was taken for a client's request there and refused with
// NOT_COORDINATOR, so such transactions could only abort.
func TestClusterTxnOffsetsAcrossCoordinators(t *testing.T) {
	x := startCrossTxn(t)
	if err := x.cl.EndTransaction(x.ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	x.waitCommitted(t, 42)
}

// TestClusterTxnPendingOffsetsAfterGroupCoordinatorFailover: a
// transaction holds offsets of a group whose coordinator (another broker
// than the transaction's) is SIGKILLed. The group's new coordinator must
// still answer a RequireStable OffsetFetch with UNSTABLE_OFFSET_COMMIT
// until the transaction ends (the mark of the passed-on offsets died with
// the old coordinator; the new one asks the transaction coordinators),
// then the committed offset.
func TestClusterTxnPendingOffsetsAfterGroupCoordinatorFailover(t *testing.T) {
	x := startCrossTxn(t)
	x.waitStable(t, "UNSTABLE_OFFSET_COMMIT before the failover", kerr.UnstableOffsetCommit.Code)
	old := x.bs[x.groupCoord]
	old.Proc.Kill()
	t.Logf("SIGKILL of broker %d, the group's coordinator", old.ID)
	waitUntil(t, 2*time.Minute, "a new coordinator for the group", func() string {
		if id := findCoordinator(t, x.ctx, x.adm, 0, x.grp); id == x.groupCoord {
			return fmt.Sprintf("still broker %d", id)
		}
		return ""
	})
	x.waitStable(t, "UNSTABLE_OFFSET_COMMIT from the new coordinator", kerr.UnstableOffsetCommit.Code)
	if err := x.cl.EndTransaction(x.ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	x.waitCommitted(t, 42)
	x.waitStable(t, "a stable offset after the commit", 0)
}

// crossTxn is an open transaction that holds offset 42 of xc-in/0 for a
// group coordinated by another broker than the transaction.
type crossTxn struct {
	ctx        context.Context
	seeds      []string
	bs         []*clusterBroker
	adm, cl    *kgo.Client
	grp        string
	groupCoord int32
}

func startCrossTxn(t *testing.T) *crossTxn {
	t.Helper()
	bs, _, seeds, ctx := startGroupCluster(t, 4*time.Minute)
	createTopic(t, ctx, seeds, "xc-in", 1, 3)
	createTopic(t, ctx, seeds, "xc-out", 1, 3)
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close)
	// A transactional id and a group coordinated by different brokers.
	txnID, grp, gc := "", "", int32(-1)
	for i := 0; txnID == "" && i < 200; i++ {
		id, g := fmt.Sprintf("xc-txn-%d", i), fmt.Sprintf("xc-group-%d", i)
		if tc, c := findCoordinator(t, ctx, admCl, 1, id), findCoordinator(t, ctx, admCl, 0, g); tc != c {
			txnID, grp, gc = id, g, c
			t.Logf("transactional id %s coordinated by broker %d, group %s by broker %d", id, tc, g, c)
		}
	}
	if txnID == "" {
		t.Fatal("every transactional id and group tried had the same coordinator")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic("xc-out"), kgo.RequestRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord("copied")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, pid, epoch, grp
	addResp, err := add.RequestWith(ctx, cl)
	if err != nil || addResp.ErrorCode != 0 {
		t.Fatalf("AddOffsetsToTxn: %v, code %d", err, addResp.ErrorCode)
	}
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = txnID, grp, pid, epoch
	commit.Generation = -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = "xc-in"
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = 0, 42, -1
	rt.Partitions = append(rt.Partitions, rp)
	commit.Topics = append(commit.Topics, rt)
	start := time.Now()
	commitResp, err := commit.RequestWith(ctx, cl) // kgo sends it to the group's coordinator
	if err != nil {
		t.Fatalf("TxnOffsetCommit: %v", err)
	}
	for _, t2 := range commitResp.Topics {
		for _, p := range t2.Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("TxnOffsetCommit v%d for %s-%d answered %v after %v", commitResp.Version, t2.Topic, p.Partition,
					kerr.ErrorForCode(p.ErrorCode), time.Since(start).Round(time.Millisecond))
			}
		}
	}
	return &crossTxn{ctx: ctx, seeds: seeds, bs: bs, adm: admCl, cl: cl, grp: grp, groupCoord: gc}
}

// fresh is a new client (one that has not cached a dead coordinator).
func (x *crossTxn) fresh(t *testing.T) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(x.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// stableFetch asks the group's coordinator for xc-in/0 with RequireStable
// and returns the partition's error code, or the request's error (a
// coordinator that just died).
func (x *crossTxn) stableFetch(t *testing.T) (int16, error) {
	t.Helper()
	cl := x.fresh(t)
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group, req.RequireStable = x.grp, true
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "xc-in", []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(x.ctx, cl)
	if err != nil {
		return 0, err
	}
	if resp.ErrorCode != 0 {
		return resp.ErrorCode, nil
	}
	for _, t2 := range resp.Topics {
		for _, p := range t2.Partitions {
			return p.ErrorCode, nil
		}
	}
	return 0, fmt.Errorf("OffsetFetch answered no partition: %+v", resp)
}

// waitStable waits until stableFetch answers want.
func (x *crossTxn) waitStable(t *testing.T, what string, want int16) {
	t.Helper()
	waitUntil(t, 2*time.Minute, what, func() string {
		got, err := x.stableFetch(t)
		switch {
		case err != nil:
			return err.Error()
		case got != want:
			return fmt.Sprintf("answered %v", kerr.ErrorForCode(got))
		}
		return ""
	})
}

// waitCommitted waits until the group's committed offset of xc-in/0 is at.
func (x *crossTxn) waitCommitted(t *testing.T, at int64) {
	t.Helper()
	cl := x.fresh(t)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	waitUntil(t, time.Minute, "the committed transaction's offset in the group", func() string {
		offs, err := adm.FetchOffsets(x.ctx, x.grp)
		if err != nil {
			return err.Error()
		}
		o, ok := offs.Lookup("xc-in", 0)
		if !ok || o.At != at {
			return fmt.Sprintf("group %s offsets %+v", x.grp, offs)
		}
		return ""
	})
}
