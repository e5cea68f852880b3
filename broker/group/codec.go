package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// On-disk format of a FileStore log:
//
//	file   = magic frame*
//	magic  = "SIMTELG1"
//	frame  = length:uint32le crc:uint32le payload[length]
//
// crc is CRC-32C (Castagnoli) of payload. A payload is a record: one kind
// byte followed by fields in the order written by appendRecord, with
// strings and byte slices as uvarint length + bytes and integers as zigzag
// varints. Binary rather than JSON because commits are the hot path and
// the decoder is small enough to make robust against garbage (see
// FuzzFileStoreRecovery).

const (
	fileMagic = "SIMTELG1"
	// frameHeaderLen is the length + CRC prefix of every frame.
	frameHeaderLen = 8
	// maxRecordLen bounds a single record so that a corrupt length field
	// can never make recovery allocate or wait for gigabytes. Snapshots
	// chunk offsets, so only a pathological group metadata (thousands of
	// members with megabytes of metadata each) could get near it.
	maxRecordLen = 64 << 20
)

const (
	recCommit        byte = 1
	recDeleteOffsets byte = 2
	recDeleteGroup   byte = 3
	recSaveGroup     byte = 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// record is the decoded form of one log record. Which fields are used
// depends on kind.
type record struct {
	kind    byte
	group   string
	offsets []CommittedOffset // recCommit
	tps     []TopicPartition  // recDeleteOffsets
	meta    GroupMeta         // recSaveGroup
}

// appendFrame appends a framed record to dst.
func appendFrame(dst []byte, r *record) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeaderLen)...)
	dst = appendRecord(dst, r)
	payload := dst[start+frameHeaderLen:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, crcTable))
	return dst
}

func appendRecord(dst []byte, r *record) []byte {
	dst = append(dst, r.kind)
	dst = appendString(dst, r.group)
	switch r.kind {
	case recCommit:
		dst = binary.AppendUvarint(dst, uint64(len(r.offsets)))
		for _, o := range r.offsets {
			dst = appendString(dst, o.Topic)
			dst = binary.AppendVarint(dst, int64(o.Partition))
			dst = binary.AppendVarint(dst, o.Offset)
			dst = binary.AppendVarint(dst, int64(o.LeaderEpoch))
			dst = appendString(dst, o.Metadata)
			dst = binary.AppendVarint(dst, o.CommitTimeMillis)
		}
	case recDeleteOffsets:
		dst = binary.AppendUvarint(dst, uint64(len(r.tps)))
		for _, tp := range r.tps {
			dst = appendString(dst, tp.Topic)
			dst = binary.AppendVarint(dst, int64(tp.Partition))
		}
	case recDeleteGroup:
	case recSaveGroup:
		m := &r.meta
		dst = appendString(dst, m.ProtocolType)
		dst = appendString(dst, m.Protocol)
		dst = binary.AppendVarint(dst, int64(m.Generation))
		dst = appendString(dst, m.Leader)
		dst = binary.AppendUvarint(dst, uint64(len(m.Members)))
		for _, mm := range m.Members {
			dst = appendString(dst, mm.MemberID)
			dst = appendString(dst, mm.InstanceID)
			dst = appendString(dst, mm.ClientID)
			dst = appendString(dst, mm.ClientHost)
			dst = binary.AppendVarint(dst, int64(mm.SessionTimeoutMillis))
			dst = binary.AppendVarint(dst, int64(mm.RebalanceTimeoutMillis))
			dst = binary.AppendUvarint(dst, uint64(len(mm.Protocols)))
			for _, p := range mm.Protocols {
				dst = appendString(dst, p.Name)
				dst = appendBytes(dst, p.Metadata)
			}
			dst = appendBytes(dst, mm.Assignment)
		}
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

var errShortRecord = errors.New("record truncated")

// decoder reads fields from a record payload. The first error sticks and
// every later read returns a zero value, so decodeRecord can read a whole
// record and check the error once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail(errShortRecord)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShortRecord)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errShortRecord)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int32() int32 {
	v := d.varint()
	if int64(int32(v)) != v {
		d.fail(fmt.Errorf("value %d overflows int32", v))
		return 0
	}
	return int32(v)
}

// count reads an element count. Every element takes at least one byte, so
// a count above the remaining length is corrupt; checking that here keeps
// a garbage count from allocating a huge slice.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail(fmt.Errorf("count %d exceeds remaining %d bytes", n, len(d.b)))
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.count()
	if n == 0 {
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b)
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.count()
	v := string(d.b[:n])
	d.b = d.b[n:]
	return v
}

