package producer

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/agent/rate"
	"github.com/simtel/simtel/agent/spool"
)

// TestGatherRate checks the rate estimate by which the reader decides
// whether samples gather for a linger: over the last one to two spans,
// so that a fall from a high rate is seen within two spans.
func TestGatherRate(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := rate.NewWindow(t0, time.Second)
	if r := w.PerSecond(t0); r != 0 {
		t.Fatalf("empty window: %g/s, want 0", r)
	}
	// 100k samples a second for three seconds, read every 10 ms.
	for ms := 10; ms <= 3000; ms += 10 {
		w.Add(at(ms), 1000)
	}
	if r := w.PerSecond(at(3000)); math.Abs(r-100_000) > 2_000 {
		t.Fatalf("steady 100k/s: estimated %g/s", r)
	}
	const linger = 1.0 // seconds
	if w.PerSecond(at(3000))*linger < gatherRecords {
		t.Fatalf("at 100k/s with a 1 s linger the shipper would gather")
	}
	// Then 5k a second, one read of 2,500 every 500 ms: within two spans
	// the estimate is low enough to gather.
	ms := 3000
	for range 4 {
		ms += 500
		w.Add(at(ms), 2500)
	}
	if r := w.PerSecond(at(ms)); r >= gatherRecords || r < 1000 {
		t.Fatalf("two seconds after falling to 5k/s: estimated %g/s, want under %d", r, gatherRecords)
	}
}

// TestRecordBatchLayout: an encoded, stamped batch reads back with
// franz-go's own message types: header fields, CRC, and every record's
// key, value, timestamp and offset.
func TestRecordBatchLayout(t *testing.T) {
	base := int64(1_764_000_000_123_000_000)
	var recs []spool.Record
	for i := range 300 {
		recs = append(recs, spool.Record{
			Key:   []byte("run-a/node7"),
			Value: fmt.Appendf(nil, "m,host=node7 v=%di %d", i, base+int64(i%7)*1e6),
			Time:  base + int64(i%7)*1e6,
		})
	}
	recs[5].Time = base - 3e6 // an earlier sample: a negative delta
	enc := batchEncoder{zstd: &zstdCompressor{}}
	buf := enc.encode([]byte("old contents"), recs)
	stamp(buf, 4711, 3, math.MaxInt32-10)

	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(buf); err != nil {
		t.Fatal(err)
	}
	if rb.Magic != 2 || rb.Length != int32(len(buf)-12) || rb.Attributes != 4 || rb.PartitionLeaderEpoch != -1 {
		t.Errorf("header: magic %d, length %d of %d bytes, attributes %d, leader epoch %d", rb.Magic, rb.Length, len(buf), rb.Attributes, rb.PartitionLeaderEpoch)
	}
	if rb.ProducerID != 4711 || rb.ProducerEpoch != 3 || rb.FirstSequence != math.MaxInt32-10 {
		t.Errorf("producer %d epoch %d sequence %d, want 4711, 3, %d", rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence, math.MaxInt32-10)
	}
	if got := crc32.Checksum(buf[21:], crc32.MakeTable(crc32.Castagnoli)); uint32(rb.CRC) != got {
		t.Errorf("CRC %08x, want %08x", uint32(rb.CRC), got)
	}
	if rb.NumRecords != 300 || rb.LastOffsetDelta != 299 || rb.FirstTimestamp != base/1e6 || rb.MaxTimestamp != base/1e6+6 {
		t.Errorf("records %d, last offset delta %d, first time %d, max time %d", rb.NumRecords, rb.LastOffsetDelta, rb.FirstTimestamp, rb.MaxTimestamp)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	plain, err := dec.DecodeAll(rb.Records, nil)
	if err != nil {
		t.Fatalf("records are not one zstd frame: %v", err)
	}
	for i := range recs {
		l, n := binary.Varint(plain)
		if n <= 0 || int(l)+n > len(plain) {
			t.Fatalf("record %d: bad length", i)
		}
		var r kmsg.Record
		if err := r.ReadFrom(plain[:n+int(l)]); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		plain = plain[n+int(l):]
		if string(r.Key) != string(recs[i].Key) || string(r.Value) != string(recs[i].Value) ||
			int(r.OffsetDelta) != i || rb.FirstTimestamp+r.TimestampDelta64 != recs[i].Time/1e6 || len(r.Headers) != 0 {
			t.Fatalf("record %d: key %q value %q offset delta %d time %d", i, r.Key, r.Value, r.OffsetDelta, rb.FirstTimestamp+r.TimestampDelta64)
		}
	}
	if len(plain) != 0 {
		t.Errorf("%d bytes after the last record", len(plain))
	}
}

func TestNextSequenceWraps(t *testing.T) {
	for _, c := range []struct {
		seq  int32
		n    int
		want int32
	}{{0, 5, 5}, {math.MaxInt32 - 2, 3, 0}, {math.MaxInt32 - 2, 10, 7}, {math.MaxInt32, 1, 0}} {
		if got := nextSequence(c.seq, c.n); got != c.want {
			t.Errorf("nextSequence(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
}

// TestRetryBackoffSpread: the back-off grows to 2 s and each wait is drawn
// between half the step and the step, so agents that failed together do
// not retry together.
func TestRetryBackoffSpread(t *testing.T) {
	for failures, step := range map[int]time.Duration{1: 100 * time.Millisecond, 3: 400 * time.Millisecond, 6: 2 * time.Second, 60: 2 * time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := retryBackoff(failures)
			if d < step/2 || d >= step {
				t.Fatalf("after %d failures: waited %v, want [%v, %v)", failures, d, step/2, step)
			}
			seen[d] = true
		}
		if len(seen) < 100 {
			t.Fatalf("after %d failures: only %d distinct waits in 200", failures, len(seen))
		}
	}
}
