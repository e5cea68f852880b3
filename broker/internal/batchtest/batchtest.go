// Package batchtest encodes Kafka record batches the way a client sends
// them (base offset 0, magic 2), for the broker packages' tests.
package batchtest

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode encodes rb with one record per value (offset deltas 0, 1, ...),
// setting its record count, last offset delta, length and CRC; the other
// header fields (magic, producer, timestamps, attributes) come from rb.
func Encode(rb kmsg.RecordBatch, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		// AppendTo writes the length varint first: encode once with
		// length 0 (one byte) to learn the body's size.
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	rb.NumRecords = int32(len(values))
	rb.LastOffsetDelta = int32(len(values) - 1)
	rb.Records = recs
	b := rb.AppendTo(nil)
	// Length = bytes after the length field; CRC over bytes [21:].
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}
