package spool

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simtel/simtel/internal/testutil"
)

// TestCrashSnapshotsWhileAppending copies the directory at random moments
// while several producers append, as a crash (SIGKILL) would leave it, and
// checks that each copy opens to exactly a prefix of every producer's
// records, containing at least every record whose Append had returned
// before the copy started, and nothing else.
func TestCrashSnapshotsWhileAppending(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig(t, dir)
	cfg.SegmentBytes = 16 << 10
	s := mustOpen(t, cfg)
	const producers, perProducer = 4, 4000
	committed := make([]atomic.Int64, producers)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := 0; i < perProducer; {
				n := min(1+rand.IntN(20), perProducer-i)
				if err := s.Append(context.Background(), recs(p, i, n)); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				i += n
				committed[p].Store(int64(i))
			}
		})
	}
	go func() { wg.Wait(); close(stop) }()

	type snapshot struct {
		dir  string
		want []int64
	}
	var snaps []snapshot
	for k := 0; ; k++ {
		want := make([]int64, producers)
		for p := range want {
			want[p] = committed[p].Load()
		}
		d := filepath.Join(t.TempDir(), strconv.Itoa(k))
		copyDir(t, dir, d)
		snaps = append(snaps, snapshot{d, want})
		select {
		case <-stop:
		case <-time.After(time.Duration(rand.IntN(3000)) * time.Microsecond):
			continue
		}
		break
	}
	if len(snaps) < 3 {
		t.Logf("only %d snapshots taken", len(snaps))
	}
	for _, sn := range snaps {
		checkSnapshot(t, sn.dir, sn.want, producers)
	}
}

// checkSnapshot opens a copied spool and checks that it holds, for every
// producer p, records 0..k-1 in order with k >= want[p], and nothing else.
func checkSnapshot(t *testing.T, dir string, want []int64, producers int) {
	t.Helper()
	s, err := Open(smallConfig(t, dir))
	if err != nil {
		t.Fatalf("Open(snapshot %s): %v", dir, err)
	}
	defer s.Close()
	pending := s.Stats().Pending
	got, _ := readN(t, s, int(pending))
	next := make([]int64, producers)
	for _, r := range got {
		p, i, ok := parseRec(r)
		if !ok || p >= producers {
			t.Fatalf("snapshot %s: garbage record %q", dir, r.Value)
		}
		if int64(i) != next[p] {
			t.Fatalf("snapshot %s: producer %d record %d, want %d", dir, p, i, next[p])
		}
		next[p]++
	}
	for p := range next {
		if next[p] < want[p] {
			t.Fatalf("snapshot %s: producer %d has %d records, %d had been appended", dir, p, next[p], want[p])
		}
	}
	// The recovered spool takes new records right after the old ones.
	mustAppend(t, s, recs(producers, 0, 3))
	more, _ := readN(t, s, 3)
	checkSeq(t, more, producers, 0)
}

// headSpool writes n records in batches of batch into a fresh spool
// directory, closes it, and returns the directory, the head segment file
// and the end offset within that file of each record in it.
func headSpool(t *testing.T, n, batch int) (dir, head string, ends []int64, firstInHead int) {
	t.Helper()
	dir = t.TempDir()
	cfg := smallConfig(t, dir)
	cfg.SegmentBytes = 64 << 10
	s := mustOpen(t, cfg)
	appendRange(t, s, 0, n, batch)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files := segmentFiles(t, dir)
	head = files[len(files)-1]
	h, _ := os.ReadFile(head)
	_, seq, ok := decodeHeader(segMagic, h)
	if !ok {
		t.Fatal("bad head header")
	}
	off := int64(segHeaderSize)
	for i := int(seq); i < n; i++ {
		r := rec(0, i)
		off += int64(frameSize(len(r.Key), len(r.Value)))
		ends = append(ends, off)
	}
	if off != int64(len(h)) {
		t.Fatalf("head has %d bytes, records end at %d", len(h), off)
	}
	return dir, head, ends, int(seq)
}

