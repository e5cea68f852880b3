package rollup

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stateRecord is a state record as the topic keeps it.
type stateRecord struct{ key, value []byte }

// compacted is what compaction leaves of recs: the last record of each
// key, in the order of those records, tombstones dropped.
func compacted(recs []stateRecord) []stateRecord {
	last := map[string]int{}
	for i, r := range recs {
		last[string(r.key)] = i
	}
	var out []stateRecord
	for i, r := range recs {
		if last[string(r.key)] == i && r.value != nil {
			out = append(out, r)
		}
	}
	return out
}

// deltaLines are 150 s of samples of twelve series: three at 100 a
// second (more than a 10 s window keeps pending, so its sketch fills) and
// nine at 2 a second, of both signs and zero, some out of order within the
// allowed lateness and some later; one stops at 50 s, and half-way six
// series (hot and cold) gain a field.
func deltaLines() []*kgo.Record {
	rng := rand.New(rand.NewPCG(7, 8))
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC).UnixNano()
	var recs []*kgo.Record
	for tick := range 15_000 {
		for s := range 12 {
			if s >= 3 && tick%50 != 0 || s == 11 && tick >= 5_000 {
				continue
			}
			t := t0 + int64(tick)*int64(10*time.Millisecond)
			switch rng.IntN(100) {
			case 0:
				t -= int64(500 * time.Millisecond)
			case 1:
				t -= int64(3 * time.Second)
			}
			v := (rng.Float64() - 0.3) * math.Pow(10, float64(rng.IntN(6)-2))
			if rng.IntN(20) == 0 {
				v = 0
			}
			extra := ""
			if s < 6 && tick >= 7_500 {
				extra = ",extra=" + strconv.Itoa(rng.IntN(9)) + "i"
			}
			line := fmt.Sprintf("m%d,host=h%d,run=r1 v=%s,n=%di%s %d", s%2, s, strconv.FormatFloat(v, 'g', -1, 64), rng.IntN(1000), extra, t)
			recs = append(recs, &kgo.Record{Value: []byte(line), Timestamp: time.Unix(0, t)})
		}
	}
	return recs
}

// deltaWorker is a worker whose state records go to *state.
func deltaWorker(t *testing.T, state *[]stateRecord) *worker {
	t.Helper()
	cfg := Config{Brokers: []string{"-"}, AllowedLateness: time.Second}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cfg: cfg, log: cfg.Logger, m: newMetrics(prometheus.NewRegistry()), sk: newSketches(), parts: map[int32]*partition{}}
	w.send = func(_ context.Context, r *kgo.Record) {
		if r.Topic == cfg.StateTopic {
			*state = append(*state, stateRecord{bytes.Clone(r.Key), bytes.Clone(r.Value)})
		}
	}
	return w
}

// feedWorker adds recs to p as the worker's loop does, with a checkpoint
// (and its commit) every 700 samples and at the end.
func feedWorker(w *worker, p *partition, recs []*kgo.Record) {
	ctx := context.Background()
	for i, r := range recs {
		w.add(ctx, p, r)
		if i%700 == 699 {
			w.checkpoint(ctx, p)
			w.recordsDone(true)
		}
	}
	w.checkpoint(ctx, p)
	w.recordsDone(true)
}

// loadState reads state records back into a partition of w, as the
// worker's load does.
func loadState(t *testing.T, w *worker, recs []stateRecord) *partition {
	t.Helper()
	q := newPartition(0, 0)
	for i, r := range recs {
		if err := w.apply(q, &kgo.Record{Key: r.key, Value: r.value}); err != nil {
			t.Fatalf("state record %d (%q): %v", i, r.key, err)
		}
	}
	q.metaDirty = false
	for _, a := range q.runs {
		a.dirty = false
		a.cleanDirty()
	}
	w.parts[0], w.series = q, len(q.series)
	return q
}

// Windows checkpointed as whole records and deltas read back as they
// were. A worker stopped after any number of samples and another that
// loads its state records and takes the rest end with the same open
// windows as one worker that took every sample, and so does a third that
// loads the records both wrote — all of them in order, or only what
// compaction keeps. Series gain a field part-way (a whole record then),
// windows merge into coarser ones (sketches change: whole records), and
// checkpoints come often enough for a window to take many deltas.
func TestDeltaCheckpointsRestore(t *testing.T) {
	recs := deltaLines()
	var refState []stateRecord
	ref := deltaWorker(t, &refState)
	p := newPartition(0, 0)
	ref.parts[0] = p
	feedWorker(ref, p, recs)
	want := closeAll(t, p, ref.sk, math.MaxInt64)
	deltas, wholes := 0, 0
	for _, r := range refState {
		if _, _, _, part, ok := parseStateKey(r.key); ok && r.value != nil {
			if part > 0 {
				deltas++
			} else {
				wholes++
			}
		}
	}
	if deltas == 0 || wholes == 0 {
		t.Fatalf("%d deltas and %d whole records, want some of each", deltas, wholes)
	}
	t.Logf("%d samples: %d state records, %d deltas, %d whole", len(recs), len(refState), deltas, wholes)
	check := func(what string, q *partition, sk *sketches) {
		t.Helper()
		got := closeAll(t, q, sk, math.MaxInt64)
		if len(got) != len(want) {
			t.Errorf("%s: %d windows, want %d", what, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: window %s is\n%q, want\n%q", what, k, got[k], v)
			}
		}
	}
	for _, cut := range []int{1_500, 9_999, 17_000, 23_456, 39_000} {
		var state []stateRecord
		first := deltaWorker(t, &state)
		first.parts[0] = newPartition(0, 0)
		feedWorker(first, first.parts[0], recs[:cut])
		second := deltaWorker(t, &state)
		q := loadState(t, second, state)
		feedWorker(second, q, recs[cut:])
		// The topic keeps a whole record of each open window and no other.
		open, kept := 0, 0
		for _, s := range q.series {
			for res := range levels {
				open += len(s.open[res])
			}
		}
		for _, r := range compacted(state) {
			if _, _, _, part, ok := parseStateKey(r.key); ok && part == 0 {
				kept++
			}
		}
		if kept != open {
			t.Errorf("cut at %d: the state topic keeps %d windows, the worker has %d open", cut, kept, open)
		}
		for name, log := range map[string][]stateRecord{"every record": state, "compacted": compacted(state)} {
			third := deltaWorker(t, new([]stateRecord))
			check(fmt.Sprintf("cut at %d, loaded from %s", cut, name), loadState(t, third, log), third.sk)
		}
		check(fmt.Sprintf("cut at %d, the worker that took the rest", cut), q, second.sk)
	}
}

func TestParseStateKey(t *testing.T) {
	for _, part := range []int32{0, 1, 15} {
		k := appendPartKey(nil, "cpu,host=a", 1, -10, part)
		s, res, start, got, ok := parseStateKey(k)
		if !ok || string(s) != "cpu,host=a" || res != 1 || start != -10 || got != part {
			t.Errorf("parseStateKey(%q) = %q %d %d %d %v", k, s, res, start, got, ok)
		}
	}
	for _, k := range []string{"", "a", "a\x00b\x001", "a\x0010s", "a\x0010s\x00x", "a\x0010s\x001\x000", "a\x0010s\x001\x00-1", "a\x0010s\x001\x00" + strconv.Itoa(1<<40), "a\x0010s\x001\x002\x003"} {
		if _, _, _, _, ok := parseStateKey([]byte(k)); ok {
			t.Errorf("parseStateKey(%q) took it", k)
		}
	}
}
