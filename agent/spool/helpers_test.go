package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testLogger logs through t, so messages show with failing tests only.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// smallConfig has small segments so tests cross many of them.
func smallConfig(t testing.TB, dir string) Config {
	return Config{
		Dir:          dir,
		SegmentBytes: 4096,
		MaxBytes:     64 << 20,
		Logger:       testLogger(t),
	}
}

func mustOpen(t testing.TB, cfg Config) *Spool {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%q): %v", cfg.Dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openHundred opens a spool of 16 KiB segments holding records 0 to 99 of
// producer 0, for the tests of reading, acknowledging and rewinding.
func openHundred(t testing.TB) *Spool {
	t.Helper()
	cfg := smallConfig(t, t.TempDir())
	cfg.SegmentBytes = 16 << 10
	s := mustOpen(t, cfg)
	mustAppend(t, s, recs(0, 0, 100))
	return s
}

// rec is record i of producer p: its value is self-describing and
// checksummed by its content so a read can tell a right record from
// garbage, and its length varies with i.
func rec(p, i int) Record {
	v := fmt.Sprintf("cpu,host=n%d,job=42 usage=%d.5,i=%di %d", p, i, i, i)
	v += strings.Repeat("x", i%37)
	return Record{Key: []byte("run/p" + strconv.Itoa(p)), Value: []byte(v), Time: int64(p)<<40 | int64(i)}
}

// parseRec returns the producer and index of a record made by rec, and
// reports whether the record is exactly rec(p, i).
func parseRec(r Record) (p, i int, ok bool) {
	p = int(r.Time >> 40)
	i = int(r.Time & (1<<40 - 1))
	want := rec(p, i)
	return p, i, bytes.Equal(r.Key, want.Key) && bytes.Equal(r.Value, want.Value)
}

func recs(p, from, n int) []Record {
	out := make([]Record, n)
	for k := range out {
		out[k] = rec(p, from+k)
	}
	return out
}

func mustAppend(t testing.TB, s *Spool, rs []Record) {
	t.Helper()
	if err := s.Append(context.Background(), rs); err != nil {
		t.Fatalf("Append(%d records): %v", len(rs), err)
	}
}

// appendRange appends records from to to-1 of producer 0, batch records per
// Append (the last one shorter if need be).
func appendRange(t testing.TB, s *Spool, from, to, batch int) {
	t.Helper()
	for i := from; i < to; i += batch {
		mustAppend(t, s, recs(0, i, min(batch, to-i)))
	}
}

// closedSpool writes n records, ten per Append, to a spool with small
// segments in a fresh directory, closes it and returns the directory and
// its segment files, oldest first.
func closedSpool(t testing.TB, n int) (dir string, files []string) {
	t.Helper()
	dir = t.TempDir()
	s := mustOpen(t, smallConfig(t, dir))
	appendRange(t, s, 0, n, 10)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, segmentFiles(t, dir)
}

// segmentHeader returns the base offset and first sequence number in the
// header of the segment file at path.
func segmentHeader(t testing.TB, path string) (base, seq uint64) {
	t.Helper()
	h, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	base, seq, ok := decodeHeader(segMagic, h)
	if !ok {
		t.Fatalf("%s: bad segment header", path)
	}
	return base, seq
}

// copyRecs deep-copies records read from the spool (their memory is
// reused after Ack).
func copyRecs(rs []Record) []Record {
	out := make([]Record, len(rs))
	for i, r := range rs {
		out[i] = Record{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Time: r.Time}
	}
	return out
}

// readAvailable reads every record appended and not yet read, without
// acknowledging, and returns copies and the final position.
func readAvailable(t testing.TB, s *Spool, maxRecords, maxBytes int) ([]Record, Pos) {
	t.Helper()
	var out []Record
	var last Pos
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		rs, p, err := s.Read(ctx, maxRecords, maxBytes)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return out, last
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		out = append(out, copyRecs(rs)...)
		last = p
	}
}

// readN reads exactly n records (failing after 10 s).
func readN(t testing.TB, s *Spool, n int) ([]Record, Pos) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []Record
	var last Pos
	for len(out) < n {
		rs, p, err := s.Read(ctx, n-len(out), 0)
		if err != nil {
			t.Fatalf("Read after %d of %d records: %v", len(out), n, err)
		}
		out = append(out, copyRecs(rs)...)
		last = p
	}
	return out, last
}

// checkSeq fails unless got is exactly producer p's records from..from+len.
func checkSeq(t testing.TB, got []Record, p, from int) {
	t.Helper()
	for k, r := range got {
		gp, gi, ok := parseRec(r)
		if !ok || gp != p || gi != from+k {
			t.Fatalf("record %d: got producer %d index %d (valid %v), want producer %d index %d", k, gp, gi, ok, p, from+k)
		}
	}
}

// copyDir copies a live spool directory the way a crash would leave it:
// the cursor first, then segments in order, each file as it is at the
// moment it is read. Files deleted meanwhile are skipped.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile := func(name string) {
		b, err := os.ReadFile(filepath.Join(src, name))
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(cursorName)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := parseSegmentName(e.Name()); ok {
			copyFile(e.Name())
		}
	}
}

// segmentFiles lists the segment files of dir, oldest first.
func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, ok := parseSegmentName(e.Name()); ok {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}