// TestTornTail cuts the head segment at random offsets, sometimes appends
// random garbage or a zero-filled tail, and checks that recovery keeps
// exactly the whole records before the cut.
func TestTornTail(t *testing.T) {
	const n = 300
	src, head, ends, first := headSpool(t, n, 13)
	rnd := rand.New(rand.NewPCG(1, 2))
	for trial := range 60 {
		cut := int64(segHeaderSize) + rnd.Int64N(ends[len(ends)-1]-segHeaderSize+1)
		if trial%10 == 0 {
			cut = ends[rnd.IntN(len(ends))] // exactly on a boundary
		}
		dir := filepath.Join(t.TempDir(), "c")
		copyDir(t, src, dir)
		hp := filepath.Join(dir, filepath.Base(head))
		if err := os.Truncate(hp, cut); err != nil {
			t.Fatal(err)
		}
		switch trial % 3 {
		case 1: // random garbage after the cut
			g := make([]byte, 1+rnd.IntN(300))
			for i := range g {
				g[i] = byte(rnd.Uint32())
			}
			testutil.AppendFile(t, hp, g)
		case 2: // zeros, as a file system may show after a power loss
			testutil.AppendFile(t, hp, make([]byte, 1+rnd.IntN(5000)))
		}
		whole := first
		for _, e := range ends {
			if e <= cut {
				whole++
			}
		}
		s, err := Open(smallConfig(t, dir))
		if err != nil {
			t.Fatalf("trial %d: Open: %v", trial, err)
		}
		if got := s.Stats().Pending; got != uint64(whole) {
			t.Fatalf("trial %d (cut %d): %d records recovered, want %d", trial, cut, got, whole)
		}
		wantSize := int64(segHeaderSize)
		if whole > first {
			wantSize = ends[whole-first-1]
		}
		if fi, err := os.Stat(hp); err != nil || fi.Size() != wantSize {
			t.Fatalf("trial %d: head segment not truncated to %d bytes: %v, %v", trial, wantSize, fi.Size(), err)
		}
		got, _ := readN(t, s, whole)
		checkSeq(t, got, 0, 0)
		// New appends follow the recovered records without a gap.
		mustAppend(t, s, recs(0, whole, 2))
		more, _ := readN(t, s, 2)
		checkSeq(t, more, 0, whole)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// And survive another restart.
		s = mustOpen(t, smallConfig(t, dir))
		if p := s.Stats().Pending; p != uint64(whole+2) {
			t.Fatalf("trial %d: after second restart %d pending, want %d", trial, p, whole+2)
		}
		s.Close()
	}
}

