package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

func TestParseBatches(t *testing.T) {
	one := buildBatch(t, batchSpec{recs: []rec{kv("a", "b", 5), kv("c", "d", 9)}, producerID: 3})
	two := append(append([]byte(nil), one...), buildBatch(t, batchSpec{recs: []rec{kv("e", "f", 1)}, codec: CompressionZstd})...)
	hs, err := ParseBatches(two, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || int(hs[0].Length) != len(one) || hs[0].NumRecords != 2 || hs[0].LastOffsetDelta != 1 ||
		hs[0].MaxTimestamp != 9 || hs[0].FirstTimestamp != 5 || hs[0].ProducerID != 3 || hs[1].Compression() != CompressionZstd ||
		hs[0].LastOffset() != 1 || hs[0].IsControl() || hs[0].IsTransactional() {
		t.Fatalf("headers %+v", hs)
	}
	resign := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[crcStart:], crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), one...)) }
	cases := []struct {
		name string
		b    []byte
		max  int
		want error
	}{
		{"empty", nil, 0, ErrCorruptBatch},
		{"truncated prefix", one[:10], 0, ErrCorruptBatch},
		{"truncated body", one[:len(one)-1], 0, ErrCorruptBatch},
		{"trailing bytes", append(append([]byte(nil), one...), 1, 2, 3), 0, ErrCorruptBatch},
		{"bad crc", mod(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), 0, ErrCorruptBatch},
		{"magic 1", mod(func(b []byte) []byte { b[offMagic] = 1; return b }), 0, ErrUnsupportedMagic},
		{"too large", one, len(one) - 1, ErrBatchTooLarge},
		{"short length", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[offBatchLength:], 10); return b }), 0, ErrCorruptBatch},
		{"negative length", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[offBatchLength:], 0xffffffff); return b }), 0, ErrCorruptBatch},
		{"count mismatch", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[offNumRecords:], 1); return resign(b) }), 0, ErrCorruptBatch},
		{"negative count", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[offNumRecords:], 0xffffffff); return resign(b) }), 0, ErrCorruptBatch},
		{"huge count", mod(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offNumRecords:], 1<<30)
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 1<<30-1)
			return resign(b)
		}), 0, ErrCorruptBatch},
		{"bad codec", mod(func(b []byte) []byte { b[offAttributes+1] |= 7; return resign(b) }), 0, ErrCorruptBatch},
	}
	for _, c := range cases {
		if _, err := ParseBatches(c.b, c.max); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v want %v", c.name, err, c.want)
		}
	}
	if _, err := ParseBatches(one, len(one)); err != nil {
		t.Errorf("batch at exactly the limit: %v", err)
	}
	if _, err := ParseBatchHeader(one[:60]); !errors.Is(err, ErrCorruptBatch) {
		t.Errorf("short header: %v", err)
	}
}

func TestAppendRejectsMismatchedHeaders(t *testing.T) {
	l := openTest(t, Config{})
	b := simpleBatch(t, 2, 10, 0)
	hs, _ := ParseBatches(b, 0)
	other := simpleBatch(t, 3, 50, 0)
	if _, _, err := l.Append(other, hs, 0); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("append with foreign headers: %v", err)
	}
	if _, _, err := l.Append(b, nil, 0); err == nil {
		t.Fatal("append without headers accepted")
	}
	if l.EndOffset() != 0 {
		t.Fatal("rejected append changed the log")
	}
}

func FuzzParseBatches(f *testing.F) {
	f.Add(buildBatch(f, batchSpec{recs: []rec{kv("a", "b", 1)}}))
	f.Add(buildBatch(f, batchSpec{recs: []rec{kv("a", "b", 1), kv("", "", 2)}, codec: CompressionGzip}))
	two := buildBatch(f, batchSpec{recs: []rec{kv("k", "v", 1)}, codec: CompressionLZ4})
	f.Add(append(two, buildBatch(f, batchSpec{recs: []rec{kv("x", "y", 1)}, codec: CompressionZstd})...))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 80))
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, err := ParseBatches(b, 1<<20)
		if err != nil {
			return
		}
		pos := 0
		for _, h := range hs {
			if h.Magic != 2 || h.Length < batchHeaderSize || pos+int(h.Length) > len(b) {
				t.Fatalf("accepted bad header %+v", h)
			}
			if crc32.Checksum(b[pos+crcStart:pos+int(h.Length)], castagnoli) != h.CRC {
				t.Fatal("accepted bad crc")
			}
			pos += int(h.Length)
		}
		if pos != len(b) {
			t.Fatalf("batches cover %d of %d bytes", pos, len(b))
		}
	})
}

