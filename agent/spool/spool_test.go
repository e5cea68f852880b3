package spool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	cfg := smallConfig(t, t.TempDir())
	cfg.SegmentBytes = 16 << 10
	s := mustOpen(t, cfg)
	n := 0
	for _, size := range []int{1, 7, 1, 30, 2, 60, 5} {
		mustAppend(t, s, recs(0, n, size))
		n += size
	}
	// Read with assorted limits: records, bytes, and a byte budget
	// smaller than one record (which must still return one).
	var got []Record
	limits := [][2]int{{1, 0}, {3, 0}, {0, 200}, {0, 1}, {10, 10000}, {0, 0}}
	for k := 0; len(got) < n; k++ {
		l := limits[k%len(limits)]
		rs, _ := readN(t, s, 1)
		got = append(got, rs...)
		if len(got) == n {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		batch, _, err := s.Read(ctx, l[0], l[1])
		cancel()
		if err != nil {
			t.Fatalf("Read(%d, %d): %v", l[0], l[1], err)
		}
		if l[0] > 0 && len(batch) > l[0] {
			t.Fatalf("Read(max %d) returned %d records", l[0], len(batch))
		}
		got = append(got, copyRecs(batch)...)
	}
	if len(got) != n {
		t.Fatalf("read %d records, want %d", len(got), n)
	}
	checkSeq(t, got, 0, 0)
	for i, r := range got {
		if want := rec(0, i).Time; r.Time != want {
			t.Fatalf("record %d: time %d, want %d", i, r.Time, want)
		}
	}
	st := s.Stats()
	if st.AppendedTotal != uint64(n) || st.Pending != uint64(n) {
		t.Fatalf("stats: appended %d pending %d, want %d and %d", st.AppendedTotal, st.Pending, n, n)
	}
}

func TestReadRespectsByteBudget(t *testing.T) {
	s := mustOpen(t, smallConfig(t, t.TempDir()))
	mustAppend(t, s, recs(0, 0, 20))
	one := frameSize(len(rec(0, 0).Key), len(rec(0, 0).Value))
	rs, p, err := s.Read(context.Background(), 0, 3*one+one/2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("got %d records for a budget of 3.5 frames, want 3", len(rs))
	}
	if p.Seq != 3 {
		t.Fatalf("position seq %d, want 3", p.Seq)
	}
	var size int
	for _, r := range rs {
		size += frameSize(len(r.Key), len(r.Value))
	}
	if p.Offset != uint64(size) {
		t.Fatalf("position offset %d, want %d", p.Offset, size)
	}
}

