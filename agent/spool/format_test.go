package spool

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, r := range []Record{
		{},
		{Key: []byte("k"), Time: -1},
		{Key: []byte("run/host"), Value: []byte("cpu usage=1 1700000000000000000"), Time: 1700000000000000000},
		{Value: bytes.Repeat([]byte{0}, 1000)},
	} {
		b := appendFrame([]byte("prefix"), &r)
		f := b[len("prefix"):]
		if len(f) != frameSize(len(r.Key), len(r.Value)) || frameLen(f) != len(f) {
			t.Fatalf("frame of %d bytes, frameSize %d, frameLen %d", len(f), frameSize(len(r.Key), len(r.Value)), frameLen(f))
		}
		got, ok := decodeFrame(f, true)
		if !ok || !bytes.Equal(got.Key, r.Key) || !bytes.Equal(got.Value, r.Value) || got.Time != r.Time {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", r, got, ok)
		}
		// Every single-bit flip is caught by the CRC (or the length).
		for i := range f {
			for bit := range 8 {
				c := bytes.Clone(f)
				c[i] ^= 1 << bit
				if fl := frameLen(c); fl == len(c) {
					if _, ok := decodeFrame(c, true); ok {
						t.Fatalf("flip of bit %d in byte %d not detected", bit, i)
					}
				}
			}
		}
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := encodeHeader(segMagic, 12345, 678)
	a, b, ok := decodeHeader(segMagic, h)
	if !ok || a != 12345 || b != 678 {
		t.Fatalf("decodeHeader = %d %d %v", a, b, ok)
	}
	if _, _, ok := decodeHeader(cursorMagic, h); ok {
		t.Fatal("segment header accepted as cursor")
	}
	h[10] ^= 1
	if _, _, ok := decodeHeader(segMagic, h); ok {
		t.Fatal("damaged header accepted")
	}
	if name := segmentName(42); name != "00000000000000000042.seg" {
		t.Fatalf("segmentName(42) = %q", name)
	}
	if base, ok := parseSegmentName("00000000000000000042.seg"); !ok || base != 42 {
		t.Fatalf("parseSegmentName = %d %v", base, ok)
	}
	for _, bad := range []string{"42.seg", "0000000000000000004x.seg", "00000000000000000042.tmp"} {
		if _, ok := parseSegmentName(bad); ok {
			t.Fatalf("parseSegmentName(%q) accepted", bad)
		}
	}
}

// FuzzRecover writes arbitrary bytes as the only segment file (after a
// valid header, if withHeader) and opens the spool. Open must not fail or
// panic, and the records it yields must be exactly the leading run of
// CRC-valid frames of the file: re-encoding them gives a prefix of its
// payload. The spool must then accept and return a new record.
func FuzzRecover(f *testing.F) {
	valid := encodeHeader(segMagic, 0, 0)
	var frames []byte
	for i := range 5 {
		r := rec(0, i)
		frames = appendFrame(frames, &r)
	}
	f.Add(frames, true)
	f.Add(frames[:len(frames)-3], true)
	f.Add(append(bytes.Clone(frames), 0xff, 0, 0, 0), true)
	f.Add(append(bytes.Clone(valid), frames...), false)
	f.Add([]byte{}, true)
	f.Add([]byte{}, false)
	f.Add([]byte("SPS1garbage"), false)
	big := bytes.Clone(frames)
	big[0], big[1], big[2], big[3] = 0xff, 0xff, 0xff, 0x7f
	f.Add(big, true)

	f.Fuzz(func(t *testing.T, data []byte, withHeader bool) {
		dir := t.TempDir()
		content := data
		if withHeader {
			content = append(bytes.Clone(valid), data...)
		}
		if err := os.WriteFile(segmentPath(dir, 0), content, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Open(Config{Dir: dir, SegmentBytes: MinSegmentBytes, MaxBytes: 1 << 20, SyncInterval: NoSync})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer s.Close()

		var payload []byte
		if base, _, ok := decodeHeader(segMagic, content); ok && base == 0 {
			payload = content[segHeaderSize:]
		}
		pending := s.Stats().Pending
		var reencoded []byte
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for n := uint64(0); n < pending; {
			rs, _, err := s.Read(ctx, 0, 64<<10)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			for i := range rs {
				reencoded = appendFrame(reencoded, &rs[i])
			}
			n += uint64(len(rs))
		}
		if !bytes.HasPrefix(payload, reencoded) {
			t.Fatalf("recovered %d records (%d bytes) that are not a prefix of the file's frames", pending, len(reencoded))
		}

		// Still usable: a new record comes back right after.
		r := Record{Key: []byte("k"), Value: []byte("v"), Time: 7}
		if err := s.Append(ctx, []Record{r}); err != nil {
			t.Fatalf("Append after recovery: %v", err)
		}
		rs, _, err := s.Read(ctx, 0, 0)
		if err != nil || len(rs) != 1 || string(rs[0].Value) != "v" {
			t.Fatalf("Read after recovery: %d records, %v", len(rs), err)
		}
	})
}
