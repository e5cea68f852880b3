package storage

import (
	"bytes"
	"errors"
	"testing"
)

func TestStampLogAppendTime(t *testing.T) {
	plain := buildBatch(t, batchSpec{recs: []rec{kv("a", "b", 5), kv("c", "d", 9)}, producerID: 3})
	zstd := buildBatch(t, batchSpec{recs: []rec{kv("e", "f", 1)}, codec: CompressionZstd})
	in := append(append([]byte(nil), plain...), zstd...)
	orig := append([]byte(nil), in...)
	const now = 1_800_000_000_123
	out, err := StampLogAppendTime(in, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, orig) {
		t.Fatal("StampLogAppendTime modified its input")
	}
	// The result passes the same validation (CRC recomputed) ...
	hs, err := ParseBatches(out, 0)
	if err != nil {
		t.Fatalf("stamped batches do not validate: %v", err)
	}
	if len(hs) != 2 {
		t.Fatalf("got %d batches, want 2", len(hs))
	}
	for i, h := range hs {
		if !h.IsLogAppendTime() || h.MaxTimestamp != now {
			t.Errorf("batch %d: log append time %v, max timestamp %d; want true, %d", i, h.IsLogAppendTime(), h.MaxTimestamp, now)
		}
	}
	if hs[0].FirstTimestamp != 5 || hs[0].ProducerID != 3 || hs[1].Compression() != CompressionZstd {
		t.Errorf("other header fields changed: %+v", hs)
	}
	// ... and an independent decoder (kmsg) reads it as LogAppendTime with
	// the records unchanged.
	rb, recs := decodeBatch(t, out[:len(plain)])
	if rb.Attributes&0x08 == 0 || rb.MaxTimestamp != now || len(recs) != 2 || string(recs[1].key) != "c" || string(recs[1].value) != "d" {
		t.Errorf("kmsg reads attributes %x max %d records %+v", rb.Attributes, rb.MaxTimestamp, recs)
	}

	// A corrupt batch is refused, not re-signed.
	bad := append([]byte(nil), plain...)
	bad[len(bad)-1] ^= 1
	if _, err := StampLogAppendTime(bad, 0, now); !errors.Is(err, ErrCorruptBatch) {
		t.Errorf("corrupt batch: got %v, want ErrCorruptBatch", err)
	}
	if _, err := StampLogAppendTime(plain, len(plain)-1, now); !errors.Is(err, ErrBatchTooLarge) {
		t.Errorf("oversized batch: got %v, want ErrBatchTooLarge", err)
	}
}
