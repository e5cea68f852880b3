package spool

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// On-disk format. All integers are little-endian.
//
// Segment file "<base %020d>.seg":
//
//	0   [4]  magic "SPS1"
//	4   u32  CRC-32C of bytes 0..4 and 8..24
//	8   u64  base: stream offset of the first record byte
//	16  u64  seq: number of records in the stream before this segment
//	24       frames, back to back
//
// Frame (one record):
//
//	0   u32  n: length of the frame after byte 8 (12 + len(key) + len(value))
//	4   u32  CRC-32C of bytes 0..4 and 8..8+n
//	8   i64  timestamp, unix nanoseconds
//	16  u32  len(key)
//	20       key, then value
//
// Cursor file "cursor" (the persisted ack position), replaced atomically
// by rename from "cursor.tmp":
//
//	0   [4]  magic "SPC1"
//	4   u32  CRC-32C of bytes 0..4 and 8..24
//	8   u64  offset
//	16  u64  seq
const (
	segHeaderSize   = 24
	frameHeaderSize = 20
	framePrefixSize = 8
	cursorSize      = 24

	segMagic    = "SPS1"
	cursorMagic = "SPC1"

	segSuffix  = ".seg"
	cursorName = "cursor"
	tmpSuffix  = ".tmp"
	lockName   = "LOCK"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frameSize is the encoded size of a record with the given key and value
// lengths.
func frameSize(keyLen, valueLen int) int { return frameHeaderSize + keyLen + valueLen }

// appendFrame appends the frame of r to b.
func appendFrame(b []byte, r *Record) []byte {
	n := frameSize(len(r.Key), len(r.Value))
	start := len(b)
	b = slices.Grow(b, n)[:start+n]
	f := b[start:]
	binary.LittleEndian.PutUint32(f[0:], uint32(n-framePrefixSize))
	binary.LittleEndian.PutUint64(f[8:], uint64(r.Time))
	binary.LittleEndian.PutUint32(f[16:], uint32(len(r.Key)))
	copy(f[frameHeaderSize:], r.Key)
	copy(f[frameHeaderSize+len(r.Key):], r.Value)
	binary.LittleEndian.PutUint32(f[4:], checksum(f))
	return b
}

// checksum is the CRC of b[0:4] and b[8:], the layout shared by frames,
// segment headers and the cursor (the CRC itself sits at b[4:8]).
func checksum(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[0:4])
	return crc32.Update(c, castagnoli, b[8:])
}

// frameLen returns the total length of the frame whose 8-byte prefix
// starts p, or 0 if the length field is impossible.
func frameLen(p []byte) int {
	n := binary.LittleEndian.Uint32(p)
	if n < frameHeaderSize-framePrefixSize || uint64(n) > uint64(MaxSegmentBytes) {
		return 0
	}
	return framePrefixSize + int(n)
}

// decodeFrame decodes f, which must be exactly one frame (frameLen bytes).
// The record's Key and Value alias f. It reports false if the key length
// is wrong, or, if check is set, the CRC.
func decodeFrame(f []byte, check bool) (Record, bool) {
	if len(f) < frameHeaderSize || check && binary.LittleEndian.Uint32(f[4:]) != checksum(f) {
		return Record{}, false
	}
	kl := binary.LittleEndian.Uint32(f[16:])
	if uint64(kl) > uint64(len(f)-frameHeaderSize) {
		return Record{}, false
	}
	k := frameHeaderSize + int(kl)
	return Record{
		Key:   f[frameHeaderSize:k:k],
		Value: f[k:len(f):len(f)],
		Time:  int64(binary.LittleEndian.Uint64(f[8:])),
	}, true
}

// encodeHeader encodes a segment header or a cursor: magic, CRC, two u64.
func encodeHeader(magic string, a, b uint64) []byte {
	h := make([]byte, segHeaderSize)
	copy(h, magic)
	binary.LittleEndian.PutUint64(h[8:], a)
	binary.LittleEndian.PutUint64(h[16:], b)
	binary.LittleEndian.PutUint32(h[4:], checksum(h))
	return h
}

// decodeHeader is the inverse of encodeHeader.
func decodeHeader(magic string, h []byte) (a, b uint64, ok bool) {
	if len(h) < segHeaderSize || string(h[:4]) != magic ||
		binary.LittleEndian.Uint32(h[4:]) != checksum(h[:segHeaderSize]) {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(h[8:]), binary.LittleEndian.Uint64(h[16:]), true
}

func segmentName(base uint64) string { return fmt.Sprintf("%020d%s", base, segSuffix) }

func segmentPath(dir string, base uint64) string { return filepath.Join(dir, segmentName(base)) }

// parseSegmentName returns the base offset named by a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	base, err := strconv.ParseUint(s, 10, 64)
	return base, err == nil
}
