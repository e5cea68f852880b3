package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func openTestBroker(t *testing.T, dir string) *Broker {
	t.Helper()
	b, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("cannot open broker: %v", err)
	}
	return b
}

// txnRecords encodes one transactional batch of n records.
func txnRecords(pid int64, epoch int16, seq int32, n int) []byte {
	var body []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte("v")}
		enc := r.AppendTo(nil)
		r.Length = int32(len(enc) - 1)
		body = r.AppendTo(body)
	}
	rb := kmsg.RecordBatch{
		Length: int32(49 + len(body)), PartitionLeaderEpoch: -1, Magic: 2, Attributes: 0x10,
		LastOffsetDelta: int32(n - 1), FirstTimestamp: 1, MaxTimestamp: 1,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq, NumRecords: int32(n), Records: body,
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func initTxn(t *testing.T, c *txnCoordinator, id string, timeoutMs int32) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = 4
	req.TransactionalID = &id
	req.TransactionTimeoutMillis = timeoutMs
	pid, epoch, code := c.initProducerID(context.Background(), req)
	if code != 0 {
		t.Fatalf("init %q: %v", id, kerr.ErrorForCode(code))
	}
	return pid, epoch
}

func addPartition(t *testing.T, c *txnCoordinator, id string, pid int64, epoch int16, topic string) {
	t.Helper()
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 3
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = id, pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	req.Topics = append(req.Topics, rt)
	codes := [][]int16{{0}}
	if code := c.addPartitions(context.Background(), req, codes); code != 0 || codes[0][0] != 0 {
		t.Fatalf("add partition: %d %v", code, codes)
	}
}

// TestTxnPreparedCommitCompletesAfterRestart stops the coordinator right
// after a commit decision is durable (PrepareCommit written, no marker,
// offsets not applied), as a crash there would, and checks that opening
// the broker again completes the transaction: marker written (last stable
// offset = high watermark, nothing aborted), the transaction's group
// offset committed, state CompleteCommit.
func TestTxnPreparedCommitCompletesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b := openTestBroker(t, dir)
	if _, err := b.createTopic("t", 1, -1, nil, false); err != nil {
		t.Fatal(err)
	}
	c := b.txns
	pid, epoch := initTxn(t, c, "x", 60000)
	addPartition(t, c, "x", pid, epoch, "t")
	part := b.partition("t", 0)
	if res := c.produce("x", part, txnRecords(pid, epoch, 0, 3)); res.Err != nil {
		t.Fatalf("produce: %v", res.Err)
	}
	if err := part.Commit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	ao := kmsg.NewPtrAddOffsetsToTxnRequest()
	ao.Version, ao.TransactionalID, ao.ProducerID, ao.ProducerEpoch, ao.Group = 3, "x", pid, epoch, "g"
	if code := c.addOffsets(ctx, ao); code != 0 {
		t.Fatalf("add offsets: %v", kerr.ErrorForCode(code))
	}
	oc := kmsg.NewPtrTxnOffsetCommitRequest()
	oc.Version, oc.TransactionalID, oc.Group, oc.ProducerID, oc.ProducerEpoch, oc.Generation = 2, "x", "g", pid, epoch, -1
	ot := kmsg.NewTxnOffsetCommitRequestTopic()
	ot.Topic = "t"
	op := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	op.Partition, op.Offset = 0, 42
	ot.Partitions = append(ot.Partitions, op)
	oc.Topics = append(oc.Topics, ot)
	codes := [][]int16{{0}}
	if code := c.txnOffsetCommit(ctx, oc, codes); code != 0 || codes[0][0] != 0 {
		t.Fatalf("txn offset commit: %d %v", code, codes)
	}
	if !c.pendingOffset("g", "t", 0) {
		t.Fatal("the transaction's offset is not pending")
	}
	if _, ok := b.groups.Committed("g", "t", 0); ok {
		t.Fatal("a transactional offset is visible before the commit")
	}

	e := c.lookup("x")
	e.mu.Lock()
	next := e.meta.clone()
	next.Status = txnPrepareCommit
	if err := c.persistLocked(ctx, e, next); err != nil {
		t.Fatal(err)
	}
	e.mu.Unlock()
	if lso := part.LastStableOffset(part.HighWatermark()); lso != 0 {
		t.Fatalf("before the marker: last stable offset %d, want 0", lso)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openTestBroker(t, dir)
	defer b.Close()
	part = b.partition("t", 0)
	hw := part.HighWatermark()
	if lso := part.LastStableOffset(hw); lso != hw || hw != 4 {
		t.Fatalf("after restart: last stable offset %d, high watermark %d, want both 4", lso, hw)
	}
	if ab := part.Log().AbortedTxns(0, hw); len(ab) != 0 {
		t.Fatalf("after restart: aborted %+v, want none", ab)
	}
	if off, ok := b.groups.Committed("g", "t", 0); !ok || off != 42 {
		t.Fatalf("after restart: group offset %d %v, want 42", off, ok)
	}
	if b.txns.pendingOffset("g", "t", 0) {
		t.Fatal("after restart: offset still pending")
	}
	if st := b.txns.lookup("x").meta.Status; st != txnCompleteCommit {
		t.Fatalf("after restart: state %s, want CompleteCommit", st)
	}
}

