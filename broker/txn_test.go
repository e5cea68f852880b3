package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// consumeAll reads want records of topic from the start with the given
// isolation level (control records are not returned) and fails the test
// on a fetch error or if ctx ends first.
func consumeAll(t *testing.T, ctx context.Context, addr, topic string, committed bool, want int) []string {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	return brokertest.Values(brokertest.Read(t, ctx, []string{addr}, topic, want,
		brokertest.ReadClient(kgo.FetchIsolationLevel(iso)), brokertest.OnFetchError(brokertest.FailFetchErrors)))
}

// startTxnBroker starts a broker with topic (parts partitions) and, on a
// client of it, sends InitProducerID for the transactional id id (a 60s
// transaction timeout): the start of the tests that send the transaction
// APIs by hand. They run within a minute.
func startTxnBroker(t *testing.T, topic string, parts int32, id string) (context.Context, *kgo.Client, *kmsg.InitProducerIDResponse) {
	t.Helper()
	tb := startBroker(t, t.TempDir())
	ctx := ctxT(t, time.Minute)
	cl := tb.client()
	createTopicRF1(t, ctx, tb.admin(), topic, parts)
	ini := kmsg.NewPtrInitProducerIDRequest()
	ini.TransactionalID, ini.TransactionTimeoutMillis = &id, 60000
	ir, err := ini.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("init: %v", err)
	}
	if ir.ErrorCode != 0 {
		t.Fatalf("init: %v", kerr.ErrorForCode(ir.ErrorCode))
	}
	return ctx, cl, ir
}

func listEnd(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, iso int8) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = iso
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("list offsets: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	return p.Offset
}

// TestTxnCommitAbortVisibility writes a committed, an aborted and an open
// transaction and checks what each isolation level sees, the last stable
// offset in ListOffsets, and DescribeTransactions/ListTransactions.
func TestTxnCommitAbortVisibility(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	ctx := ctxT(t, time.Minute)
	adm := tb.admin()
	createTopicRF1(t, ctx, adm, "tx", 1)
	prod := tb.client(kgo.TransactionalID("tx-writer"), kgo.DefaultProduceTopic("tx"), kgo.TransactionTimeout(time.Minute))
	txn := func(prefix string, n int, commit bool) {
		t.Helper()
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if err := prod.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("%s-%d", prefix, i))).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", prefix, err)
			}
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end %s: %v", prefix, err)
		}
	}
	txn("c1", 3, true)
	txn("a1", 2, false)
	txn("c2", 2, true)

	// 3 + marker + 2 + marker + 2 + marker
	if got, want := listEnd(t, ctx, prod, "tx", 1), int64(10); got != want {
		t.Fatalf("last stable offset %d, want %d", got, want)
	}
	committed := consumeAll(t, ctx, tb.Addr, "tx", true, 5)
	if want := []string{"c1-0", "c1-1", "c1-2", "c2-0", "c2-1"}; fmt.Sprint(committed) != fmt.Sprint(want) {
		t.Fatalf("read_committed got %v, want %v", committed, want)
	}
	all := consumeAll(t, ctx, tb.Addr, "tx", false, 7)
	if want := []string{"c1-0", "c1-1", "c1-2", "a1-0", "a1-1", "c2-0", "c2-1"}; fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("read_uncommitted got %v, want %v", all, want)
	}

	// An open transaction holds the last stable offset at its first batch.
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, kgo.StringRecord("open-0")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if lso, hw := listEnd(t, ctx, prod, "tx", 1), listEnd(t, ctx, prod, "tx", 0); lso != 10 || hw != 11 {
		t.Fatalf("with an open transaction: last stable offset %d (want 10), high watermark %d (want 11)", lso, hw)
	}
	described, err := adm.DescribeTransactions(ctx, "tx-writer")
	if err != nil {
		t.Fatal(err)
	}
	d, ok := described["tx-writer"]
	if !ok || d.Err != nil || d.State != "Ongoing" || len(d.Topics["tx"]) != 1 {
		t.Fatalf("describe: %+v", described)
	}
	listed, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed["tx-writer"]; !ok || len(listed) != 1 {
		t.Fatalf("list ongoing: %+v", listed)
	}

	// A second producer with the same transactional id fences the first
	// and aborts its open transaction.
	prod2 := tb.client(kgo.TransactionalID("tx-writer"), kgo.DefaultProduceTopic("tx"))
	if err := prod2.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod2.ProduceSync(ctx, kgo.StringRecord("new-0")).FirstErr(); err != nil {
		t.Fatalf("new producer: %v", err)
	}
	if err := prod2.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	err = prod.EndTransaction(ctx, kgo.TryCommit)
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("fenced producer's commit: got %v, want PRODUCER_FENCED", err)
	}
	committed = consumeAll(t, ctx, tb.Addr, "tx", true, 6)
	if got := committed[len(committed)-1]; got != "new-0" || len(committed) != 6 {
		t.Fatalf("after fencing, read_committed got %v", committed)
	}
}

