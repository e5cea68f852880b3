package storage

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/snappy/xerial"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rec is a record to put in a test batch. A nil key is a null key, a nil
// value a tombstone.
type rec struct {
	key, value []byte
	ts         int64
}

type batchSpec struct {
	recs       []rec
	codec      int8
	snappyRaw  bool // bare snappy block instead of xerial framing
	producerID int64
	txn        bool
}

func kv(k, v string, ts int64) rec {
	r := rec{ts: ts}
	if k != "" {
		r.key = []byte(k)
	}
	if v != "" {
		r.value = []byte(v)
	}
	return r
}

// buildBatch encodes a v2 batch with kmsg, compressing with the codec
// libraries directly (not through the package under test).
func buildBatch(t testing.TB, s batchSpec) []byte {
	t.Helper()
	if len(s.recs) == 0 {
		t.Fatal("empty batch spec")
	}
	firstTs, maxTs := s.recs[0].ts, int64(math.MinInt64)
	for _, r := range s.recs {
		firstTs = min(firstTs, r.ts)
		maxTs = max(maxTs, r.ts)
	}
	var raw []byte
	for i, r := range s.recs {
		kr := kmsg.Record{TimestampDelta64: r.ts - firstTs, OffsetDelta: int32(i), Key: r.key, Value: r.value}
		body := kr.AppendTo(nil)[1:] // drop the placeholder zero length
		raw = binary.AppendVarint(raw, int64(len(body)))
		raw = append(raw, body...)
	}
	records := compressForTest(t, s.codec, raw, s.snappyRaw)
	pid := int64(-1)
	if s.producerID != 0 {
		pid = s.producerID
	}
	attrs := int16(s.codec)
	if s.txn {
		attrs |= attrTransactional
	}
	rb := kmsg.RecordBatch{
		FirstOffset:          0,
		Length:               int32(minBatchLength + len(records)),
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           attrs,
		LastOffsetDelta:      int32(len(s.recs) - 1),
		FirstTimestamp:       firstTs,
		MaxTimestamp:         maxTs,
		ProducerID:           pid,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(s.recs)),
		Records:              records,
	}
	if pid >= 0 {
		rb.ProducerEpoch, rb.FirstSequence = 0, 0
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[crcStart:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// streamCompress is raw written through the compressing writer newW makes.
func streamCompress(raw []byte, newW func(io.Writer) io.WriteCloser) []byte {
	var buf bytes.Buffer
	w := newW(&buf)
	w.Write(raw)
	w.Close()
	return buf.Bytes()
}

func compressForTest(t testing.TB, codec int8, raw []byte, snappyRaw bool) []byte {
	t.Helper()
	switch codec {
	case CompressionNone:
		return raw
	case CompressionGzip:
		return streamCompress(raw, func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) })
	case CompressionSnappy:
		if snappyRaw {
			return snappy.Encode(nil, raw)
		}
		return xerial.Encode(nil, raw)
	case CompressionLZ4:
		return streamCompress(raw, func(w io.Writer) io.WriteCloser { return lz4.NewWriter(w) })
	case CompressionZstd:
		e, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		return e.EncodeAll(raw, nil)
	}
	t.Fatalf("codec %d", codec)
	return nil
}

func decompressForTest(t testing.TB, codec int8, b []byte) []byte {
	t.Helper()
	var out []byte
	var err error
	switch codec {
	case CompressionNone:
		return b
	case CompressionGzip:
		var r *gzip.Reader
		if r, err = gzip.NewReader(bytes.NewReader(b)); err == nil {
			out, err = io.ReadAll(r)
		}
	case CompressionSnappy:
		out, err = xerial.Decode(b)
	case CompressionLZ4:
		out, err = io.ReadAll(lz4.NewReader(bytes.NewReader(b)))
	case CompressionZstd:
		var d *zstd.Decoder
		if d, err = zstd.NewReader(nil); err == nil {
			out, err = d.DecodeAll(b, nil)
			d.Close()
		}
	default:
		t.Fatalf("codec %d", codec)
	}
	if err != nil {
		t.Fatalf("decompress codec %d: %v", codec, err)
	}
	return out
}

// gotRecord is a record read back from the log.
type gotRecord struct {
	offset int64
	key    []byte
	value  []byte
	ts     int64
}