// decodeRecord decodes one payload. It never panics, whatever the input;
// the returned record owns all its memory.
func decodeRecord(p []byte) (record, error) {
	d := decoder{b: p}
	var r record
	r.kind = d.byte()
	r.group = d.string()
	switch r.kind {
	case recCommit:
		n := d.count()
		r.offsets = make([]CommittedOffset, 0, n)
		for range n {
			r.offsets = append(r.offsets, CommittedOffset{
				Topic:            d.string(),
				Partition:        d.int32(),
				Offset:           d.varint(),
				LeaderEpoch:      d.int32(),
				Metadata:         d.string(),
				CommitTimeMillis: d.varint(),
			})
		}
	case recDeleteOffsets:
		n := d.count()
		r.tps = make([]TopicPartition, 0, n)
		for range n {
			r.tps = append(r.tps, TopicPartition{Topic: d.string(), Partition: d.int32()})
		}
	case recDeleteGroup:
	case recSaveGroup:
		m := &r.meta
		m.Group = r.group
		m.ProtocolType = d.string()
		m.Protocol = d.string()
		m.Generation = d.int32()
		m.Leader = d.string()
		n := d.count()
		for range n {
			mm := MemberMeta{
				MemberID:               d.string(),
				InstanceID:             d.string(),
				ClientID:               d.string(),
				ClientHost:             d.string(),
				SessionTimeoutMillis:   d.int32(),
				RebalanceTimeoutMillis: d.int32(),
			}
			np := d.count()
			for range np {
				mm.Protocols = append(mm.Protocols, ProtocolMeta{Name: d.string(), Metadata: d.bytes()})
			}
			mm.Assignment = d.bytes()
			if d.err != nil {
				break
			}
			m.Members = append(m.Members, mm)
		}
	default:
		if d.err == nil {
			return record{}, fmt.Errorf("unknown record kind %d", r.kind)
		}
	}
	if d.err != nil {
		return record{}, fmt.Errorf("decode record: %w", d.err)
	}
	if len(d.b) != 0 {
		return record{}, fmt.Errorf("decode record: %d trailing bytes", len(d.b))
	}
	return r, nil
}

// logScan is the result of scanning a log file's bytes.
type logScan struct {
	state *storeState
	// valid is the length of the longest prefix made of the magic and
	// whole, checksummed, decodable frames. Everything after it is a torn
	// or corrupt tail that recovery truncates.
	valid int
	// records counts the frames applied.
	records int
	// needMagic is set when the file is shorter than the magic but a
	// prefix of it: a creation that crashed mid-write. Such a file holds
	// nothing and is rewritten.
	needMagic bool
	// tailErr says why the scan stopped before the end, if it did.
	tailErr error
}

// scanLog replays a log file's bytes. It returns an error only when the
// bytes are not a group log at all (wrong magic); any damage after the
// magic ends the scan at the last good frame instead, because a crash can
// only ever tear the tail of an append-only file and everything before it
// was acknowledged to clients. It never panics.
func scanLog(data []byte) (logScan, error) {
	res := logScan{state: newStoreState()}
	if len(data) < len(fileMagic) {
		if string(data) != fileMagic[:len(data)] {
			return res, errors.New("not a group log: bad magic")
		}
		res.needMagic = true
		return res, nil
	}
	if string(data[:len(fileMagic)]) != fileMagic {
		return res, errors.New("not a group log: bad magic")
	}
	off := len(fileMagic)
	for off < len(data) {
		rest := data[off:]
		if len(rest) < frameHeaderLen {
			res.tailErr = fmt.Errorf("torn frame header at offset %d", off)
			break
		}
		n := binary.LittleEndian.Uint32(rest)
		sum := binary.LittleEndian.Uint32(rest[4:])
		if n > maxRecordLen || uint64(n) > uint64(len(rest)-frameHeaderLen) {
			res.tailErr = fmt.Errorf("frame of %d bytes at offset %d exceeds the file", n, off)
			break
		}
		payload := rest[frameHeaderLen : frameHeaderLen+int(n)]
		if crc32.Checksum(payload, crcTable) != sum {
			res.tailErr = fmt.Errorf("checksum mismatch at offset %d", off)
			break
		}
		r, err := decodeRecord(payload)
		if err != nil {
			res.tailErr = fmt.Errorf("offset %d: %w", off, err)
			break
		}
		res.state.apply(&r)
		res.records++
		off += frameHeaderLen + int(n)
	}
	res.valid = off
	return res, nil
}
