package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/agent/spool"
	"github.com/simtel/simtel/internal/testutil"
)

func TestAgentsConfigValidate(t *testing.T) {
	ok := AgentsConfig{Client: Client{Brokers: []string{"127.0.0.1:9092"}}, RestartBroker: NoBroker}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*AgentsConfig)
		want string // part of the error
	}{
		{"no brokers", func(c *AgentsConfig) { c.Brokers = nil }, "no brokers"},
		{"brokers and spawn", func(c *AgentsConfig) { c.Spawn, c.Binary = 3, "simtel" }, "not both"},
		{"spawn without binary", func(c *AgentsConfig) { c.Brokers, c.Spawn = nil, 3 }, "binary"},
		{"restart without spawn", func(c *AgentsConfig) { c.RestartBroker = 1 }, "--spawn"},
		{"kill without spawn", func(c *AgentsConfig) { c.KillController = true }, "--spawn"},
		{"restart beyond the spawned", func(c *AgentsConfig) {
			c.Brokers, c.Spawn, c.Binary, c.RestartBroker = nil, 3, "simtel", 3
		}, "0..2"},
		{"negative agents", func(c *AgentsConfig) { c.Agents = -1 }, "agents"},
		{"negative rate", func(c *AgentsConfig) { c.Rate = -5 }, "rate"},
		{"tiny sample", func(c *AgentsConfig) { c.SampleBytes = 10 }, "sample bytes"},
		{"http per broker", func(c *AgentsConfig) { c.BrokerHTTP = []string{"a:1", "b:2"} }, "one per broker"},
		{"negative duration", func(c *AgentsConfig) { c.Duration = -time.Second }, "negative"},
		{"port base", func(c *AgentsConfig) { c.SpawnPortBase = 65530 }, "port base"},
	} {
		cfg := ok
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error about %q", c.name, err, c.want)
		}
	}
}

func TestSampleRoundTrip(t *testing.T) {
	run := "simtel-bench-agents-1"
	key := sampleKey(run, 42)
	for _, size := range []int{80, 100, 1000} {
		v := appendSample(nil, key[len(run)+1:], 1234567, time.Now().UnixNano(), size)
		if len(v) != size {
			t.Errorf("size %d: got a %d-byte sample %q", size, len(v), v)
		}
		a, s, ok := parseSample([]byte(run), key, v)
		if !ok || a != 42 || s != 1234567 {
			t.Errorf("size %d: got agent %d seq %d ok %v from %q, want 42 1234567", size, a, s, ok, v)
		}
	}
	if _, _, ok := parseSample([]byte("other"), key, []byte("x seq=1i")); ok {
		t.Error("a record of another run parsed as a sample")
	}
}

// TestTally checks the count of lost and duplicated samples against
// a model: agent 0 took 3, agent 1 took 70 (two words of bits).
func TestTally(t *testing.T) {
	tl := newTally([]uint64{3, 70})
	for _, s := range []struct {
		agent int
		seq   uint64
	}{{0, 0}, {0, 2}, {0, 2}, {1, 69}, {1, 0}, {1, 64}, {2, 0}, {0, 3}} {
		tl.add(s.agent, s.seq)
	}
	lost, agents := tl.lost()
	if tl.delivered != 5 || tl.duplicated != 1 || tl.foreign != 2 || lost != 68 || agents != 2 {
		t.Errorf("got delivered %d duplicated %d foreign %d lost %d of %d agents, want 5 1 2 68 of 2",
			tl.delivered, tl.duplicated, tl.foreign, lost, agents)
	}
}

func TestMemSpool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := newMemSpool()
	gen := func(seq uint64) spool.Record { return spool.Record{Key: []byte("k"), Value: make([]byte, 9)} }
	s.append(5, gen)
	recs, pos, err := s.Read(ctx, 3, 1<<20)
	if err != nil || len(recs) != 3 || pos.Seq != 3 {
		t.Fatalf("read: got %d records to %d (%v), want 3 to 3", len(recs), pos.Seq, err)
	}
	recs, pos, _ = s.Read(ctx, 10, 25) // 10 bytes a record: 2 fit
	if len(recs) != 2 || pos.Seq != 5 || s.AppendedAfter(pos) != 0 {
		t.Fatalf("read by bytes: got %d records to %d, want 2 to 5", len(recs), pos.Seq)
	}
	s.watchFrom()
	if err := s.Ack(pos); err != nil {
		t.Fatal(err)
	}
	if !s.back().IsZero() {
		t.Error("an ack of samples taken before watchFrom counted as back")
	}
	go s.append(1, gen)
	_, pos, _ = s.Read(ctx, 10, 1<<20) // waits for the append
	_ = s.Ack(pos)
	if n, acked := s.counts(); n != 6 || acked != 6 || s.back().IsZero() {
		t.Errorf("got %d appended, %d acked, back %v; want 6, 6 and back", n, acked, s.back())
	}
}

// TestAgentsRestart runs 20 agents at 20 samples/s against three broker
// processes with one broker restarted: no sample lost or duplicated,
// every agent delivering again.
func TestAgentsRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three broker processes")
	}
	bin := testutil.Binary(t) // before the deadline: a build on a busy machine takes minutes
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Agents(ctx, AgentsConfig{
		Spawn: 3, Binary: bin, SpawnDir: t.TempDir(),
		Agents: 20, Rate: 20, Duration: 10 * time.Second, FaultPhase: 10 * time.Second,
		RestartBroker: AutoBroker, Partitions: 6, Client: Client{Logger: testLogger(t)},
	})
	if err != nil {
		t.Fatalf("agents: %v (result %+v)", err, res)
	}
	if res.Lost != 0 || res.Duplicated != 0 || res.Accepted == 0 || res.Delivered != res.Accepted {
		t.Errorf("accepted %d, delivered %d, lost %d, duplicated %d; want all delivered once",
			res.Accepted, res.Delivered, res.Lost, res.Duplicated)
	}
	if len(res.Phases) != 2 || res.Phases[1].Name != "restart-broker" {
		t.Fatalf("phases %+v, want steady and restart-broker", res.Phases)
	}
	p := res.Phases[1]
	if p.AgentsNotBack != 0 || p.RecoverMaxS <= 0 || p.Acked == 0 {
		t.Errorf("restart: %d agents not back, recovered after %.1f s, %d acked", p.AgentsNotBack, p.RecoverMaxS, p.Acked)
	}
	if len(p.Brokers) != 3 || p.Brokers[p.Broker].RSSBytes == 0 {
		t.Errorf("restart: broker samples %+v", p.Brokers)
	}
}
