package txn

// The coordinator alone on a single node, on real logs: what a crash at a
// bad moment, a producer that goes quiet and an abandoned id leave behind.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func initTxn(t *testing.T, c *coordinator, id string, timeoutMs int32) (int64, int16) {
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

// beginTxn starts transaction id (timeout timeoutMs) on c with part, of
// topic "t", in it and n records produced to part; it returns the
// producer id and epoch.
func beginTxn(t *testing.T, c *coordinator, part *testPartition, id string, timeoutMs int32, n int) (int64, int16) {
	t.Helper()
	pid, epoch := initTxn(t, c, id, timeoutMs)
	addPartition(t, c, id, pid, epoch, "t")
	if err := c.produceTo(part, id, txnRecords(pid, epoch, 0, n)); err != nil {
		t.Fatalf("produce to %q: %v", id, err)
	}
	return pid, epoch
}

func addPartition(t *testing.T, c *coordinator, id string, pid int64, epoch int16, topic string) {
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
	ctx := context.Background()
	b := newTestBroker(t)
	part := b.addPartition("t", 0)
	c := b.open()
	pid, epoch := beginTxn(t, c, part, "x", 60000, 3)
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
	if lso := part.lastStableOffset(); lso != 0 {
		t.Fatalf("before the marker: last stable offset %d, want 0", lso)
	}

	c = b.restart()
	part = b.part("t", 0)
	hw := part.log.EndOffset()
	if lso := part.lastStableOffset(); lso != hw || hw != 4 {
		t.Fatalf("after restart: last stable offset %d, end %d, want both 4", lso, hw)
	}
	if ab := part.log.AbortedTxns(0, hw); len(ab) != 0 {
		t.Fatalf("after restart: aborted %+v, want none", ab)
	}
	if off, ok := b.groups.Committed("g", "t", 0); !ok || off != 42 {
		t.Fatalf("after restart: group offset %d %v, want 42", off, ok)
	}
	if c.pendingOffset("g", "t", 0) {
		t.Fatal("after restart: offset still pending")
	}
	if st := c.lookup("x").meta.Status; st != txnCompleteCommit {
		t.Fatalf("after restart: state %s, want CompleteCommit", st)
	}
}

// TestTxnTimeoutAbortFences lets a transaction outlive its timeout and
// checks the abort: epoch bumped, abort marker (the data is in the
// aborted list), the old producer's produce refused with
// INVALID_PRODUCER_EPOCH, its own abort accepted, and its KIP-360
// re-initialization with the old epoch accepted.
func TestTxnTimeoutAbortFences(t *testing.T) {
	ctx := context.Background()
	b := newTestBroker(t)
	part := b.addPartition("t", 0)
	c := b.open()
	pid, epoch := beginTxn(t, c, part, "y", 1000, 2)
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
	if ab := part.log.AbortedTxns(0, 10); len(ab) != 1 || ab[0].ProducerID != pid || ab[0].FirstOffset != 0 || ab[0].LastOffset != 2 {
		t.Fatalf("aborted list %+v", ab)
	}
	if err := c.produceTo(part, "y", txnRecords(pid, epoch, 2, 1)); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("zombie produce: %v, want INVALID_PRODUCER_EPOCH", err)
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

// TestTxnIDExpires checks that an idle transactional id is forgotten
// after transactional.id.expiration.ms, also after a restart (tombstone),
// and that its producer can no longer use it.
func TestTxnIDExpires(t *testing.T) {
	ctx := context.Background()
	b := newTestBroker(t)
	c := b.open()
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
	c = b.restart()
	if c.lookup("old") != nil || c.lookup("fresh") == nil {
		t.Fatal("after restart the expired id is back or the fresh one is gone")
	}
}

// TestTxnIDExpirationConfigured: Config.TxnIDExpiration replaces the
// 7-day default, and a negative one keeps idle ids forever.
func TestTxnIDExpirationConfigured(t *testing.T) {
	ctx := context.Background()
	b := newTestBroker(t)
	c := b.open()
	initTxn(t, c, "idle", 60000)
	check := func(after time.Duration) {
		real := c.now
		c.now = func() time.Time { return real().Add(after) }
		defer func() { c.now = real }()
		for _, e := range c.entries() {
			e.mu.Lock()
			c.checkLocked(ctx, e)
			e.mu.Unlock()
		}
	}
	c.s.cfg.TxnIDExpiration = -1
	check(30 * 24 * time.Hour)
	if c.lookup("idle") == nil {
		t.Fatal("with a negative expiration an id idle for 30 days was forgotten")
	}
	c.s.cfg.TxnIDExpiration = time.Hour
	check(30 * time.Minute)
	if c.lookup("idle") == nil {
		t.Fatal("an id idle for 30 minutes was forgotten with a one-hour expiration")
	}
	check(2 * time.Hour)
	if c.lookup("idle") != nil {
		t.Fatal("an id idle for 2 hours is still known with a one-hour expiration")
	}
}
