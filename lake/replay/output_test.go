package replay_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
)

// memOutput is an Output that keeps the positions it was given and skips
// those up to done, as a TxnProducer resuming after done would.
type memOutput struct {
	done   *replay.Position
	got    []replay.Position
	closed bool
}

func (m *memOutput) Skip(p replay.Position) bool { return m.done != nil && p.Compare(*m.done) <= 0 }
func (m *memOutput) Sample(_ context.Context, s *replay.Sample) error {
	m.got = append(m.got, replay.SamplePosition(s))
	return nil
}
func (m *memOutput) Record(_ context.Context, rec *kgo.Record) error {
	m.got = append(m.got, replay.RecordPosition(rec))
	return nil
}
func (m *memOutput) Acked() int64 { return int64(len(m.got)) }
func (m *memOutput) Close(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return m.Acked(), err
	}
	m.closed = true
	return m.Acked(), nil
}

func TestRunIntoSkipsWhatWasCommitted(t *testing.T) {
	l := newLake(t)
	ss := genSamples([]string{"r1"}, 200, 2)
	writeLake(t, l, ss, 30)
	ctx := context.Background()
	snap, err := l.Catalog.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run := func(out *memOutput, pacer *replay.Pacer) int64 {
		t.Helper()
		r, err := replay.Open(ctx, snap, &querytest.LocalFetcher{Store: l.Store}, replay.Config{Run: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var ticks int64
		if err := r.RunInto(ctx, out, pacer, func() { ticks++ }); err != nil {
			t.Fatal(err)
		}
		if ticks != r.Total() {
			t.Errorf("%d ticks, want one per sample: %d", ticks, r.Total())
		}
		return r.Total()
	}
	all := &memOutput{}
	if total := run(all, nil); int64(len(all.got)) != total || total != int64(len(ss)) {
		t.Fatalf("produced %d of %d samples, want all %d", len(all.got), total, len(ss))
	}
	if !slices.IsSortedFunc(all.got, replay.Position.Compare) {
		t.Error("positions are not in replay order")
	}
	for _, k := range []int{0, 57, len(all.got) - 1} {
		rest := &memOutput{done: &all.got[k]}
		run(rest, &replay.Pacer{}) // speed 0: no waiting
		if !slices.Equal(rest.got, all.got[k+1:]) {
			t.Errorf("resumed after %d: produced %d samples, want the %d after it", k, len(rest.got), len(all.got)-k-1)
		}
	}
}

func TestRawRunIntoSkipsWhatWasCommitted(t *testing.T) {
	l := newLake(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	for p := range int32(2) {
		var recs []*kgo.Record
		for i := range 40 {
			recs = append(recs, &kgo.Record{Key: []byte("k"), Value: []byte(fmt.Sprintf("ev n=%di", i)), Partition: p, Offset: int64(i), Timestamp: t0.Add(time.Duration(i) * time.Second)})
		}
		if _, err := l.RawFlush(ctx, "events", p, 0, 39, recs); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := l.Catalog.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run := func(out *memOutput) {
		t.Helper()
		rr, err := replay.OpenRaw(ctx, snap, &querytest.LocalFetcher{Store: l.Store}, replay.RawConfig{Topic: "events"})
		if err != nil {
			t.Fatal(err)
		}
		defer rr.Close()
		if err := rr.RunInto(ctx, out, nil); err != nil {
			t.Fatal(err)
		}
	}
	all := &memOutput{}
	run(all)
	if len(all.got) != 80 || all.got[40] != (replay.Position{Partition: 1, Offset: 0}) {
		t.Fatalf("produced %d records (41st %v), want 80, partition 0 then 1", len(all.got), all.got[40])
	}
	rest := &memOutput{done: &replay.Position{Partition: 0, Offset: 39}}
	run(rest)
	if !slices.Equal(rest.got, all.got[40:]) {
		t.Errorf("resumed after partition 0: produced %v, want partition 1's 40", rest.got)
	}
}

func TestFinishOutlivesCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := &memOutput{}
	if _, err := replay.Finish(ctx, out); err != nil || !out.closed {
		t.Errorf("Finish after Ctrl-C: closed %v, error %v; want it closed", out.closed, err)
	}
}

func TestPositionString(t *testing.T) {
	for _, c := range []struct {
		p    replay.Position
		want string
	}{
		{replay.Position{Partition: 3, Offset: 17}, "source partition 3 offset 17"},
		{replay.Position{Time: time.Date(2026, 3, 2, 10, 0, 0, 5, time.UTC).UnixNano(), Partition: 1, Offset: 2},
			"sample time 2026-03-02T10:00:00.000000005Z (partition 1 offset 2)"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.p, got, c.want)
		}
	}
}