// TestTxnOffsetsVisibleOnCommit sends the transactional offset APIs by
// hand: an offset committed in a transaction is invisible to OffsetFetch
// (UNSTABLE_OFFSET_COMMIT with RequireStable, the old offset without)
// until EndTxn commits it, and an aborted one never appears.
func TestTxnOffsetsVisibleOnCommit(t *testing.T) {
	id := "offsets-txn"
	ctx, cl, ir := startTxnBroker(t, "src", 1, id)
	fetch := func(stable bool) (int64, int16) {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = 7
		req.Group, req.RequireStable = "g", stable
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = "src", []int32{0}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		return p.Offset, p.ErrorCode
	}
	txnCommit := func(offset int64, commit bool) {
		t.Helper()
		ao := kmsg.NewPtrAddOffsetsToTxnRequest()
		ao.TransactionalID, ao.ProducerID, ao.ProducerEpoch, ao.Group = id, ir.ProducerID, ir.ProducerEpoch, "g"
		if r, err := ao.RequestWith(ctx, cl); err != nil || r.ErrorCode != 0 {
			t.Fatalf("add offsets: %v %v", err, kerr.ErrorForCode(r.ErrorCode))
		}
		oc := kmsg.NewPtrTxnOffsetCommitRequest()
		oc.TransactionalID, oc.Group, oc.ProducerID, oc.ProducerEpoch = id, "g", ir.ProducerID, ir.ProducerEpoch
		ot := kmsg.NewTxnOffsetCommitRequestTopic()
		ot.Topic = "src"
		op := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		op.Offset = offset
		ot.Partitions = append(ot.Partitions, op)
		oc.Topics = append(oc.Topics, ot)
		if r, err := oc.RequestWith(ctx, cl); err != nil || r.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("txn offset commit: %v %+v", err, r)
		}
		if _, code := fetch(true); code != kerr.UnstableOffsetCommit.Code {
			t.Fatalf("require-stable fetch during the transaction: %v, want UNSTABLE_OFFSET_COMMIT", kerr.ErrorForCode(code))
		}
		if off, code := fetch(false); code != 0 || off == offset {
			t.Fatalf("plain fetch during the transaction: offset %d %v, want the old one", off, kerr.ErrorForCode(code))
		}
		end := kmsg.NewPtrEndTxnRequest()
		end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, ir.ProducerID, ir.ProducerEpoch, commit
		if r, err := end.RequestWith(ctx, cl); err != nil || r.ErrorCode != 0 {
			t.Fatalf("end: %v %v", err, kerr.ErrorForCode(r.ErrorCode))
		}
	}
	txnCommit(42, true)
	if off, code := fetch(true); code != 0 || off != 42 {
		t.Fatalf("after commit: offset %d %v, want 42", off, kerr.ErrorForCode(code))
	}
	txnCommit(99, false)
	if off, code := fetch(true); code != 0 || off != 42 {
		t.Fatalf("after abort: offset %d %v, want 42", off, kerr.ErrorForCode(code))
	}
}

// TestTxnAddPartitionsV4 sends the batched AddPartitionsToTxn form: one
// transaction adds a partition, another only verifies partitions (one
// added, one not).
func TestTxnAddPartitionsV4(t *testing.T) {
	id := "v4-txn"
	ctx, cl, ir := startTxnBroker(t, "v4", 2, id)
	tx := func(verify bool, parts ...int32) kmsg.AddPartitionsToTxnRequestTransaction {
		x := kmsg.NewAddPartitionsToTxnRequestTransaction()
		x.TransactionalID, x.ProducerID, x.ProducerEpoch, x.VerifyOnly = id, ir.ProducerID, ir.ProducerEpoch, verify
		tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		tt.Topic, tt.Partitions = "v4", parts
		x.Topics = append(x.Topics, tt)
		return x
	}
	send := func(txs ...kmsg.AddPartitionsToTxnRequestTransaction) map[int32]int16 {
		t.Helper()
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.Version = 4
		req.Transactions = txs
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.ErrorCode != 0 || len(resp.Transactions) != 1 {
			t.Fatalf("add partitions v4: %v %+v", err, resp)
		}
		got := map[int32]int16{}
		for _, tt := range resp.Transactions[0].Topics {
			for _, p := range tt.Partitions {
				got[p.Partition] = p.ErrorCode
			}
		}
		return got
	}
	if got := send(tx(false, 0)); got[0] != 0 {
		t.Fatalf("add: %v", got)
	}
	if got := send(tx(true, 0, 1)); got[0] != 0 || got[1] != kerr.InvalidTxnState.Code {
		t.Fatalf("verify: got %v, want partition 0 ok and 1 INVALID_TXN_STATE", got)
	}
}
