package rollup

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/scheduler"
)

// Defaults of Config.
const (
	DefaultTopic           = "telemetry"
	DefaultGroup           = "simtel-rollup"
	DefaultStateTopic      = "rollup_state"
	DefaultAllowedLateness = 3 * time.Minute
	DefaultIdleTimeout     = time.Minute
	DefaultCommitInterval  = 2 * time.Second
	DefaultTxnTimeout      = time.Minute
	DefaultMaxSeries       = 1_000_000
	DefaultSummaryTopic    = SummaryMeasurement
	DefaultPartialTopic    = "rollup_run_parts"
	DefaultMaxRunMetrics   = 10_000
	DefaultMaxSummaryRuns  = 1000
)

// Config configures Run.
type Config struct {
	// Brokers are seed broker addresses (host:port). Required.
	Brokers []string
	// ClientOpts are added to the worker's Kafka clients (TLS, SASL).
	ClientOpts []kgo.Opt
	// Topic is the telemetry topic read (canonical line protocol, one
	// sample per record). Default DefaultTopic.
	Topic string
	// Group is the consumer group; workers in one group share the
	// partitions. Default DefaultGroup.
	Group string
	// TransactionalID is the worker's transactional id, also its static
	// group instance id: a restarted worker with the same id fences the
	// old one and takes its partitions at once. Each worker of a group
	// needs its own. Default: Group.
	TransactionalID string
	// StateTopic keeps the open windows (compacted, as many partitions as
	// Topic). Default DefaultStateTopic.
	StateTopic string
	// AllowedLateness is how far behind the latest sample time of its
	// partition a sample may be and still land in its window: a window
	// is emitted once the partition's latest sample time passes its end
	// by this much. Later samples are counted and dropped. Default
	// DefaultAllowedLateness (3 min).
	AllowedLateness time.Duration
	// IdleTimeout: once a partition has received nothing for this long,
	// its event time advances with the wall clock, so the last windows
	// of a run that stopped close too. Default DefaultIdleTimeout (1 min);
	// negative: never.
	IdleTimeout time.Duration
	// CommitInterval is how often the worker commits a transaction (its
	// output, state and input offsets); read_committed readers see
	// windows this much later. Default DefaultCommitInterval (2 s).
	CommitInterval time.Duration
	// TxnTimeout is the transaction timeout sent to the broker. Default
	// DefaultTxnTimeout (1 min); more than twice CommitInterval.
	TxnTimeout time.Duration
	// MaxSeries bounds the series with open windows held by the worker;
	// samples of further series are counted and dropped. Default
	// DefaultMaxSeries.
	MaxSeries int
	// Partitions is the partition count of the output topics the worker
	// creates when missing. Default: the partition count of Topic.
	Partitions int32
	// RunsTopic is the run registry the worker follows to learn which
	// runs ended (scheduler.RunsTopic). Default scheduler.RunsTopic.
	RunsTopic string
	// PartialTopic carries each input partition's aggregates of an ended
	// run to the worker that merges them (compacted, keyed by run,
	// partition and first offset). Default DefaultPartialTopic.
	PartialTopic string
	// SummaryTopic receives the run summaries: one line-protocol record
	// per run and metric, key run NUL metric (compacted). Default
	// DefaultSummaryTopic.
	SummaryTopic string
	// MaxRunMetrics bounds the metrics (measurement.field) a run's summary
	// holds; values of further metrics are counted in the summary's
	// dropped_samples. Default DefaultMaxRunMetrics.
	MaxRunMetrics int
	// MaxSummaryRuns bounds the run summaries a worker holds merged in
	// memory; beyond it the least recently amended are forgotten, and read
	// back from their partials if one more arrives. Default
	// DefaultMaxSummaryRuns.
	MaxSummaryRuns int
	// HTTPListen is host:port for /metrics and /healthz; empty: off.
	HTTPListen string
	// Logger receives the worker's logs. Default: discard.
	Logger *slog.Logger
	// Registry receives the worker's metrics. Default: a new registry
	// (with the Go and process collectors) served on HTTPListen.
	Registry *prometheus.Registry
}

// Validate fills in defaults and checks the configuration.
func (c *Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("rollup: no brokers given (--brokers host:port,...)")
	}
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.TransactionalID == "" {
		c.TransactionalID = c.Group
	}
	if c.StateTopic == "" {
		c.StateTopic = DefaultStateTopic
	}
	if c.RunsTopic == "" {
		c.RunsTopic = scheduler.RunsTopic
	}
	if c.PartialTopic == "" {
		c.PartialTopic = DefaultPartialTopic
	}
	if c.SummaryTopic == "" {
		c.SummaryTopic = DefaultSummaryTopic
	}
	if err := orDefault(&c.MaxRunMetrics, DefaultMaxRunMetrics, "--max-run-metrics"); err != nil {
		return err
	}
	if err := orDefault(&c.MaxSummaryRuns, DefaultMaxSummaryRuns, "--max-summary-runs"); err != nil {
		return err
	}
	for _, t := range []string{c.Topic, c.StateTopic, c.PartialTopic, c.SummaryTopic} {
		if strings.ContainsAny(t, " /") {
			return fmt.Errorf("rollup: topic name %q is not valid", t)
		}
		for _, r := range Resolutions {
			if t == r.Topic() {
				return fmt.Errorf("rollup: topic %s is an output topic of the rollups", t)
			}
		}
	}
	if c.Topic == c.StateTopic {
		return fmt.Errorf("rollup: the state topic cannot be the input topic %s", c.Topic)
	}
	if c.PartialTopic == c.Topic || c.PartialTopic == c.StateTopic || c.SummaryTopic == c.Topic || c.SummaryTopic == c.StateTopic || c.SummaryTopic == c.PartialTopic {
		return fmt.Errorf("rollup: the topics %s (input), %s (state), %s (partials) and %s (summaries) must differ", c.Topic, c.StateTopic, c.PartialTopic, c.SummaryTopic)
	}
	if err := orDefault(&c.AllowedLateness, DefaultAllowedLateness, "--allowed-lateness"); err != nil {
		return err
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if err := orDefault(&c.CommitInterval, DefaultCommitInterval, "--commit-interval"); err != nil {
		return err
	}
	if c.TxnTimeout == 0 {
		c.TxnTimeout = DefaultTxnTimeout
	}
	if c.TxnTimeout <= 2*c.CommitInterval || c.TxnTimeout > 15*time.Minute {
		return fmt.Errorf("rollup: transaction timeout %v: want more than twice the commit interval %v and at most 15m", c.TxnTimeout, c.CommitInterval)
	}
	if err := orDefault(&c.MaxSeries, DefaultMaxSeries, "--max-series"); err != nil {
		return err
	}
	if c.Partitions < 0 {
		return fmt.Errorf("rollup: %d partitions is negative", c.Partitions)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// orDefault sets *v to def when it is zero and rejects a negative value,
// named by its flag.
func orDefault[T int | time.Duration](v *T, def T, flag string) error {
	if *v == 0 {
		*v = def
	}
	if *v < 0 {
		return fmt.Errorf("rollup: %s %v is negative", flag, *v)
	}
	return nil
}
