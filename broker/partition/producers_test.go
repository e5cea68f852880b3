package partition

import (
	"errors"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/internal/batchtest"
	"github.com/simtel/simtel/broker/storage"
)

// timedBatch is a batch of n records from producer pid (epoch 0) at
// sequence seq whose records are stamped at ms (Unix milliseconds);
// attrs 0x10 makes it transactional.
func timedBatch(pid int64, seq int32, n int, ms int64, attrs int16) []byte {
	return batchtest.Encode(kmsg.RecordBatch{Magic: 2, Attributes: attrs, ProducerID: pid, FirstSequence: seq,
		FirstTimestamp: ms, MaxTimestamp: ms, PartitionLeaderEpoch: -1}, slices.Repeat([]string{"v"}, n)...)
}

// openExpiring opens a partition in dir whose producers expire after exp.
func openExpiring(t *testing.T, dir string, exp time.Duration, expired func(int)) *Partition {
	t.Helper()
	l, err := storage.Open(storage.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Open(l, Config{Topic: "e", Settings: Settings{MaxMessageBytes: 1 << 20}, Logger: slog.New(slog.DiscardHandler),
		ProducerIDExpiration: exp, ProducersExpired: expired})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	return p
}

// producerStates copies p's producer state for comparison, leaving out
// the producers expired by p's clock but not swept yet (they count as
// absent everywhere).
func producerStates(p *Partition) map[int64]producerEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int64]producerEntry{}
	for pid, e := range p.mu.producers {
		if !p.expired(e, p.mu.clock) {
			out[pid] = *e
		}
	}
	return out
}

// TestProducerExpiry: with a one-hour expiration measured on the batches'
// timestamps, a producer idle past it is forgotten (its next batch is
// accepted at any sequence, and a retry of its old batch is no longer
// recognised), one that wrote within it keeps its sequence checks and
// duplicate detection, and a producer with a transaction open is kept.
// A partition appending directly, a replica applying the same entries
// through its state machine, and both rebuilt from their logs after a
// restart end with the same producer state.
func TestProducerExpiry(t *testing.T) {
	const hour = int64(time.Hour / time.Millisecond)
	t0 := int64(1_700_000_000_000)
	steps := []struct {
		name    string
		data    []byte
		wantErr error
		wantDup bool
	}{
		{"idle producer 1 writes", timedBatch(1, 0, 5, t0, 0), nil, false},
		{"producer 2 writes", timedBatch(2, 0, 5, t0, 0), nil, false},
		{"producer 3 opens a transaction", timedBatch(3, 0, 1, t0, 0x10), nil, false},
		{"producer 1 retries within the hour", timedBatch(1, 0, 5, t0+hour/2, 0), nil, true},
		{"producer 2 writes within the hour", timedBatch(2, 5, 5, t0+hour/2, 0), nil, false},
		{"producer 4 moves the clock past producer 1's hour", timedBatch(4, 0, 1, t0+hour+hour/4, 0), nil, false},
		{"producer 2 still has its sequence checked", timedBatch(2, 20, 1, t0+hour+hour/4, 0), kerr.OutOfOrderSequenceNumber, false},
		{"producer 2 still has its retries recognised", timedBatch(2, 5, 5, t0+hour+hour/4, 0), nil, true},
		{"producer 3's open transaction keeps it", timedBatch(3, 7, 1, t0+hour+hour/4, 0x10), kerr.OutOfOrderSequenceNumber, false},
		{"forgotten producer 1 resumes at a later sequence", timedBatch(1, 42, 1, t0+hour+hour/4, 0), nil, false},
		{"producer 1 is tracked again from there", timedBatch(1, 44, 1, t0+hour+hour/4, 0), kerr.OutOfOrderSequenceNumber, false},
		{"producer 1 goes on", timedBatch(1, 43, 1, t0+hour+hour/4, 0), nil, false},
		{"producer 4 moves the clock past producer 2's hour", timedBatch(4, 1, 1, t0+3*hour, 0), nil, false},
		{"forgotten producer 2's old batch is written again", timedBatch(2, 5, 5, t0+3*hour, 0), nil, false},
	}

	directDir := t.TempDir()
	direct := openExpiring(t, directDir, time.Hour, nil)
	defer func() { direct.Close() }()
	replicaDir := t.TempDir()
	var expiredCalls int
	replica := openExpiring(t, replicaDir, time.Hour, func(n int) { expiredCalls += n })
	defer func() { replica.Close() }()
	fsm := &replicaFSM{p: replica}
	for i, s := range steps {
		hdrs, err := storage.ParseBatches(s.data, 0)
		if err != nil {
			t.Fatal(err)
		}
		a := direct.AppendChecked(s.data, hdrs[0].IsTransactional(), nil)
		r := applyEntry(fsm, uint64(i+1), 1, s.data)
		for who, res := range map[string]AppendResult{"direct": a, "replica": r} {
			if !errors.Is(res.Err, s.wantErr) || (s.wantErr == nil && res.Err != nil) || res.Duplicate != s.wantDup {
				t.Fatalf("%s (%s): err %v duplicate %v, want err %v duplicate %v", s.name, who, res.Err, res.Duplicate, s.wantErr, s.wantDup)
			}
		}
	}
	if _, known := direct.ProducerEpoch(1); known {
		t.Fatal("producer 1 is still known after 1¾ idle hours")
	}
	// Sweeps removed producer 1 twice (idle from t0 and from t0+1¼h)
	// and producer 2 before its batch came back.
	tracked, expired := replica.Producers()
	if tracked != 3 || expired != 3 || expiredCalls != 3 {
		t.Fatalf("replica tracks %d producers, expired %d (callback %d); want 3 tracked (2, 3, 4), 3 expired", tracked, expired, expiredCalls)
	}

	want := producerStates(direct)
	if got := producerStates(replica); !maps.Equal(got, want) {
		t.Fatalf("replica's producer state differs from the direct partition's:\n got %+v\nwant %+v", got, want)
	}
	direct.Close()
	direct = openExpiring(t, directDir, time.Hour, nil)
	if got := producerStates(direct); !maps.Equal(got, want) {
		t.Fatalf("producer state rebuilt after a restart differs:\n got %+v\nwant %+v", got, want)
	}
	replica.Close()
	replica = openExpiring(t, replicaDir, time.Hour, nil)
	if err := replica.resetReplicaLog(replica.log.EndOffset()); err != nil {
		t.Fatal(err)
	}
	if got := producerStates(replica); !maps.Equal(got, want) {
		t.Fatalf("replica's producer state rebuilt from its log differs:\n got %+v\nwant %+v", got, want)
	}
	// With expiry off, nothing is forgotten.
	forever := openExpiring(t, t.TempDir(), 0, nil)
	defer forever.Close()
	for _, s := range steps[:6] {
		forever.Append(s.data)
	}
	if res := forever.Append(timedBatch(1, 42, 1, t0+hour+hour/4, 0)); !errors.Is(res.Err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("without expiry, producer 1's gap: err %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", res.Err)
	}
}
