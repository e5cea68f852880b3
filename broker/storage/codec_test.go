package storage

import (
	"bytes"
	"errors"
	"testing"
)

func TestCodecRoundTripAndLimit(t *testing.T) {
	plain := bytes.Repeat([]byte("kafka record bytes "), 5000)
	var c codecs
	defer c.close()
	for codec := CompressionNone; codec <= CompressionZstd; codec++ {
		enc, err := c.compress(codec, []byte("hdr"), plain)
		if err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		if string(enc[:3]) != "hdr" {
			t.Fatalf("codec %d dropped the prefix", codec)
		}
		// Decodable by the reference libraries...
		if got := decompressForTest(t, codec, enc[3:]); !bytes.Equal(got, plain) {
			t.Fatalf("codec %d: reference decode differs", codec)
		}
		// ...and by ours.
		got, err := c.decompress(codec, enc[3:], len(plain))
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("codec %d: decode: %v", codec, err)
		}
		if codec == CompressionNone {
			continue
		}
		if _, err := c.decompress(codec, enc[3:], len(plain)-1); err == nil {
			t.Fatalf("codec %d: limit not enforced", codec)
		} else if codec != CompressionZstd && !errors.Is(err, errTooLarge) {
			t.Fatalf("codec %d: %v", codec, err)
		}
		if _, err := c.decompress(codec, []byte("definitely not compressed"), 1<<20); err == nil {
			t.Fatalf("codec %d accepted garbage", codec)
		}
	}
	raw := compressForTest(t, CompressionSnappy, plain, true)
	if got, err := c.decompress(CompressionSnappy, raw, len(plain)); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("bare snappy: %v", err)
	}
}

func TestNextRecordRejectsGarbage(t *testing.T) {
	good := buildBatch(t, batchSpec{recs: []rec{kv("key", "value", 1)}})[batchHeaderSize:]
	if _, n, err := nextRecord(good); err != nil || n != len(good) {
		t.Fatalf("good record: %d %v", n, err)
	}
	for i := range good {
		// Every truncation must be rejected, never panic.
		if _, _, err := nextRecord(good[:i]); err == nil {
			t.Fatalf("truncated record of %d bytes accepted", i)
		}
	}
	for i := range good {
		b := append([]byte(nil), good...)
		b[i] ^= 0xff
		_, _, _ = nextRecord(b)
	}
}
