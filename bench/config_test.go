package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// refusal is an edit of a valid configuration that Validate must refuse,
// with a part of the error it must give.
type refusal[C any] struct {
	name string
	edit func(*C)
	want string
}

// checkRefusals fails unless ok is valid and every case's edit of a copy
// of it is refused with an error that contains the case's want.
func checkRefusals[C interface{ Validate() error }](t *testing.T, ok C, cases []refusal[C]) {
	t.Helper()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, c := range cases {
		cfg := ok
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error about %q", c.name, err, c.want)
		}
	}
}

func TestProduceConfigValidate(t *testing.T) {
	ok := ProduceConfig{Topic: "t", Duration: time.Second}
	checkRefusals(t, ok, []refusal[ProduceConfig]{
		{"no topic", func(c *ProduceConfig) { c.Topic = "" }, "topic"},
		{"both bounds", func(c *ProduceConfig) { c.Records = 10 }, "exactly one"},
		{"no bound", func(c *ProduceConfig) { c.Duration = 0 }, "exactly one"},
		{"bad acks", func(c *ProduceConfig) { c.Acks = "2" }, "acks"},
		{"inflight with idempotence", func(c *ProduceConfig) { c.MaxInflight = 10 }, "idempotence off"},
		{"small batches", func(c *ProduceConfig) { c.BatchMaxBytes = 100 }, "batch max bytes"},
		{"bad compression", func(c *ProduceConfig) { c.Compression = "brotli" }, "compression"},
		{"bad partitioner", func(c *ProduceConfig) { c.Partitioner = "hash" }, "partitioner"},
		{"fewer records than producers", func(c *ProduceConfig) { c.Duration, c.Records, c.Producers = 0, 2, 3 }, "fewer"},
	})
	// acks other than all turn idempotence off, which frees max in-flight.
	loose := ok
	loose.Acks, loose.MaxInflight = "1", 10
	if err := loose.Validate(); err != nil {
		t.Errorf("acks=1 with max in-flight 10: %v", err)
	}
	if s := loose.withDefaults().settings(); s.Idempotent || s.MaxInflight != 10 {
		t.Errorf("acks=1 settings: idempotent %v, max in-flight %d; want false, 10", s.Idempotent, s.MaxInflight)
	}
	if s := ok.withDefaults().settings(); !s.Idempotent || s.MaxInflight != 5 || s.BatchMaxBytes != 1<<20 || s.RecordSize != 1024 {
		t.Errorf("default settings: %+v", s)
	}
}

func TestConsumeConfigValidate(t *testing.T) {
	ok := ConsumeConfig{Topic: "t"}
	checkRefusals(t, ok, []refusal[ConsumeConfig]{
		{"no topic", func(c *ConsumeConfig) { c.Topic = "" }, "topic"},
		{"raw with group", func(c *ConsumeConfig) { c.Raw, c.Group = true, "g" }, "without a consumer group"},
		{"partition above fetch", func(c *ConsumeConfig) { c.FetchMaxBytes, c.PartitionMaxBytes = 1<<20, 2<<20 }, "larger than fetch max bytes"},
		{"negative records", func(c *ConsumeConfig) { c.Records = -1 }, "negative"},
	})
}

func TestDiskConfigValidate(t *testing.T) {
	if err := (DiskConfig{}).Validate(); err == nil {
		t.Error("no directory: got no error")
	}
	if err := (DiskConfig{Dir: "x", SeqBytes: 10, BlockSize: 100}).Validate(); err == nil {
		t.Error("less than a block: got no error")
	}
}

// TestDefaultBroker: the Kafka runs seed from 127.0.0.1:9092 when no broker
// is given, and keep the brokers they are given.
func TestDefaultBroker(t *testing.T) {
	given := []string{"b1:9092", "b2:9092"}
	for _, tc := range []struct {
		name string
		got  func([]string) []string
	}{
		{"produce", func(b []string) []string { return ProduceConfig{Client: Client{Brokers: b}}.withDefaults().Brokers }},
		{"consume", func(b []string) []string { return ConsumeConfig{Client: Client{Brokers: b}}.withDefaults().Brokers }},
		{"e2e", func(b []string) []string { return E2EConfig{Client: Client{Brokers: b}}.withDefaults().Brokers }},
	} {
		if got := tc.got(nil); !slices.Equal(got, []string{"127.0.0.1:9092"}) {
			t.Errorf("%s without brokers: got %v, want [127.0.0.1:9092]", tc.name, got)
		}
		if got := tc.got(given); !slices.Equal(got, given) {
			t.Errorf("%s: got %v, want %v", tc.name, got, given)
		}
	}
}
