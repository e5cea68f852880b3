package rollup

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/scheduler"
)

// foldWorker is a worker without Kafka: send keeps the produced records.
func foldWorker(t *testing.T, sent *[]*kgo.Record) *worker {
	t.Helper()
	cfg := Config{Brokers: []string{"-"}, AllowedLateness: time.Second}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cfg: cfg, log: cfg.Logger, m: newMetrics(prometheus.NewRegistry()), sk: newSketches(), parts: map[int32]*partition{}}
	w.runs = &runsFollower{}
	w.runs.mu.runs = map[string]scheduler.Run{}
	w.send = func(_ context.Context, r *kgo.Record) { *sent = append(*sent, r) }
	return w
}

// A run's aggregate, fed by folding its closed 10 s windows, takes every
// sample once: those of closed windows, of windows still open when the run
// ended (folded into the partial then), samples added to such a window
// afterwards, late samples, samples of series over the cap, and the
// policy versions; it survives a checkpoint and a load in between.
func TestRunAggregateFromWindows(t *testing.T) {
	var sent []*kgo.Record
	w := foldWorker(t, &sent)
	w.cfg.MaxSeries = 2
	p := newPartition(0, 0)
	w.parts[0] = p
	ctx := context.Background()
	var off int64
	var wantCount int64
	var wantSum float64
	add := func(host string, sec float64, v int) {
		t.Helper()
		ts := int64(sec * float64(time.Second))
		line := fmt.Sprintf("cpu,host=%s,run=r1 v=%d,policy_version=%di %d", host, v, 1+v%3, ts)
		w.add(ctx, p, &kgo.Record{Value: []byte(line), Offset: off})
		off++
		wantCount++
		wantSum += float64(v)
	}
	// Two held series and one over the cap.
	for i := range 150 {
		add([]string{"a", "b", "c"}[i%3], float64(i)/10, i)
	}
	// A checkpoint, then the partition read back from it.
	w.checkpoint(ctx, p)
	state := sent
	sent = nil
	q := newPartition(0, 0)
	for _, r := range state {
		if r.Topic != w.cfg.StateTopic {
			continue
		}
		if err := w.apply(q, r); err != nil {
			t.Fatal(err)
		}
	}
	w.parts[0], p = q, q
	for i := 150; i < 200; i++ {
		add([]string{"a", "b", "c"}[i%3], float64(i)/10, i)
	}
	add("a", 1, 1000) // late: its window closed

	// The run ends while the window of 19 s is open; more samples come.
	w.runs.mu.runs["r1"] = scheduler.Run{Run: "r1", State: scheduler.StateCompleted}
	w.flushRuns(ctx, p)
	for _, win := range p.series[`cpu,host=a,run=r1`].open[0] {
		if !win.inRun {
			t.Errorf("window %d still open after its run's partial is not inRun", win.start)
		}
	}
	add("a", 19.5, 2000)
	add("b", 25, 3000) // a new window
	w.close(ctx, p, math.MaxInt64)
	w.flushRuns(ctx, p)
	if len(p.runs) != 0 {
		t.Fatalf("%d run aggregates left after the run ended", len(p.runs))
	}

	var count int64
	var sum float64
	policies := map[int64]bool{}
	partials := map[string]bool{}
	for _, r := range sent {
		if r.Topic != w.cfg.PartialTopic {
			continue
		}
		a, meas, err := decodeRunRecord(r.Value, w.sk)
		if err != nil {
			t.Fatal(err)
		}
		partials[strings.Join(strings.SplitN(string(r.Key), "\x00", 4)[:3], " ")] = true
		for v := range a.policies {
			policies[v] = true
		}
		if meas == "" {
			continue
		}
		f := a.metrics["cpu"]["v"]
		count += f.count
		sum += f.sum
	}
	if count != wantCount || sum != wantSum {
		t.Errorf("partials count %d sum %v, want %d %v", count, sum, wantCount, wantSum)
	}
	if len(policies) != 3 {
		t.Errorf("policy versions %v, want 1, 2 and 3", policies)
	}
	if len(partials) != 2 {
		t.Errorf("partials %v: want two aggregates, before and after the run ended", partials)
	}
}

// A window's inRun flag survives its state record; a record of version 1
// (written while every sample went to its run's aggregate at once)
// decodes as inRun.
func TestWindowStateVersions(t *testing.T) {
	sk := newSketches()
	p := newPartition(0, 0)
	feed(t, p, sk, `cpu,host=a,run=r1 v=1 1000000000`)
	s := p.series[`cpu,host=a,run=r1`]
	win := s.open[0][0]
	for _, inRun := range []bool{false, true} {
		win.inRun = inRun
		enc := appendWindow(nil, s, 0, win)
		q := newPartition(0, 0)
		if _, err := decodeWindow(enc, q, sk); err != nil {
			t.Fatal(err)
		}
		if got := q.series[s.key].open[0][0].inRun; got != inRun {
			t.Errorf("inRun %v after a round trip, want %v", got, inRun)
		}
		// Version 1: no flags byte.
		old := append([]byte{1, enc[1]}, enc[3:]...)
		q = newPartition(0, 0)
		if _, err := decodeWindow(old, q, sk); err != nil {
			t.Fatal(err)
		}
		if got := q.series[s.key].open[0][0]; !got.inRun || got.fields[0].count != 1 {
			t.Errorf("version 1 window: inRun %v count %d, want true 1", got.inRun, got.fields[0].count)
		}
	}
}