// TestConcurrentAppendOneReader runs several appenders against one reader
// that acknowledges as it goes, with small segments and a small bound so
// that rotation, deletion and blocking all happen. Every record must be
// read exactly once and in per-producer order.
func TestConcurrentAppendOneReader(t *testing.T) {
	cfg := smallConfig(t, t.TempDir())
	cfg.SegmentBytes = 8192
	cfg.MaxBytes = 4 * 8192
	s := mustOpen(t, cfg)
	const producers, perProducer = 8, 3000
	total := producers * perProducer

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := 0; i < perProducer; {
				n := min(1+(i*7+p)%40, perProducer-i)
				if err := s.Append(context.Background(), recs(p, i, n)); err != nil {
					t.Errorf("producer %d: Append: %v", p, err)
					return
				}
				i += n
			}
		})
	}

	next := make([]int, producers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for seen := 0; seen < total; {
		rs, pos, err := s.Read(ctx, 100, 4096)
		if err != nil {
			t.Fatalf("Read after %d records: %v", seen, err)
		}
		for _, r := range rs {
			p, i, ok := parseRec(r)
			if !ok || p >= producers {
				t.Fatalf("garbage record after %d: %q", seen, r.Value)
			}
			if i != next[p] {
				t.Fatalf("producer %d: got record %d, want %d", p, i, next[p])
			}
			next[p]++
		}
		seen += len(rs)
		if err := s.Ack(pos); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	st := s.Stats()
	if st.Pending != 0 || st.AppendedTotal != uint64(total) || st.AckedTotal != uint64(total) {
		t.Fatalf("stats %+v: want 0 pending, %d appended and acked", st, total)
	}
	if st.Bytes > cfg.MaxBytes {
		t.Fatalf("%d bytes on disk, bound %d", st.Bytes, cfg.MaxBytes)
	}
	if st.BlockedTotal == 0 {
		t.Log("no Append had to wait for space (the reader kept up)")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if rs, _, err := s.Read(ctx2, 0, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read after everything: %d records, err %v; want DeadlineExceeded", len(rs), err)
	}
}

func TestRotationAndDeletion(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, smallConfig(t, dir))
	const n = 300
	appendRange(t, s, 0, n, 10)
	files := segmentFiles(t, dir)
	st := s.Stats()
	if len(files) < 4 || st.Segments != len(files) {
		t.Fatalf("%d segment files, Stats.Segments %d; want >= 4 and equal", len(files), st.Segments)
	}
	var size int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 4096 {
			t.Fatalf("segment %s has %d bytes, SegmentBytes 4096", f, fi.Size())
		}
		size += fi.Size()
	}
	if st.Bytes != size {
		t.Fatalf("Stats.Bytes %d, files hold %d", st.Bytes, size)
	}

	// Read everything, acknowledge up to the middle of the second
	// segment: exactly the first segment goes.
	var positions []Pos
	ctx := context.Background()
	for read := 0; read < n; {
		rs, p, err := s.Read(ctx, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		read += len(rs)
		positions = append(positions, p)
	}
	second, _ := parseSegmentName(filepath.Base(files[1]))
	third, _ := parseSegmentName(filepath.Base(files[2]))
	var mid Pos
	for _, p := range positions {
		if p.Offset > second && p.Offset < third {
			mid = p
			break
		}
	}
	if err := s.Ack(mid); err != nil {
		t.Fatal(err)
	}
	if got := segmentFiles(t, dir); len(got) != len(files)-1 || got[0] != files[1] {
		t.Fatalf("after Ack into the second segment, files %v; want %v", got, files[1:])
	}
	if st := s.Stats(); st.Pending != uint64(n)-mid.Seq || st.AckedTotal != mid.Seq {
		t.Fatalf("stats %+v; want pending %d acked %d", st, uint64(n)-mid.Seq, mid.Seq)
	}

	// Acknowledge everything: only the head remains.
	if err := s.Ack(positions[len(positions)-1]); err != nil {
		t.Fatal(err)
	}
	got := segmentFiles(t, dir)
	if len(got) != 1 || got[0] != files[len(files)-1] {
		t.Fatalf("after acknowledging everything, files %v; want only the head %s", got, files[len(files)-1])
	}
	fi, _ := os.Stat(got[0])
	if st := s.Stats(); st.Segments != 1 || st.Bytes != fi.Size() || st.Pending != 0 {
		t.Fatalf("stats %+v; want 1 segment of %d bytes, nothing pending", st, fi.Size())
	}

	// An old position is a no-op; a position past the end is refused.
	if err := s.Ack(positions[0]); err != nil {
		t.Fatalf("Ack(old position): %v", err)
	}
	if err := s.Ack(Pos{Offset: 1 << 40, Seq: 1 << 40}); !errors.Is(err, ErrBadPos) {
		t.Fatalf("Ack(beyond end) = %v, want ErrBadPos", err)
	}
}

func TestRewind(t *testing.T) {
	s := openHundred(t)
	_, p10 := readN(t, s, 10)
	if err := s.Ack(p10); err != nil {
		t.Fatal(err)
	}
	first, _ := readN(t, s, 50)
	checkSeq(t, first, 0, 10)
	s.Rewind()
	again, _ := readN(t, s, 90)
	checkSeq(t, again, 0, 10)
}

// TestAckPastReader: an Ack beyond the read cursor (possible after a
// Rewind, when a late broker acknowledgement arrives) moves the reader.
func TestAckPastReader(t *testing.T) {
	s := openHundred(t)
	_, p60 := readN(t, s, 60)
	s.Rewind()
	if err := s.Ack(p60); err != nil {
		t.Fatal(err)
	}
	rest, _ := readN(t, s, 40)
	checkSeq(t, rest, 0, 60)
}

func TestRestartRedeliversUnacked(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, smallConfig(t, dir))
	appendRange(t, s, 0, 500, 25)
	_, p200 := readN(t, s, 200)
	if err := s.Ack(p200); err != nil {
		t.Fatal(err)
	}
	readN(t, s, 100) // read, not acknowledged
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, smallConfig(t, dir))
	if st := s.Stats(); st.Pending != 300 {
		t.Fatalf("after restart %d pending, want 300", st.Pending)
	}
	got, p := readN(t, s, 300)
	checkSeq(t, got, 0, 200)
	if p.Seq != 500 {
		t.Fatalf("end position seq %d, want 500", p.Seq)
	}
	// Appends continue the stream.
	mustAppend(t, s, recs(0, 500, 5))
	more, p2 := readN(t, s, 5)
	checkSeq(t, more, 0, 500)
	if p2.Seq != 505 || p2.Offset <= p.Offset {
		t.Fatalf("position after restart %+v does not continue %+v", p2, p)
	}
	if err := s.Ack(p2); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Everything acknowledged: nothing comes back, positions keep growing.
	s = mustOpen(t, smallConfig(t, dir))
	if st := s.Stats(); st.Pending != 0 {
		t.Fatalf("after acknowledging everything %d pending", st.Pending)
	}
	mustAppend(t, s, recs(1, 0, 1))
	_, p3 := readN(t, s, 1)
	if p3.Seq != 506 {
		t.Fatalf("seq after second restart %d, want 506", p3.Seq)
	}
}

