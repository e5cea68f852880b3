package spool

import (
	"fmt"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
)

// While every record is acknowledged soon after it is appended, the
// flusher's ticks sync nothing, and sealed segments are closed without a
// sync once acknowledged whole.
func TestSyncSkipsAcknowledged(t *testing.T) {
	cfg := smallConfig(t, t.TempDir())
	cfg.SyncInterval = 250 * time.Millisecond
	cfg.SegmentBytes = 64 << 10 // a head lives several ticks
	s := mustOpen(t, cfg)
	next := 0
	for start := time.Now(); time.Since(start) < 6*cfg.SyncInterval; {
		mustAppend(t, s, recs(0, next, 20)) // ~2 KiB: a segment every ~30 rounds
		next += 20
		_, pos := readN(t, s, 20)
		if err := s.Ack(pos); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := s.Stats(); st.DataSyncs != 0 || st.SyncErrors != 0 {
		t.Errorf("broker keeping up: %d data syncs, %d sync errors; want none", st.DataSyncs, st.SyncErrors)
	}
	// The flusher closed the sealed segments the acks covered (a kick per
	// seal and deletion; wait for the last one).
	testutil.WaitFor(t, 5*time.Second, "acknowledged sealed segments closed", func() error {
		if open, _ := openSealed(s); open > 0 {
			return fmt.Errorf("%d still open", open)
		}
		return nil
	})
}

// Records the broker has not acknowledged a tick after they were appended
// are synced, in sealed segments and in the head; Close syncs the rest.
func TestSyncUnacknowledged(t *testing.T) {
	cfg := smallConfig(t, t.TempDir())
	cfg.SyncInterval = 50 * time.Millisecond
	s := mustOpen(t, cfg)
	mustAppend(t, s, recs(0, 0, 100)) // several sealed segments and a head
	testutil.WaitFor(t, 10*time.Second, "unacknowledged records synced", func() error {
		open, segs := openSealed(s)
		// Each sealed segment and the head once (the head is not synced
		// again until it grows).
		if syncs := s.Stats().DataSyncs; open > 0 || syncs != uint64(segs) {
			return fmt.Errorf("%d sealed segments open, %d data syncs for %d segments", open, syncs, segs)
		}
		return nil
	})

	cfg2 := smallConfig(t, t.TempDir())
	cfg2.SyncInterval = time.Hour
	s2 := mustOpen(t, cfg2)
	mustAppend(t, s2, recs(0, 0, 5))
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s2.Stats(); st.DataSyncs != 1 {
		t.Errorf("Close with unacknowledged records in the head: %d data syncs, want 1", st.DataSyncs)
	}
}

// openSealed returns how many sealed segments still have their write file
// open, and how many segments there are.
func openSealed(s *Spool) (open, segs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.mu.segs {
		if g.sealed && g.f != nil {
			open++
		}
	}
	return open, len(s.mu.segs)
}
