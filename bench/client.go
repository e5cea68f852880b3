package bench

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// clientOpts are the options every client of a run shares: sec are the
// connection's TLS and SASL.
func clientOpts(brokers []string, sec []kgo.Opt, log *slog.Logger, id string) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(id),
		kgo.WithLogger(kgoLogger{log}),
	}, sec...)
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
