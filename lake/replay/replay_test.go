package replay_test

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/store/storetest"
)

var t0 = querytest.Start

func genSamples(runs []string, n int, parts int32) []replay.Sample {
	return querytest.GenSamples(1, runs, n, parts)
}

func sortSamples(ss []replay.Sample) { querytest.SortSamples(ss) }

func writeLake(t *testing.T, l *querytest.Lake, ss []replay.Sample, flushSize int) {
	t.Helper()
	if err := l.WriteSamples(context.Background(), "telemetry", ss, flushSize); err != nil {
		t.Fatal(err)
	}
}

func newLake(t *testing.T) *querytest.Lake {
	st := storetest.Dir(t)
	return &querytest.Lake{Store: st, Catalog: catalog.New(st)}
}

// lines runs a replay and returns its output parsed back into samples.
func runReplay(t *testing.T, l *querytest.Lake, cfg replay.Config) []replay.Sample {
	t.Helper()
	ctx := context.Background()
	snap, err := l.Catalog.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := replay.Open(ctx, snap, &querytest.LocalFetcher{Store: l.Store}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out bytes.Buffer
	lw := replay.NewLineWriter(&out)
	var pos []replay.Sample
	if err := r.Run(ctx, func(s *replay.Sample) error {
		pos = append(pos, replay.Sample{Partition: s.Partition, Offset: s.Offset})
		return lw.Write(s)
	}); err != nil {
		t.Fatal(err)
	}
	if err := lw.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []replay.Sample
	for i, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		s, err := replay.ParseLine([]byte(line))
		if err != nil {
			t.Fatalf("replay line %d %q: %v", i+1, line, err)
		}
		s.Partition, s.Offset = pos[i].Partition, pos[i].Offset
		got = append(got, s)
	}
	if int64(len(got)) != r.Total() {
		t.Errorf("replay emitted %d samples, announced %d", len(got), r.Total())
	}
	return got
}

func filter(ss []replay.Sample, keep func(*replay.Sample) bool) []replay.Sample {
	var out []replay.Sample
	for i := range ss {
		if keep(&ss[i]) {
			out = append(out, ss[i])
		}
	}
	return out
}

func compare(t *testing.T, got, want []replay.Sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d samples, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("sample %d:\n got %s (p%d o%d)\nwant %s (p%d o%d)", i, got[i].String(), got[i].Partition, got[i].Offset,
				want[i].String(), want[i].Partition, want[i].Offset)
		}
	}
}

func TestReplayFromLakeInOrder(t *testing.T) {
	l := newLake(t)
	all := genSamples([]string{"r1", "r2"}, 300, 3)
	writeLake(t, l, all, 37)

	want := filter(all, func(s *replay.Sample) bool { return s.Tags["run"] == "r1" })
	sortSamples(want)
	compare(t, runReplay(t, l, replay.Config{Run: "r1"}), want)

	// --from-step 20: from the first time any sample has step ≥ 20.
	step := 20.0
	var from int64 = 1<<63 - 1
	for _, s := range want {
		if s.Tags["step"] >= "20" && len(s.Tags["step"]) >= 2 && s.Time < from {
			from = s.Time
		}
	}
	wantStep := filter(want, func(s *replay.Sample) bool { return s.Time >= from })
	compare(t, runReplay(t, l, replay.Config{Run: "r1", FromStep: &step}), wantStep)

	// Time range and measurement filter.
	lo, hi := t0.Add(50*time.Second), t0.Add(100*time.Second)
	wantRange := filter(want, func(s *replay.Sample) bool {
		return s.Measurement == "mem" && s.Time >= lo.UnixNano() && s.Time < hi.UnixNano()
	})
	if len(wantRange) == 0 {
		t.Fatal("test data has no mem samples in range")
	}
	compare(t, runReplay(t, l, replay.Config{Run: "r1", From: lo, To: hi, Measurements: []string{"mem"}}), wantRange)
}

// produceAll produces samples to their partitions as the agent would
// (key run/host, value the line, timestamp the sample time) and sets each
// sample's offset to the one the broker assigned.
func produceAll(t *testing.T, addr string, ss []replay.Sample) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("telemetry"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for i := range ss {
		line, err := replay.AppendLine(nil, &ss[i])
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Key: []byte(ss[i].Tags["run"] + "/" + ss[i].Tags["host"]), Value: line, Partition: ss[i].Partition, Timestamp: time.Unix(0, ss[i].Time)}
		res := cl.ProduceSync(ctx, rec)
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		ss[i].Offset = res[0].Record.Offset
	}
}

func TestReplayMergesLakeAndBroker(t *testing.T) {
	addr := inproc.Start(t, brokertest.Topic("telemetry", 3)).Addr
	all := genSamples([]string{"r1", "r2"}, 200, 3)
	produceAll(t, addr, all)
	// A record the sink would dead-letter, in the tail: skipped by both.
	cl, _ := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("telemetry"))
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte("r1/n0"), Value: []byte("not line protocol"), Partition: 1}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	// The sink flushed a different prefix of every partition: 0 nothing,
	// 1 some, 2 all.
	l := newLake(t)
	var inLake []replay.Sample
	limit := map[int32]int64{0: -1, 1: 57, 2: 1 << 40}
	for _, s := range all {
		if s.Offset <= limit[s.Partition] {
			inLake = append(inLake, s)
		}
	}
	writeLake(t, l, inLake, 25)

	want := filter(all, func(s *replay.Sample) bool { return s.Tags["run"] == "r1" })
	sortSamples(want)
	got := runReplay(t, l, replay.Config{Run: "r1", Brokers: []string{addr}})
	compare(t, got, want)

	// Without the broker only the lake's part comes back.
	wantLake := filter(want, func(s *replay.Sample) bool { return s.Offset <= limit[s.Partition] })
	compare(t, runReplay(t, l, replay.Config{Run: "r1"}), wantLake)
}

// TestReplaySkipsRollups: a replay leaves out the rollup worker's output,
// which the lake holds as measurements rollup_<res>.<m> and summary.runs
// (from their own topics, or in the telemetry topic if an earlier replay
// sent them there), so a replayed run is not rolled up twice; naming such
// a measurement replays it.
func TestReplaySkipsRollups(t *testing.T) {
	l := newLake(t)
	all := genSamples([]string{"r1"}, 200, 2)
	for i := range all {
		switch all[i].Measurement {
		case "mem":
			all[i].Measurement = "rollup_1m.mem"
		case "log":
			all[i].Measurement = "summary.runs"
		}
	}
	writeLake(t, l, all, 40)
	var rollups []replay.Sample
	for i, s := range filter(all, func(s *replay.Sample) bool { return s.Measurement == "rollup_1m.mem" }) {
		s.Measurement, s.Partition, s.Offset = "rollup_1m.cpu", 0, int64(i)
		rollups = append(rollups, s)
	}
	if err := l.WriteSamples(context.Background(), "rollup_1m", rollups, 40); err != nil {
		t.Fatal(err)
	}

	want := filter(all, func(s *replay.Sample) bool { return s.Measurement == "cpu" })
	if len(want) == 0 || len(want) == len(all) {
		t.Fatalf("test data: %d cpu samples of %d", len(want), len(all))
	}
	sortSamples(want)
	compare(t, runReplay(t, l, replay.Config{Run: "r1"}), want)
	compare(t, runReplay(t, l, replay.Config{}), want)

	named := filter(all, func(s *replay.Sample) bool { return s.Measurement == "rollup_1m.mem" })
	sortSamples(named)
	compare(t, runReplay(t, l, replay.Config{Run: "r1", Measurements: []string{"rollup_1m.mem"}}), named)
}