// decodeBatch checks a stored batch (CRC, structure) and decodes its
// records with kmsg.
func decodeBatch(t testing.TB, b []byte) (kmsg.RecordBatch, []gotRecord) {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatalf("decode batch: %v", err)
	}
	if got := crc32.Checksum(b[crcStart:], crc32.MakeTable(crc32.Castagnoli)); got != uint32(rb.CRC) {
		t.Fatalf("batch at offset %d: bad crc", rb.FirstOffset)
	}
	raw := decompressForTest(t, int8(rb.Attributes&7), rb.Records)
	var out []gotRecord
	for len(raw) > 0 {
		l, n := binary.Varint(raw)
		if n <= 0 || int(l)+n > len(raw) {
			t.Fatalf("bad record length")
		}
		var r kmsg.Record
		if err := r.ReadFrom(raw[:n+int(l)]); err != nil {
			t.Fatalf("decode record: %v", err)
		}
		out = append(out, gotRecord{offset: rb.FirstOffset + int64(r.OffsetDelta), key: r.Key, value: r.Value, ts: rb.FirstTimestamp + r.TimestampDelta64})
		raw = raw[n+int(l):]
	}
	if len(out) != int(rb.NumRecords) {
		t.Fatalf("batch at %d: %d records, header says %d", rb.FirstOffset, len(out), rb.NumRecords)
	}
	return rb, out
}

// chunkBytes reads the bytes a ReadResult points at.
func chunkBytes(t testing.TB, r *ReadResult) []byte {
	t.Helper()
	var out []byte
	for _, c := range r.Chunks {
		b := make([]byte, c.Size)
		if _, err := c.File.ReadAt(b, c.Pos); err != nil {
			t.Fatalf("read chunk: %v", err)
		}
		out = append(out, b...)
	}
	if int64(len(out)) != r.Bytes {
		t.Fatalf("chunks hold %d bytes, result says %d", len(out), r.Bytes)
	}
	return out
}

// splitStored splits stored bytes into batches, validating each (lenient
// about record counts, as compaction leaves fewer records than offsets).
func splitStored(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		h, err := validateBatch(b, 0, false)
		if err != nil {
			t.Fatalf("stored batch invalid: %v", err)
		}
		out = append(out, b[:h.Length])
		b = b[h.Length:]
	}
	return out
}

// readAll reads every batch from offset from to the end.
func readAll(t testing.TB, l *Log, from int64) [][]byte {
	t.Helper()
	var out [][]byte
	for off := from; off < l.EndOffset(); {
		r, err := l.Read(off, 1<<20, math.MaxInt64)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if len(r.Chunks) == 0 {
			r.Release()
			break
		}
		out = append(out, splitStored(t, chunkBytes(t, r))...)
		off = r.LastOffset + 1
		r.Release()
	}
	return out
}

func readAllRecords(t testing.TB, l *Log) []gotRecord {
	t.Helper()
	var out []gotRecord
	for _, b := range readAll(t, l, l.StartOffset()) {
		_, rs := decodeBatch(t, b)
		out = append(out, rs...)
	}
	return out
}

// appendSpec builds, parses and appends one batch.
func appendSpec(t testing.TB, l *Log, s batchSpec) (int64, int64, []byte) {
	t.Helper()
	b := buildBatch(t, s)
	return appendBytes(t, l, b)
}

// appendBatches appends n batches of records records of size bytes, the
// i-th stamped i (simpleBatch).
func appendBatches(t testing.TB, l *Log, n, records, size int) {
	t.Helper()
	for i := range n {
		appendBytes(t, l, simpleBatch(t, records, size, int64(i)))
	}
}

func appendBytes(t testing.TB, l *Log, b []byte) (int64, int64, []byte) {
	t.Helper()
	hs, err := ParseBatches(b, 0)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	first, last, err := l.Append(b, hs, 7)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return first, last, b
}

// simpleBatch is a batch of n records with values of size bytes and
// timestamps starting at ts.
func simpleBatch(t testing.TB, n, size int, ts int64) []byte {
	recs := make([]rec, n)
	for i := range recs {
		v := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		recs[i] = rec{key: []byte{byte(i)}, value: v, ts: ts + int64(i)}
	}
	return buildBatch(t, batchSpec{recs: recs})
}

// newFakeClock is an injectable clock.
func newFakeClock() *testutil.Clock { return testutil.NewClock(time.UnixMilli(1_700_000_000_000)) }

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// compactNow compacts l once, failing the test on an error.
func compactNow(t testing.TB, l *Log) {
	t.Helper()
	if _, err := l.Compact(); err != nil {
		t.Fatal(err)
	}
}

func openTest(t testing.TB, cfg Config) *Log {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func isOutOfRange(err error) bool { return errors.Is(err, ErrOffsetOutOfRange) }

var _ = os.Remove
