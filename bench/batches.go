package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Record batch header layout (magic 2), as far as the raw consumer reads it:
//
//	 0 baseOffset           int64
//	 8 batchLength          int32  (bytes after this field)
//	12 partitionLeaderEpoch int32
//	16 magic                int8
//	17 crc                  uint32
//	21 attributes           int16
//	23 lastOffsetDelta      int32
//	27 firstTimestamp       int64
//	35 maxTimestamp         int64
//	43 producerId           int64
//	51 producerEpoch        int16
//	53 baseSequence         int32
//	57 recordCount          int32
//	61 records…
const (
	batchHeaderLen     = 61
	batchLengthEnd     = 12 // baseOffset + batchLength
	offLastOffsetDelta = 23
	offMagic           = 16
	offRecordCount     = 57
)

// ErrBatchTooLarge is returned by WalkBatches when a fetch response holds
// bytes but not one complete batch: the first batch is larger than the
// partition's fetch limit, and the caller must ask for more bytes.
var ErrBatchTooLarge = errors.New("first record batch is larger than the fetched bytes")

// BatchWalk is what WalkBatches found in a run of record batches.
type BatchWalk struct {
	Batches    int   // complete batches
	Records    int64 // sum of their record counts
	Bytes      int64 // bytes of the complete batches (a trailing partial batch is not counted)
	NextOffset int64 // offset after the last complete batch, or -1 if there was none
}

// WalkBatches reads the headers of the record batches in b, as a Fetch
// response carries them, without decoding or checking records. A broker may
// cut the last batch short to honour the fetch size limit; that partial
// batch is skipped, as a Kafka consumer does. Only magic 2 batches are
// accepted, since record counts and offsets come from the v2 header.
func WalkBatches(b []byte) (BatchWalk, error) {
	w := BatchWalk{NextOffset: -1}
	for len(b) >= batchLengthEnd {
		length := int32(binary.BigEndian.Uint32(b[8:]))
		if length < batchHeaderLen-batchLengthEnd {
			return w, fmt.Errorf("record batch at byte %d has length %d, shorter than a batch header", w.Bytes, length)
		}
		size := int64(batchLengthEnd) + int64(length)
		if int64(len(b)) < size {
			break // partial trailing batch
		}
		if magic := int8(b[offMagic]); magic != 2 {
			return w, fmt.Errorf("record batch at byte %d has magic %d, want 2", w.Bytes, magic)
		}
		base := int64(binary.BigEndian.Uint64(b))
		delta := int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:]))
		count := int32(binary.BigEndian.Uint32(b[offRecordCount:]))
		if delta < 0 || count < 0 {
			return w, fmt.Errorf("record batch at offset %d has lastOffsetDelta %d and %d records", base, delta, count)
		}
		w.Batches++
		w.Records += int64(count)
		w.Bytes += size
		w.NextOffset = base + int64(delta) + 1
		b = b[size:]
	}
	if w.Batches == 0 && len(b) > 0 {
		return w, ErrBatchTooLarge
	}
	return w, nil
}