// TestTxnTimeoutAbortFences lets a transaction outlive its timeout and
// checks the abort: epoch bumped, abort marker (the data is in the
// aborted list), the old producer's produce refused with
// INVALID_PRODUCER_EPOCH, its own abort accepted, and its KIP-360
// re-initialization with the old epoch accepted.
func TestTxnTimeoutAbortFences(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if _, err := b.createTopic("t", 1, -1, nil, false); err != nil {
		t.Fatal(err)
	}
	c := b.txns
	pid, epoch := initTxn(t, c, "y", 1000)
	addPartition(t, c, "y", pid, epoch, "t")
	part := b.partition("t", 0)
	if res := c.produce("y", part, txnRecords(pid, epoch, 0, 2)); res.Err != nil {
		t.Fatal(res.Err)
	}
	real := c.now
	c.now = func() time.Time { return real().Add(time.Hour) }
	e := c.lookup("y")
	e.mu.Lock()
	c.checkLocked(ctx, e)
	m := e.meta
	e.mu.Unlock()
	if m.Status != txnCompleteAbort || m.Epoch != epoch+1 || m.PrevEpoch != epoch {
		t.Fatalf("after timeout: state %s epoch %d prev %d", m.Status, m.Epoch, m.PrevEpoch)
	}
	if ab := part.Log().AbortedTxns(0, 10); len(ab) != 1 || ab[0].ProducerID != pid || ab[0].FirstOffset != 0 || ab[0].LastOffset != 2 {
		t.Fatalf("aborted list %+v", ab)
	}
	if res := c.produce("y", part, txnRecords(pid, epoch, 2, 1)); !errors.Is(res.Err, kerr.InvalidProducerEpoch) {
		t.Fatalf("zombie produce: %v, want INVALID_PRODUCER_EPOCH", res.Err)
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = 3, "y", pid, epoch, true
	if code := c.endTxn(ctx, end); code != kerr.ProducerFenced.Code {
		t.Fatalf("zombie commit: %v, want PRODUCER_FENCED", kerr.ErrorForCode(code))
	}
	end.Commit = false
	if code := c.endTxn(ctx, end); code != 0 {
		t.Fatalf("zombie abort: %v, want success", kerr.ErrorForCode(code))
	}
	id := "y"
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version, req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = 4, &id, 1000, pid, epoch
	gotPID, gotEpoch, code := c.initProducerID(ctx, req)
	if code != 0 || gotPID != pid || gotEpoch != epoch+2 {
		t.Fatalf("re-init: pid %d epoch %d %v, want %d %d", gotPID, gotEpoch, kerr.ErrorForCode(code), pid, epoch+2)
	}
	req.ProducerEpoch = epoch // now two epochs behind
	if _, _, code := c.initProducerID(ctx, req); code != kerr.ProducerFenced.Code {
		t.Fatalf("stale re-init: %v, want PRODUCER_FENCED", kerr.ErrorForCode(code))
	}
}

func FuzzTxnStateDecode(f *testing.F) {
	m := txnMeta{ProducerID: 7, Epoch: 3, PrevEpoch: -1, TimeoutMs: 60000, Status: txnOngoing,
		Partitions: []txnTP{{"t", 0}}, Groups: []string{"g"}, Offsets: []txnOffset{{Group: "g", Topic: "t", Offset: 5}}}
	f.Add(encodeTxnMeta(&m))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":1,"pid":-1,"epoch":0,"timeout_ms":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeTxnMeta(b)
		if err != nil {
			return
		}
		again, err := decodeTxnMeta(encodeTxnMeta(&m))
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		if again.ProducerID != m.ProducerID || again.Epoch != m.Epoch || again.Status != m.Status || len(again.Offsets) != len(m.Offsets) {
			t.Fatalf("round trip changed the state: %+v -> %+v", m, again)
		}
	})
}

// TestTxnIDExpires checks that an idle transactional id is forgotten
// after transactional.id.expiration.ms, also after a restart (tombstone),
// and that its producer can no longer use it.
func TestTxnIDExpires(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b := openTestBroker(t, dir)
	c := b.txns
	pid, epoch := initTxn(t, c, "old", 60000)
	initTxn(t, c, "fresh", 60000)
	real := c.now
	c.now = func() time.Time { return real().Add(txnIDExpiration + time.Hour) }
	fresh := c.lookup("fresh")
	fresh.mu.Lock()
	if err := c.persistLocked(ctx, fresh, fresh.meta.clone()); err != nil { // touched "now"
		t.Fatal(err)
	}
	fresh.mu.Unlock()
	for _, e := range c.entries() {
		e.mu.Lock()
		c.checkLocked(ctx, e)
		e.mu.Unlock()
	}
	if c.lookup("old") != nil || c.lookup("fresh") == nil {
		t.Fatalf("after expiry: old present %v, fresh present %v", c.lookup("old") != nil, c.lookup("fresh") != nil)
	}
	ao := kmsg.NewPtrAddOffsetsToTxnRequest()
	ao.Version, ao.TransactionalID, ao.ProducerID, ao.ProducerEpoch, ao.Group = 3, "old", pid, epoch, "g"
	if code := c.addOffsets(ctx, ao); code != kerr.InvalidProducerIDMapping.Code {
		t.Fatalf("expired id: %v, want INVALID_PRODUCER_ID_MAPPING", kerr.ErrorForCode(code))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openTestBroker(t, dir)
	defer b.Close()
	if b.txns.lookup("old") != nil || b.txns.lookup("fresh") == nil {
		t.Fatal("after restart the expired id is back or the fresh one is gone")
	}
}
