package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Client is what every Kafka run takes besides its own settings: where
// the brokers are, how to connect to them, and where its warnings and
// progress go. Each run's config says whether Brokers are required and
// what its Logger and Progress get.
type Client struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// ClientOpts are added to every Kafka client of the run (TLS, SASL).
	ClientOpts []kgo.Opt
	// Logger receives warnings. Default: discard.
	Logger *slog.Logger
	// Progress receives the run's progress lines; nil for none.
	Progress io.Writer
}

// withDefaults gives c a Logger that discards when it has none, so that a
// run logs without checking.
func (c Client) withDefaults() Client {
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

// orDefaultBroker returns brokers, or a broker on this host at Kafka's
// port when there are none: the default seed of the Kafka runs.
func orDefaultBroker(brokers []string) []string {
	if len(brokers) == 0 {
		return []string{"127.0.0.1:9092"}
	}
	return brokers
}

// clientOpts are the options every client of a run shares: sec are the
// connection's TLS and SASL.
func clientOpts(brokers []string, sec []kgo.Opt, log *slog.Logger, id string) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(id),
		kgo.WithLogger(kgoLogger{log}),
	}, sec...)
}

// newAdminClient is the client a run reads and sets its topic up with,
// apart from the clients it measures.
func newAdminClient(brokers []string, sec []kgo.Opt, log *slog.Logger) (*kgo.Client, error) {
	cl, err := kgo.NewClient(clientOpts(brokers, sec, log, "simtel-bench-admin")...)
	if err != nil {
		return nil, fmt.Errorf("cannot create admin client: %w", err)
	}
	return cl, nil
}

// checkProducerCodecs reports acks or a compression that producerOpts
// cannot use.
func checkProducerCodecs(acks, compression string) error {
	if _, err := parseAcks(acks); err != nil {
		return err
	}
	_, err := parseCompression(compression)
	return err
}

// producerOpts adds what the produce and e2e runs give every producer:
// its topic, acks, codec, linger and buffer, and a delivery timeout of
// stall. acks and compression were checked by the run's Validate.
func producerOpts(opts []kgo.Opt, topic, acks, compression string, linger time.Duration, maxBuffered int, stall time.Duration) []kgo.Opt {
	a, _ := parseAcks(acks)
	codec, _ := parseCompression(compression)
	return append(opts,
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(a),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(linger),
		kgo.MaxBufferedRecords(maxBuffered),
		kgo.RecordDeliveryTimeout(stall),
		// A stalled run must be able to fail what it has in flight and
		// end; duplicates do not matter to a benchmark.
		kgo.AllowIdempotentProduceCancellation(),
	)
}

// kgoLogger passes kgo's warnings and errors to the run's logger; kgo's
// info and debug lines are per-connection and per-request chatter that would
// drown a benchmark's output.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var lvl slog.Level
	switch level {
	case kgo.LogLevelError:
		lvl = slog.LevelError
	case kgo.LogLevelWarn:
		lvl = slog.LevelWarn
	case kgo.LogLevelInfo:
		lvl = slog.LevelInfo
	default:
		lvl = slog.LevelDebug
	}
	l.log.Log(context.Background(), lvl, "kgo: "+msg, keyvals...)
}
