package spool

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestBlockPolicy fills a spool with the Block policy: Append waits at
// MaxBytes, reading alone frees nothing, an Ack that deletes a segment
// lets it go on, a deadline ends the wait with ErrFull, Close with
// ErrClosed. Time is virtual (synctest): no sleeps.
func TestBlockPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig(t, t.TempDir())
		cfg.SegmentBytes = 4096
		cfg.MaxBytes = 3 * 4096
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()

		const total = 2000
		var appended atomic.Int64
		done := make(chan error, 1)
		go func() {
			for i := range total {
				if err := s.Append(context.Background(), recs(0, i, 1)); err != nil {
					done <- err
					return
				}
				appended.Store(int64(i + 1))
			}
			done <- nil
		}()

		synctest.Wait()
		blockedAt := appended.Load()
		st := s.Stats()
		if blockedAt == total || st.BlockedTotal != 1 {
			t.Fatalf("appender not blocked: %d appended, BlockedTotal %d", blockedAt, st.BlockedTotal)
		}
		next := rec(0, int(blockedAt))
		need := int64(frameSize(len(next.Key), len(next.Value)) + segHeaderSize)
		if st.Bytes > cfg.MaxBytes || st.Bytes+need <= cfg.MaxBytes {
			t.Fatalf("blocked with %d bytes on disk; bound %d, next append needs up to %d", st.Bytes, cfg.MaxBytes, need)
		}

		// Reading without acknowledging frees nothing.
		got, pos := readUnacked(t, s, int(blockedAt))
		checkSeq(t, got, 0, 0)
		synctest.Wait()
		if n := appended.Load(); n != blockedAt {
			t.Fatalf("append went on (%d -> %d) without an Ack", blockedAt, n)
		}
		// Acknowledging a part of the first segment frees nothing either.
		if err := s.Ack(Pos{Offset: 50, Seq: 0}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := appended.Load(); n != blockedAt {
			t.Fatalf("append went on (%d -> %d) while no segment was freed", blockedAt, n)
		}
		// Acknowledging everything read deletes sealed segments.
		if err := s.Ack(pos); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		resumedAt := appended.Load()
		if resumedAt <= blockedAt {
			t.Fatalf("append did not resume after Ack: still %d", resumedAt)
		}

		// Drain the rest while the appender keeps hitting the bound.
		seen := int(blockedAt)
		for seen < total {
			rs, p, err := s.Read(context.Background(), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			checkSeq(t, rs, 0, seen)
			seen += len(rs)
			if err := s.Ack(p); err != nil {
				t.Fatal(err)
			}
			if b := s.Stats().Bytes; b > cfg.MaxBytes {
				t.Fatalf("%d bytes on disk, bound %d", b, cfg.MaxBytes)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		// Fill again; a deadline ends the wait with ErrFull.
		i := total
		for ; s.Stats().Bytes+int64(2*len(rec(0, i).Value)) < cfg.MaxBytes-segHeaderSize; i++ {
			mustAppend(t, s, recs(0, i, 1))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		var errFull error
		for errFull == nil {
			errFull = s.Append(ctx, recs(0, i, 1))
			i++
		}
		if !errors.Is(errFull, ErrFull) || !errors.Is(errFull, context.DeadlineExceeded) {
			t.Fatalf("Append at the bound with a deadline = %v; want ErrFull and DeadlineExceeded", errFull)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("waited %v, want the 5 s deadline", waited)
		}

		// Close wakes a blocked Append.
		go func() { done <- s.Append(context.Background(), recs(0, i, 1)) }()
		synctest.Wait()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked Append after Close = %v, want ErrClosed", err)
		}
	})
}

// readUnacked reads n records without acknowledging them.
func readUnacked(t *testing.T, s *Spool, n int) ([]Record, Pos) {
	t.Helper()
	var out []Record
	var pos Pos
	for len(out) < n {
		rs, p, err := s.Read(context.Background(), n-len(out), 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, copyRecs(rs)...)
		pos = p
	}
	return out, pos
}

// TestDropOldest appends far more than fits with no reader: the oldest
// segments are dropped and counted, the bound holds, and what is left is
// exactly the newest records, in order.
func TestDropOldest(t *testing.T) {
	cfg := smallConfig(t, t.TempDir())
	cfg.SegmentBytes = 4096
	cfg.MaxBytes = 3 * 4096
	cfg.Policy = DropOldest
	s := mustOpen(t, cfg)

	// Read (and hold) a few records first: dropping them counts them,
	// since they were not acknowledged.
	mustAppend(t, s, recs(0, 0, 5))
	readN(t, s, 5)

	const total = 1000
	for i := 5; i < total; i += 3 {
		mustAppend(t, s, recs(0, i, min(3, total-i)))
		if st := s.Stats(); st.Bytes > cfg.MaxBytes {
			t.Fatalf("after %d records: %d bytes on disk, bound %d", i, st.Bytes, cfg.MaxBytes)
		}
	}
	st := s.Stats()
	if st.Dropped == 0 || st.BlockedTotal != 0 {
		t.Fatalf("stats %+v: want drops and no blocking", st)
	}
	if st.Dropped+st.Pending != total {
		t.Fatalf("dropped %d + pending %d != appended %d", st.Dropped, st.Pending, total)
	}
	got, _ := readN(t, s, int(st.Pending))
	checkSeq(t, got, 0, int(st.Dropped))
	if st.Segments > 3 {
		t.Fatalf("%d segments for a bound of 3", st.Segments)
	}
}

// TestDiskFull injects ENOSPC into writes: Append fails with ErrDiskFull,
// nothing of the failed batch is visible or survives a restart, and the
// spool keeps working when space returns.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	// 0 ok, 1 fail, 2 write half then fail, 3 fail segment headers only
	var mode atomic.Int32
	h := &hooks{writeAt: func(f *os.File, b []byte, off int64) (int, error) {
		switch mode.Load() {
		case 1:
			return 0, syscall.ENOSPC
		case 3:
			if off == 0 {
				return 0, syscall.ENOSPC
			}
		case 2:
			n, _ := f.WriteAt(b[:len(b)/2], off)
			return n, syscall.ENOSPC
		}
		return f.WriteAt(b, off)
	}}
	cfg := smallConfig(t, dir)
	cfg.hooks = h
	s := mustOpen(t, cfg)

	mustAppend(t, s, recs(0, 0, 10))
	headSize := func() int64 {
		files := segmentFiles(t, dir)
		fi, err := os.Stat(files[len(files)-1])
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := headSize()
	for _, m := range []int32{2, 1} {
		mode.Store(m)
		err := s.Append(context.Background(), recs(1, 0, 5))
		if !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("mode %d: Append = %v, want ErrDiskFull wrapping ENOSPC", m, err)
		}
		if got := headSize(); got != before {
			t.Fatalf("mode %d: head segment %d bytes after the failed write, want %d (cut back)", m, got, before)
		}
	}
	// Readable, without any part of the failed batches.
	got, _ := readN(t, s, 10)
	checkSeq(t, got, 0, 0)
	if rs, _ := readAvailable(t, s, 0, 0); len(rs) != 0 {
		t.Fatalf("read %d records of failed appends", len(rs))
	}

	// A rotation that cannot write the new segment's header fails
	// cleanly too, and leaves no file behind.
	nfiles := len(segmentFiles(t, dir))
	mode.Store(3)
	next := 10
	for {
		err := s.Append(context.Background(), recs(0, next, 10))
		if err != nil {
			if !errors.Is(err, ErrDiskFull) {
				t.Fatalf("Append needing a new segment = %v, want ErrDiskFull", err)
			}
			break
		}
		next += 10
	}
	if n := len(segmentFiles(t, dir)); n != nfiles {
		t.Fatalf("%d segment files after a failed rotation, want %d", n, nfiles)
	}

	// Space is back: appends continue the stream without a gap,
	// across rotations.
	mode.Store(0)
	appendRange(t, s, next, 200, 10)
	more, _ := readN(t, s, 190)
	checkSeq(t, more, 0, 10)
	if st := s.Stats(); st.WriteErrors != 3 || st.AppendedTotal != 200 {
		t.Fatalf("stats %+v: want 3 write errors, 200 appended", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, smallConfig(t, dir))
	all, _ := readN(t, s, int(s.Stats().Pending))
	if len(all) != 200 {
		t.Fatalf("after restart %d records, want 200", len(all))
	}
	checkSeq(t, all, 0, 0)
}

// TestDiskFullOnRotation makes only segment creation fail.
func TestDiskFullOnRotation(t *testing.T) {
	dir := t.TempDir()
	var fail atomic.Bool
	cfg := smallConfig(t, dir)
	cfg.hooks = &hooks{create: func(path string) (*os.File, error) {
		if fail.Load() {
			return nil, &os.PathError{Op: "open", Path: path, Err: syscall.ENOSPC}
		}
		return defaultCreate(path)
	}}
	s := mustOpen(t, cfg)
	fail.Store(true)
	i := 0
	var err error
	for ; err == nil && i < 1000; i++ {
		err = s.Append(context.Background(), recs(0, i, 1))
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Append needing a new segment = %v, want ErrDiskFull", err)
	}
	fail.Store(false)
	mustAppend(t, s, recs(0, i-1, 1))
	got, _ := readN(t, s, i)
	checkSeq(t, got, 0, 0)
}
