package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// The raft and gossip libraries log through their own interfaces; these
// adapters send their lines to the injected slog.Logger.

// hclogFor returns an hclog.Logger writing JSON lines that are re-emitted
// on l at the matching level, with the line's key/value pairs as attrs.
func hclogFor(l *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.Info,
		Output:     &hclogWriter{l: l},
		JSONFormat: true,
	})
}

type hclogWriter struct{ l *slog.Logger }

func (w *hclogWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			w.l.Info(strings.TrimSpace(string(line)))
			continue
		}
		msg, _ := m["@message"].(string)
		lvl, _ := m["@level"].(string)
		mod, _ := m["@module"].(string)
		delete(m, "@message")
		delete(m, "@level")
		delete(m, "@timestamp")
		delete(m, "@module")
		attrs := []any{"module", mod}
		for k, v := range m {
			attrs = append(attrs, k, v)
		}
		w.l.Log(context.Background(), slogLevel(lvl), msg, attrs...)
	}
	return len(p), nil
}

func slogLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "trace", "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// stdLoggerFor returns a *log.Logger whose lines ("[LEVEL] text") go to l.
func stdLoggerFor(l *slog.Logger) *log.Logger {
	return log.New(&stdWriter{l: l}, "", 0)
}

type stdWriter struct{ l *slog.Logger }

func (w *stdWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		s := strings.TrimSpace(string(line))
		lvl := "info"
		if strings.HasPrefix(s, "[") {
			if i := strings.Index(s, "]"); i > 0 {
				lvl, s = s[1:i], strings.TrimSpace(s[i+1:])
			}
		}
		w.l.Log(context.Background(), slogLevel(lvl), s)
	}
	return len(p), nil
}

var _ io.Writer = (*stdWriter)(nil)
