package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The raft and gossip libraries log through their own interfaces; these
// adapters send their lines to the injected slog.Logger.

// hclogFor returns an hclog.Logger writing JSON lines that are re-emitted
// on l at the matching level, with the line's key/value pairs as attrs;
// rep, if not nil, thins out repeated warnings and errors.
func hclogFor(l *slog.Logger, name string, rep *repeats) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.Info,
		Output:     &hclogWriter{l: l, rep: rep},
		JSONFormat: true,
	})
}

type hclogWriter struct {
	l   *slog.Logger
	rep *repeats
}

// repeatWindow is how long one raft warning or error of a kind stands for
// the others of its kind. A broker that goes away fails the heartbeats,
// appends and vote requests of every group it shares with this one, and
// every group's raft logs each failure and each retry: with thousands of
// groups an election storm wrote tens of thousands of identical lines.
const repeatWindow = 10 * time.Second

// maxRepeatKinds bounds the kinds of line counted at once; beyond it a
// new kind goes out uncounted.
const maxRepeatKinds = 1024

// repeats lets out the first line of a kind (level, message and the peer
// it names), then counts the lines of that kind for repeatWindow; the
// first line of the kind after that says how many were left out
// ("repeated"). One is shared by all the raft groups of a node.
type repeats struct {
	window time.Duration
	now    func() time.Time
	mu     sync.Mutex
	m      map[string]*repeat
}

type repeat struct {
	since   time.Time
	dropped int
}

func newRepeats() *repeats { return &repeats{window: repeatWindow, now: time.Now} }

// pass reports whether a line of kind key goes out, and how many lines of
// its kind were left out since the last one that did.
func (r *repeats) pass(key string) (bool, int) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[key]
	if e != nil && now.Sub(e.since) < r.window {
		e.dropped++
		return false, 0
	}
	left := 0
	if e != nil {
		left = e.dropped
		e.since, e.dropped = now, 0
		return true, left
	}
	if r.m == nil {
		r.m = map[string]*repeat{}
	}
	if len(r.m) >= maxRepeatKinds {
		for k, old := range r.m {
			if now.Sub(old.since) >= r.window {
				delete(r.m, k)
			}
		}
	}
	if len(r.m) < maxRepeatKinds {
		r.m[key] = &repeat{since: now}
	}
	return true, 0
}

// repeatKey is the kind of a raft log line: its level, message and the
// peer it names (raft names it peer, target or from).
func repeatKey(lvl, msg string, attrs map[string]any) string {
	var b strings.Builder
	b.WriteString(lvl)
	b.WriteByte(0)
	b.WriteString(msg)
	for _, k := range [...]string{"peer", "target", "from"} {
		if v, ok := attrs[k]; ok {
			b.WriteByte(0)
			fmt.Fprint(&b, v)
		}
	}
	return b.String()
}

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
		if level := slogLevel(lvl); w.rep != nil && level >= slog.LevelWarn {
			ok, left := w.rep.pass(repeatKey(lvl, msg, m))
			if !ok {
				continue
			}
			if left > 0 {
				attrs = append(attrs, "repeated", left)
			}
		}
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