func TestClose(t *testing.T) {
	s := mustOpen(t, smallConfig(t, t.TempDir()))
	errc := make(chan error, 1)
	go func() {
		_, _, err := s.Read(context.Background(), 0, 0)
		errc <- err
	}()
	// The reader either is waiting or has not started; both must end
	// in ErrClosed.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("Read during Close = %v, want ErrClosed", err)
	}
	if err := s.Append(context.Background(), recs(0, 0, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
	if err := s.Ack(Pos{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ack after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestReadHonoursContext(t *testing.T) {
	s := mustOpen(t, smallConfig(t, t.TempDir()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Read(ctx, 0, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read(cancelled) = %v", err)
	}
	// A waiting Read is woken by Append.
	done := make(chan []Record)
	go func() {
		rs, _, err := s.Read(context.Background(), 0, 0)
		if err != nil {
			t.Error(err)
		}
		done <- copyRecs(rs)
	}()
	mustAppend(t, s, recs(3, 0, 2))
	checkSeq(t, <-done, 3, 0)
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	mustOpen(t, smallConfig(t, dir))
	if s, err := Open(smallConfig(t, dir)); !errors.Is(err, ErrLocked) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

func TestTooLarge(t *testing.T) {
	s := mustOpen(t, smallConfig(t, t.TempDir()))
	big := Record{Value: make([]byte, 4096)}
	if err := s.Append(context.Background(), []Record{rec(0, 0), big}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Append(record > segment) = %v, want ErrTooLarge", err)
	}
	// The largest record that fits goes through, and so does an empty
	// key and value.
	max := Record{Key: []byte("k"), Value: make([]byte, 4096-segHeaderSize-frameHeaderSize-1)}
	mustAppend(t, s, []Record{max})
	mustAppend(t, s, []Record{{}})
	rs, _ := readN(t, s, 2)
	if len(rs[0].Value) != len(max.Value) || string(rs[0].Key) != "k" || len(rs[1].Key)+len(rs[1].Value) != 0 {
		t.Fatalf("read back %d/%d bytes", len(rs[0].Key), len(rs[0].Value))
	}
	if st := s.Stats(); st.AppendedTotal != 2 {
		t.Fatalf("appended %d, want 2 (a refused call must write nothing)", st.AppendedTotal)
	}
}

// TestLargeBatch appends calls larger than a segment from two goroutines:
// each is written in chunks across segments, and the records of one call
// stay contiguous.
func TestLargeBatch(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, smallConfig(t, dir))
	const per = 500 // about 25 segments of 4 KiB per call
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			for k := range 2 {
				if err := s.Append(context.Background(), recs(p, k*per, per)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	got, _ := readN(t, s, 4*per)
	for c := range 4 {
		call := got[c*per : (c+1)*per]
		p, i, _ := parseRec(call[0])
		checkSeq(t, call, p, i)
	}
	if n := len(segmentFiles(t, dir)); n < 40 {
		t.Fatalf("%d segments for 4 calls of ~100 KiB with 4 KiB segments", n)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{Dir: "x"}, true},
		{"no dir", Config{}, false},
		{"tiny segment", Config{Dir: "x", SegmentBytes: 100}, false},
		{"huge segment", Config{Dir: "x", SegmentBytes: 2 << 30, MaxBytes: 8 << 30}, false},
		{"max below two segments", Config{Dir: "x", SegmentBytes: 1 << 20, MaxBytes: 1<<21 - 1}, false},
		{"max two segments", Config{Dir: "x", SegmentBytes: 1 << 20, MaxBytes: 1 << 21}, true},
		{"bad policy", Config{Dir: "x", Policy: 7}, false},
		{"no sync", Config{Dir: "x", SyncInterval: NoSync}, true},
		{"negative checkpoint", Config{Dir: "x", CheckpointInterval: -1}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