// FuzzRecovery appends arbitrary bytes to a valid segment and reopens it:
// Open must not fail or panic, must keep every valid batch and must only
// expose batches that pass validation.
func FuzzRecovery(f *testing.F) {
	seedDir := f.TempDir()
	cfg := Config{Dir: seedDir, Logger: nil}
	l, err := Open(cfg)
	if err != nil {
		f.Fatal(err)
	}
	var valid []byte
	for i := range 4 {
		b := buildBatch(f, batchSpec{recs: []rec{kv("k", "v", int64(i)), kv("k2", "v2", int64(i))}, codec: int8(i)})
		hs, _ := ParseBatches(b, 0)
		if _, _, err := l.Append(b, hs, 0); err != nil {
			f.Fatal(err)
		}
		valid = append(valid, b...)
	}
	l.Close()
	next := buildBatch(f, batchSpec{recs: []rec{kv("n", "m", 9)}})
	binary.BigEndian.PutUint64(next, 8)
	f.Add([]byte{})
	f.Add(next)
	f.Add(next[:len(next)-3])
	f.Add(append(append([]byte(nil), next...), 0, 0, 0))
	f.Add(valid[:70])
	f.Add(bytes.Repeat([]byte{0}, 100))
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := t.TempDir()
		seg := filepath.Join(dir, segmentName(0, logSuffix))
		if err := os.WriteFile(seg, append(append([]byte(nil), valid...), tail...), 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(Config{Dir: dir})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer l.Close()
		got, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) < len(valid) || !bytes.Equal(got[:len(valid)], valid) {
			t.Fatal("valid prefix lost")
		}
		if l.EndOffset() < 8 || l.Size() != int64(len(got)) {
			t.Fatalf("end %d size %d file %d", l.EndOffset(), l.Size(), len(got))
		}
		next := int64(0)
		for b := got; len(b) > 0; {
			h, err := validateBatch(b, 0, false)
			if err != nil {
				t.Fatalf("recovered log holds an invalid batch: %v", err)
			}
			if h.BaseOffset < next {
				t.Fatalf("offset %d after %d", h.BaseOffset, next)
			}
			next = h.LastOffset() + 1
			b = b[h.Length:]
		}
		if next != l.EndOffset() {
			t.Fatalf("end offset %d, batches end at %d", l.EndOffset(), next)
		}
		// Reads over the recovered log return whole valid batches.
		r, err := l.Read(0, 1<<20, l.EndOffset())
		if err != nil {
			t.Fatal(err)
		}
		if r.Bytes != int64(len(got)) {
			t.Fatalf("read %d of %d bytes", r.Bytes, len(got))
		}
		r.Release()
	})
}

// TestAppendBatch: a batch from AppendBatch passes the log's strict checks
// and its records read back in order, a nil value as a null value.
func TestAppendBatch(t *testing.T) {
	in := []BatchRecord{{Key: []byte("k1"), Value: []byte("v1")}, {Key: []byte("k2")}, {Key: []byte("k3"), Value: []byte{}}}
	b := AppendBatch([]byte("prefix"), in, 1234)[len("prefix"):]
	hs, err := ParseBatches(b, 0)
	if err != nil || len(hs) != 1 {
		t.Fatalf("ParseBatches: %v, %d batches", err, len(hs))
	}
	h := hs[0]
	if h.NumRecords != 3 || h.LastOffsetDelta != 2 || h.FirstTimestamp != 1234 || h.ProducerID != -1 || h.IsControl() || h.IsTransactional() {
		t.Fatalf("header %+v", h)
	}
	recs, err := parseRecords(h, b[batchHeaderSize:], nil)
	if err != nil || len(recs) != len(in) {
		t.Fatalf("parseRecords: %v, %d records", err, len(recs))
	}
	for i, r := range recs {
		want := in[i]
		if int(r.offsetDelta) != i || !bytes.Equal(r.key, want.Key) || !bytes.Equal(r.value, want.Value) || r.valueNull != (want.Value == nil) {
			t.Errorf("record %d: delta %d key %q value %q null %v, want %d %q %q null %v", i, r.offsetDelta, r.key, r.value, r.valueNull, i, want.Key, want.Value, want.Value == nil)
		}
	}
}
