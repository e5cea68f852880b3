package collector

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/internal/testutil"
)

// point is one decoded line-protocol line.
type point struct {
	measurement string
	tags        map[string]string
	fields      map[string]any // int64 or float64 (or others the decoder knows)
	time        time.Time
}

// decodeLines decodes out line by line and fails the test on any syntax
// error: every line Collect writes must be a canonical line-protocol line.
func decodeLines(t testing.TB, out []byte) []point {
	t.Helper()
	if len(out) > 0 && out[len(out)-1] != '\n' {
		t.Fatalf("output does not end in a newline: %q", out)
	}
	if bytes.Contains(out, []byte("\n\n")) {
		t.Fatalf("output has an empty line:\n%s", out)
	}
	var pts []point
	var d lineproto.Decoder
	_ = lineproto.Lines(out, func(n int, line []byte) error {
		if err := d.Decode(line); err != nil {
			t.Fatalf("line %d: %v\n%s", n, err, out)
		}
		p := point{measurement: string(d.Measurement), tags: map[string]string{}, fields: map[string]any{}}
		for _, tg := range d.Tags {
			p.tags[string(tg.Key)] = string(tg.Value)
		}
		for i := range d.Fields {
			k := string(d.Fields[i].Key)
			if _, dup := p.fields[k]; dup {
				t.Fatalf("line %d: field %s twice", n, k)
			}
			p.fields[k] = d.Fields[i].Interface()
		}
		if !d.HasTime {
			t.Fatalf("line %d has no timestamp", n)
		}
		p.time = time.Unix(0, d.Time)
		pts = append(pts, p)
		return nil
	})
	return pts
}

// only returns the points of measurement m whose tags include tags (k, v
// pairs).
func only(pts []point, m string, tags ...string) []point {
	var r []point
next:
	for _, p := range pts {
		if p.measurement != m {
			continue
		}
		for i := 0; i+1 < len(tags); i += 2 {
			if p.tags[tags[i]] != tags[i+1] {
				continue next
			}
		}
		r = append(r, p)
	}
	return r
}

// one returns the single point of measurement m with tags, failing otherwise.
func one(t testing.TB, pts []point, m string, tags ...string) point {
	t.Helper()
	r := only(pts, m, tags...)
	if len(r) != 1 {
		t.Fatalf("got %d %s lines with tags %v, want 1", len(r), m, tags)
	}
	return r[0]
}

// wantFields checks that p has exactly the given values for the given keys.
func wantFields(t testing.TB, p point, want map[string]any) {
	t.Helper()
	for k, w := range want {
		got, ok := p.fields[k]
		if !ok {
			t.Errorf("%s %v: no field %s, want %v (%T)", p.measurement, p.tags, k, w, w)
			continue
		}
		if got != w {
			t.Errorf("%s %v: %s = %v (%T), want %v (%T)", p.measurement, p.tags, k, got, got, w, w)
		}
	}
}

// wantNoFields checks that p has none of the keys.
func wantNoFields(t testing.TB, p point, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := p.fields[k]; ok {
			t.Errorf("%s %v: field %s = %v, want none", p.measurement, p.tags, k, v)
		}
	}
}

func measurements(pts []point) []string {
	seen := map[string]bool{}
	for _, p := range pts {
		seen[p.measurement] = true
	}
	var r []string
	for m := range seen {
		r = append(r, m)
	}
	sort.Strings(r)
	return r
}

// copyTree copies the files under src into dst (created as needed).
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newFakeClock is a Config.Now the test moves by hand.
func newFakeClock() *testutil.Clock {
	return testutil.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
}

// logBuffer collects debug log output.
type logBuffer struct{ testutil.SyncBuffer }

// count returns how many log lines contain all of the substrings.
func (l *logBuffer) count(subs ...string) int {
	n := 0
	for line := range strings.SplitSeq(l.String(), "\n") {
		all := line != ""
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func collect(t testing.TB, c *Collector) []point {
	t.Helper()
	out, err := c.Collect(context.Background(), nil)
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return decodeLines(t, out)
}