// TestCorruptHeadFrame flips one byte inside a record of the head: that
// record and everything after it are cut off, nothing earlier is lost.
func TestCorruptHeadFrame(t *testing.T) {
	const n = 200
	src, head, ends, first := headSpool(t, n, 10)
	for _, k := range []int{0, 1, len(ends) / 2, len(ends) - 1} {
		dir := filepath.Join(t.TempDir(), "c")
		copyDir(t, src, dir)
		hp := filepath.Join(dir, filepath.Base(head))
		b, _ := os.ReadFile(hp)
		start := int64(segHeaderSize)
		if k > 0 {
			start = ends[k-1]
		}
		b[start+(ends[k]-start)/2] ^= 0x40
		if err := os.WriteFile(hp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s := mustOpen(t, smallConfig(t, dir))
		if got := s.Stats().Pending; got != uint64(first+k) {
			t.Fatalf("corrupt record %d: %d records recovered, want %d", k, got, first+k)
		}
		if st := s.Stats(); st.CorruptBytes != uint64(ends[len(ends)-1]-start) {
			t.Fatalf("corrupt record %d: CorruptBytes %d, want %d", k, st.CorruptBytes, ends[len(ends)-1]-start)
		}
		got, _ := readN(t, s, first+k)
		checkSeq(t, got, 0, 0)
		// Rewrite the damaged record as it was: had recovery not cut
		// the file, the old records after it would come back to life.
		mustAppend(t, s, recs(0, first+k, 1))
		s.Close()
		s = mustOpen(t, smallConfig(t, dir))
		if got := s.Stats().Pending; got != uint64(first+k+1) {
			t.Fatalf("corrupt record %d: after rewrite and restart %d records, want %d", k, got, first+k+1)
		}
		s.Close()
	}
}

// TestCorruptSealedSegment damages a record in a sealed segment: Read
// skips the rest of that segment (counting it) and continues with the
// next; it never returns the damaged record.
func TestCorruptSealedSegment(t *testing.T) {
	const n = 200
	dir, files := closedSpool(t, n)
	_, seq1 := segmentHeader(t, files[1])
	_, seq2 := segmentHeader(t, files[2])
	b, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	// Damage the third record of the second segment.
	r := rec(0, int(seq1))
	off := segHeaderSize + 2*frameSize(len(r.Key), len(r.Value)) + 30
	b[off] ^= 1
	if err := os.WriteFile(files[1], b, 0o644); err != nil {
		t.Fatal(err)
	}

	s := mustOpen(t, smallConfig(t, dir))
	got, _ := readAvailable(t, s, 0, 0)
	// Records before the damage, then the next segment onwards.
	wantN := int(seq1) + 2 + (n - int(seq2))
	if len(got) < int(seq1)+2 {
		t.Fatalf("read %d records, want at least %d", len(got), seq1+2)
	}
	checkSeq(t, got[:seq1+2], 0, 0)
	if len(got) != wantN {
		t.Fatalf("read %d records, want %d", len(got), wantN)
	}
	checkSeq(t, got[seq1+2:], 0, int(seq2))
	if st := s.Stats(); st.CorruptBytes == 0 {
		t.Fatal("CorruptBytes = 0 after skipping damaged data")
	}
}

// TestCrashCursorBound checks the documented redelivery bound: after a
// crash, delivery resumes at the last persisted checkpoint of the ack
// cursor (or later, where whole segments were deleted), never after the
// last Ack.
func TestCrashCursorBound(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig(t, dir)
	cfg.CheckpointInterval = time.Hour // only explicit checkpoints
	s := mustOpen(t, cfg)
	const n = 400
	appendRange(t, s, 0, n, 10)
	_, p100 := readN(t, s, 100)
	if err := s.Ack(p100); err != nil {
		t.Fatal(err)
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	_, p150 := readN(t, s, 50)
	if err := s.Ack(p150); err != nil {
		t.Fatal(err)
	}

	// Crash now: the cursor says 100, but segments wholly before 150
	// are gone, so delivery resumes between 100 and 150: at the start
	// of the oldest remaining segment, or at 100.
	crash := filepath.Join(t.TempDir(), "crash")
	copyDir(t, dir, crash)
	files := segmentFiles(t, crash)
	_, oldestSeq := segmentHeader(t, files[0])
	wantFrom := max(100, int(oldestSeq))
	c := mustOpen(t, smallConfig(t, crash))
	got, _ := readN(t, c, n-wantFrom)
	checkSeq(t, got, 0, wantFrom)
	if wantFrom > 150 || wantFrom < 100 {
		t.Fatalf("redelivery from %d, want within [100, 150]", wantFrom)
	}
	c.Close()

	// After a checkpoint, a crash redelivers exactly from the last Ack.
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	crash2 := filepath.Join(t.TempDir(), "crash2")
	copyDir(t, dir, crash2)
	c = mustOpen(t, smallConfig(t, crash2))
	if p := c.Stats().Pending; p != n-150 {
		t.Fatalf("after checkpoint and crash, %d pending, want %d", p, n-150)
	}
	got, _ = readN(t, c, n-150)
	checkSeq(t, got, 0, 150)
}

// TestCursorCheckpointTicks: the cursor is persisted at most every
// CheckpointInterval: by the flusher when acknowledgements come faster, by
// Ack itself when the last write is older (virtual time, synctest).
func TestCursorCheckpointTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		cfg := smallConfig(t, dir)
		cfg.CheckpointInterval = time.Second
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		cursor := func() (Pos, bool) {
			b, err := os.ReadFile(filepath.Join(dir, cursorName))
			if err != nil {
				return Pos{}, false
			}
			off, seq, ok := decodeHeader(cursorMagic, b)
			return Pos{Offset: off, Seq: seq}, ok
		}
		mustAppend(t, s, recs(0, 0, 10))
		_, p := readUnacked(t, s, 7)
		if err := s.Ack(p); err != nil {
			t.Fatal(err)
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if got, ok := cursor(); ok && got == p {
			t.Fatal("cursor persisted before CheckpointInterval")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got, ok := cursor(); !ok || got != p {
			t.Fatalf("cursor after one interval = %+v (valid %v), want %+v", got, ok, p)
		}

		// An Ack after a quiet interval writes the cursor at once.
		time.Sleep(2 * time.Second)
		_, p = readUnacked(t, s, 2)
		if err := s.Ack(p); err != nil {
			t.Fatal(err)
		}
		if got, ok := cursor(); !ok || got != p {
			t.Fatalf("cursor right after an Ack that followed a quiet interval = %+v (valid %v), want %+v", got, ok, p)
		}
		// One soon after it waits for the interval to pass since that
		// write.
		time.Sleep(300 * time.Millisecond)
		first := p
		_, p = readUnacked(t, s, 1)
		if err := s.Ack(p); err != nil {
			t.Fatal(err)
		}
		time.Sleep(699 * time.Millisecond)
		synctest.Wait()
		if got, _ := cursor(); got != first {
			t.Fatalf("cursor 0.999 s after the last write = %+v, want the one written then, %+v", got, first)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got, ok := cursor(); !ok || got != p {
			t.Fatalf("cursor one interval after the last write = %+v (valid %v), want %+v", got, ok, p)
		}
	})
}

// TestSIGKILL runs a real process that appends, reads and acknowledges,
// kills it with SIGKILL at a random moment, and checks that the reopened
// spool delivers, in order and without gaps, every record from at most the
// last acknowledged one to at least the last appended one.
func TestSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	for round := range 3 {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAppender$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SPOOL_HELPER_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := 200 + rand.IntN(2000)
		var appended, acked int64
		sc := bufio.NewScanner(out)
		lines := 0
		for sc.Scan() {
			var n int64
			if _, err := fmt.Sscanf(sc.Text(), "appended %d", &n); err == nil {
				appended = n
			} else if _, err := fmt.Sscanf(sc.Text(), "acking %d", &n); err == nil {
				acked = n
			}
			if lines++; lines == killAfter {
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("helper did not die by signal: %v", err)
		}

		s := mustOpen(t, smallConfig(t, dir))
		st := s.Stats()
		got, _ := readN(t, s, int(st.Pending))
		if len(got) == 0 {
			if appended > acked {
				t.Fatalf("round %d: nothing recovered; %d appended, %d acked", round, appended, acked)
			}
			continue
		}
		_, from, _ := parseRec(got[0])
		checkSeq(t, got, 0, from)
		to := int64(from + len(got))
		t.Logf("round %d: killed after %d lines; appended %d, acking %d; recovered [%d, %d)",
			round, killAfter, appended, acked, from, to)
		if int64(from) > acked {
			t.Fatalf("round %d: delivery resumes at %d, after the last ack %d: records lost", round, from, acked)
		}
		if to < appended {
			t.Fatalf("round %d: recovered up to %d, but %d had been appended", round, to, appended)
		}
		s.Close()
	}
}

// TestHelperAppender is the process killed by TestSIGKILL. It appends
// batches of producer 0's records and reports each finished Append
// ("appended N": records 0..N-1 are in), and each Ack before making it
// ("acking N").
func TestHelperAppender(t *testing.T) {
	dir := os.Getenv("SPOOL_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process for TestSIGKILL")
	}
	cfg := Config{Dir: dir, SegmentBytes: 16 << 10, MaxBytes: 1 << 30, CheckpointInterval: time.Millisecond}
	s, err := Open(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex // one line at a time on stdout
	say := func(format string, a ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", a...)
		mu.Unlock()
	}
	go func() {
		for {
			rs, p, err := s.Read(context.Background(), 50, 0)
			if err != nil {
				os.Exit(3)
			}
			_ = rs
			say("acking %d", p.Seq)
			if err := s.Ack(p); err != nil {
				os.Exit(4)
			}
		}
	}()
	for i := 0; ; {
		n := 1 + i%23
		if err := s.Append(context.Background(), recs(0, i, n)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(5)
		}
		i += n
		say("appended %d", i)
	}
}

// TestShortSealedSegment cuts a sealed segment short, as a power loss
// before its sync could: Read delivers its whole records, skips the lost
// tail (counting it) and goes on with the next segment.
func TestShortSealedSegment(t *testing.T) {
	const n = 200
	dir, files := closedSpool(t, n)
	_, seq1 := segmentHeader(t, files[1])
	base2, seq2 := segmentHeader(t, files[2])
	// Keep the header and 3 whole records plus half of the fourth.
	keep := int64(segHeaderSize)
	for i := range 3 {
		r := rec(0, int(seq1)+i)
		keep += int64(frameSize(len(r.Key), len(r.Value)))
	}
	keep += 10
	if err := os.Truncate(files[1], keep); err != nil {
		t.Fatal(err)
	}

	s := mustOpen(t, smallConfig(t, dir))
	got, _ := readAvailable(t, s, 0, 0)
	want := int(seq1) + 3 + (n - int(seq2))
	if len(got) != want {
		t.Fatalf("read %d records, want %d", len(got), want)
	}
	checkSeq(t, got[:seq1+3], 0, 0)
	checkSeq(t, got[seq1+3:], 0, int(seq2))
	base1, _ := parseSegmentName(filepath.Base(files[1]))
	lost := base2 - base1 - uint64(keep-segHeaderSize-10)
	if st := s.Stats(); st.CorruptBytes != lost {
		t.Fatalf("CorruptBytes %d, want the %d bytes lost", st.CorruptBytes, lost)
	}
}
