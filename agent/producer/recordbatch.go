package producer

import (
	"encoding/binary"
	"hash/crc32"
	"math"

	"github.com/simtel/simtel/agent/spool"
)

// A Kafka record batch (magic 2) as the shipper sends it: the 61-byte
// header, then the records compressed with zstd as one frame. The
// producer id, epoch and base sequence are stamped just before each send
// (stamp), because a new producer id after a broker lost the old one
// restarts the sequences; the CRC-32C over everything from the attributes
// on is computed then.
const (
	batchHeaderSize = 61

	offLength      = 8  // int32: bytes after this field
	offLeaderEpoch = 12 // int32
	offMagic       = 16 // int8
	offCRC         = 17 // uint32, over offAttributes..end
	offAttributes  = 21 // int16
	offLastDelta   = 23 // int32
	offBaseTime    = 27 // int64, ms
	offMaxTime     = 35 // int64, ms
	offProducerID  = 43 // int64
	offEpoch       = 51 // int16
	offBaseSeq     = 53 // int32
	offCount       = 57 // int32

	codecZstd = 4 // attributes: compression type
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// batchEncoder lays spool records out as Kafka records and compresses
// them. It keeps its buffers and its zstd context between batches; it is
// used by one goroutine at a time.
type batchEncoder struct {
	zstd  *zstdCompressor
	plain []byte // the records before compression
}

// encode appends to dst[:0] a record batch of recs (at least one), not
// yet stamped. Record timestamps are the samples' times in ms; offsets
// count from 0.
func (e *batchEncoder) encode(dst []byte, recs []spool.Record) []byte {
	base := recs[0].Time / 1e6
	maxTime := base
	p := e.plain[:0]
	for i := range recs {
		r := &recs[i]
		ms := r.Time / 1e6
		maxTime = max(maxTime, ms)
		p = appendRecord(p, ms-base, i, r.Key, r.Value)
	}
	e.plain = p

	dst = append(dst[:0], make([]byte, batchHeaderSize)...)
	h := dst[:batchHeaderSize]
	binary.BigEndian.PutUint32(h[offLeaderEpoch:], math.MaxUint32) // -1: the broker fills it in
	h[offMagic] = 2
	binary.BigEndian.PutUint16(h[offAttributes:], codecZstd)
	binary.BigEndian.PutUint32(h[offLastDelta:], uint32(len(recs)-1))
	binary.BigEndian.PutUint64(h[offBaseTime:], uint64(base))
	binary.BigEndian.PutUint64(h[offMaxTime:], uint64(maxTime))
	binary.BigEndian.PutUint32(h[offCount:], uint32(len(recs)))
	out, err := e.zstd.compress(dst, p)
	if err != nil {
		// Never seen; an uncompressed batch is still a valid one.
		out = append(dst, p...)
		binary.BigEndian.PutUint16(out[offAttributes:], 0)
	}
	binary.BigEndian.PutUint32(out[offLength:], uint32(len(out)-offLeaderEpoch))
	return out
}

// appendRecord appends one record: its length, then attributes (0), the
// timestamp and offset deltas, key, value and no headers, the integers as
// zigzag varints.
func appendRecord(p []byte, timeDelta int64, offsetDelta int, key, value []byte) []byte {
	body := 1 + varintLen(timeDelta) + varintLen(int64(offsetDelta)) +
		varintLen(int64(len(key))) + len(key) + varintLen(int64(len(value))) + len(value) + 1
	p = binary.AppendVarint(p, int64(body))
	p = append(p, 0)
	p = binary.AppendVarint(p, timeDelta)
	p = binary.AppendVarint(p, int64(offsetDelta))
	p = binary.AppendVarint(p, int64(len(key)))
	p = append(p, key...)
	p = binary.AppendVarint(p, int64(len(value)))
	p = append(p, value...)
	return append(p, 0)
}

// varintLen is the length of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// stamp sets the batch's producer id, epoch and base sequence and its CRC.
func stamp(batch []byte, producerID int64, epoch int16, seq int32) {
	binary.BigEndian.PutUint64(batch[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(batch[offEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(batch[offBaseSeq:], uint32(seq))
	binary.BigEndian.PutUint32(batch[offCRC:], crc32.Checksum(batch[offAttributes:], crc32c))
}

// nextSequence is seq advanced by n records: sequences wrap from
// math.MaxInt32 to 0, as Kafka's do.
func nextSequence(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}
