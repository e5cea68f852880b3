package agent

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/simtel/simtel/agent/spool"
)

// TestRateWindow checks the shipper's rate estimate, which decides
// whether it gathers samples for a linger: over the last one to two
// spans, so that a fall from a high rate is seen within two spans.
func TestRateWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := newRateWindow(t0, time.Second)
	if r := w.perSecond(t0); r != 0 {
		t.Fatalf("empty window: %g/s, want 0", r)
	}
	// 100k samples a second for three seconds, read every 10 ms.
	for ms := 10; ms <= 3000; ms += 10 {
		w.add(at(ms), 1000)
	}
	if r := w.perSecond(at(3000)); math.Abs(r-100_000) > 2_000 {
		t.Fatalf("steady 100k/s: estimated %g/s", r)
	}
	const linger = 1.0 // seconds
	if w.perSecond(at(3000))*linger < gatherRecords {
		t.Fatalf("at 100k/s with a 1 s linger the shipper would gather")
	}
	// Then 5k a second, one read of 2,500 every 500 ms: within two spans
	// the estimate is low enough to gather.
	ms := 3000
	for range 4 {
		ms += 500
		w.add(at(ms), 2500)
	}
	if r := w.perSecond(at(ms)); r >= gatherRecords || r < 1000 {
		t.Fatalf("two seconds after falling to 5k/s: estimated %g/s, want under %d", r, gatherRecords)
	}
}

// ackLoop acknowledges finished batches in spool order, those already
// finished together, and never acknowledges past a batch that failed.
func TestAckLoopGroupsAndStopsAtFailure(t *testing.T) {
	sp, err := spool.Open(spool.Config{Dir: t.TempDir(), SyncInterval: spool.NoSync})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	a := &Agent{log: slog.New(slog.DiscardHandler), spool: sp}
	a.metrics = newMetrics(a)
	for i := range 4 {
		if err := sp.Append(context.Background(), []spool.Record{{Key: []byte("k"), Value: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	batches := make([]*inflight, 4)
	for i := range batches {
		recs, pos, err := sp.Read(context.Background(), 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		batches[i] = &inflight{Context: context.Background(), recs: recs, pos: pos, done: make(chan struct{})}
	}
	batches[2].failed = errors.New("connection closed")

	// All four finished before the loop looks at them, so the ones after
	// the first are taken as a group: the group must end before batch 2.
	queue := make(chan *inflight, len(batches))
	for _, b := range batches {
		close(b.done)
		queue <- b
	}
	close(queue)
	stopped := make(chan struct{})
	if err := a.ackLoop(queue, newBatchPool(), func() { close(stopped) }); err == nil || err.Error() != "connection closed" {
		t.Fatalf("ackLoop returned %v, want the batch's failure", err)
	}
	select {
	case <-stopped:
	default:
		t.Error("reading was not stopped after the failure")
	}
	if st := sp.Stats(); st.AckedTotal != 2 || st.Pending != 2 {
		t.Errorf("acked %d, pending %d; want 2 and 2 (nothing past the failed batch)", st.AckedTotal, st.Pending)
	}
}
