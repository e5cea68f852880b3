package storage

import (
	"encoding/binary"
	"hash/crc32"
)

// StampLogAppendTime returns a copy of the record batches b (as a produce
// request carries them) marked with the broker's append time, as Kafka
// does for a topic with message.timestamp.type=LogAppendTime: each batch's
// timestamp-type attribute bit is set, its MaxTimestamp becomes now (in
// Unix milliseconds), and its CRC is recomputed. Consumers then read now as
// every record's timestamp. The records themselves, compressed or not, are
// untouched, so no batch is decoded or recompressed.
//
// The batches are validated first, like ParseBatches (the same errors): a
// batch that arrived corrupt must be refused, not given a fresh checksum.
// b itself is not modified.
func StampLogAppendTime(b []byte, maxBatchBytes int, now int64) ([]byte, error) {
	if _, err := ParseBatches(b, maxBatchBytes); err != nil {
		return nil, err
	}
	out := make([]byte, len(b))
	copy(out, b)
	for pos := 0; pos < len(out); {
		total := int(binary.BigEndian.Uint32(out[pos+offBatchLength:])) + batchPrefixSize
		batch := out[pos : pos+total]
		attrs := binary.BigEndian.Uint16(batch[offAttributes:])
		binary.BigEndian.PutUint16(batch[offAttributes:], attrs|attrTimestampType)
		binary.BigEndian.PutUint64(batch[offMaxTimestamp:], uint64(now))
		binary.BigEndian.PutUint32(batch[offCRC:], crc32.Checksum(batch[crcStart:], castagnoli))
		pos += total
	}
	return out, nil
}

// IsLogAppendTime reports whether the batch's timestamps are the broker's
// append time (its MaxTimestamp) rather than the producer's create times.
func (h BatchHeader) IsLogAppendTime() bool { return h.Attributes&attrTimestampType != 0 }
