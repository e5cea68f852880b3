package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

// A record on disk:
//
//	[0:4]   body length n, little endian
//	[4:8]   CRC-32C of the body
//	[8:8+n] body: kind (1 byte), group id (8), then per kind:
//	   entry:  raft index (8), term (8), log type (1), appended-at unix ns (8),
//	           data length (4), data, extensions length (4), extensions
//	   delete: lo (8), hi (8): entries lo..hi (inclusive) of the group are gone
//	   set:    key length (4), key, value length (4), value (stable store)
//	   drop:   nothing more: the group and everything it stored are gone
//	   move:   as entry: a live entry copied out of an old segment
//
// All integers are little endian.
const (
	headerSize = 8
	// bodyMin is the smallest body (kind and group); a zero-filled tail
	// (length 0, CRC 0, which is the CRC of nothing) is therefore torn.
	bodyMin = 1 + 8
	// maxBody bounds a record so a corrupt length cannot make recovery
	// allocate without limit.
	maxBody = 1 << 30
)

type kind byte

const (
	kindEntry  kind = 1
	kindDelete kind = 2
	kindSet    kind = 3
	kindDrop   kind = 4
	// kindMove is an entry copied forward out of an old segment; same
	// body as kindEntry.
	kindMove kind = 5
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a record that cannot be decoded.
var errCorrupt = errors.New("corrupt wal record")

// record is one decoded record; which fields are set depends on kind.
type record struct {
	kind  kind
	group uint64
	log   raft.Log // kindEntry
	lo    uint64   // kindDelete
	hi    uint64
	key   []byte // kindSet
	val   []byte
}

func entrySize(l *raft.Log) int {
	return headerSize + bodyMin + 8 + 8 + 1 + 8 + 4 + len(l.Data) + 4 + len(l.Extensions)
}

// entryHead is the size of an entry record up to its data: header,
// kind, group, index, term, type, appended-at and data length.
const entryHead = headerSize + bodyMin + 8 + 8 + 1 + 8 + 4

// appendEntryHead appends the first entryHead bytes of l's entry record
// (the CRC still zero; see sealPieces).
func appendEntryHead(b []byte, group uint64, l *raft.Log) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(entrySize(l)-headerSize))
	b = append(b, 0, 0, 0, 0)
	b = append(b, byte(kindEntry))
	b = binary.LittleEndian.AppendUint64(b, group)
	b = binary.LittleEndian.AppendUint64(b, l.Index)
	b = binary.LittleEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(at))
	return binary.LittleEndian.AppendUint32(b, uint32(len(l.Data)))
}

// sealPieces sets the CRC in head of the record made of head, then the
// rest of its body in pieces.
func sealPieces(head []byte, rest ...[]byte) {
	c := crc32.Update(0, castagnoli, head[headerSize:])
	for _, p := range rest {
		c = crc32.Update(c, castagnoli, p)
	}
	binary.LittleEndian.PutUint32(head[4:], c)
}

// appendEntry appends an entry record for l to b (one piece).
func appendEntry(b []byte, group uint64, l *raft.Log) []byte {
	start := len(b)
	b = appendEntryHead(b, group, l)
	b = append(b, l.Data...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l.Extensions)))
	b = append(b, l.Extensions...)
	return seal(b, start)
}

func appendDelete(b []byte, group, lo, hi uint64) []byte {
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b = append(b, byte(kindDelete))
	b = binary.LittleEndian.AppendUint64(b, group)
	b = binary.LittleEndian.AppendUint64(b, lo)
	b = binary.LittleEndian.AppendUint64(b, hi)
	return seal(b, start)
}

func appendSet(b []byte, group uint64, key, val []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b = append(b, byte(kindSet))
	b = binary.LittleEndian.AppendUint64(b, group)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(key)))
	b = append(b, key...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(val)))
	b = append(b, val...)
	return seal(b, start)
}

func appendDrop(b []byte, group uint64) []byte {
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b = append(b, byte(kindDrop))
	b = binary.LittleEndian.AppendUint64(b, group)
	return seal(b, start)
}

// seal fills in the header of the record that starts at b[start:].
func seal(b []byte, start int) []byte {
	body := b[start+headerSize:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
	return b
}

// parseHeader returns the body length of the record header h and checks
// it against the bytes available after the header.
func parseHeader(h []byte, avail int64) (int, error) {
	n := binary.LittleEndian.Uint32(h)
	if n < bodyMin || n > maxBody || int64(n) > avail {
		return 0, fmt.Errorf("%w: body length %d (%d bytes left)", errCorrupt, n, avail)
	}
	return int(n), nil
}

// decode checks a whole record's CRC and decodes it. Data, extensions,
// key and value alias b.
func decode(b []byte) (record, error) {
	var r record
	if len(b) < headerSize+bodyMin {
		return r, fmt.Errorf("%w: %d bytes", errCorrupt, len(b))
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n != len(b)-headerSize {
		return r, fmt.Errorf("%w: body length %d, have %d bytes", errCorrupt, n, len(b)-headerSize)
	}
	body := b[headerSize:]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[4:]); got != want {
		return r, fmt.Errorf("%w: crc %08x, want %08x", errCorrupt, got, want)
	}
	d := decoder{b: body}
	r.kind = kind(d.u8())
	r.group = d.u64()
	switch r.kind {
	case kindEntry, kindMove:
		r.log.Index = d.u64()
		r.log.Term = d.u64()
		r.log.Type = raft.LogType(d.u8())
		if at := int64(d.u64()); at != 0 {
			r.log.AppendedAt = time.Unix(0, at)
		}
		r.log.Data = d.bytes()
		r.log.Extensions = d.bytes()
	case kindDelete:
		r.lo = d.u64()
		r.hi = d.u64()
	case kindSet:
		r.key = d.bytes()
		r.val = d.bytes()
	case kindDrop:
	default:
		return r, fmt.Errorf("%w: unknown kind %d", errCorrupt, r.kind)
	}
	if d.err != nil {
		return r, d.err
	}
	if len(d.b) != 0 {
		return r, fmt.Errorf("%w: %d trailing bytes in a kind %d record", errCorrupt, len(d.b), r.kind)
	}
	return r, nil
}

// decoder reads little-endian fields; the first short read sets err and
// makes every later read return zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) short(n int) bool {
	if d.err == nil && len(d.b) < n {
		d.err = fmt.Errorf("%w: body ends early", errCorrupt)
	}
	return d.err != nil
}

func (d *decoder) u8() byte {
	if d.short(1) {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.short(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes() []byte {
	if d.short(4) {
		return nil
	}
	n := int(binary.LittleEndian.Uint32(d.b))
	d.b = d.b[4:]
	if d.short(n) {
		return nil
	}
	if n == 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
