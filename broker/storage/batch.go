package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Sentinel errors. Callers map them to Kafka error codes with errors.Is.
var (
	// ErrOffsetOutOfRange is returned by Read for an offset below the log
	// start offset or above the log end offset (OFFSET_OUT_OF_RANGE).
	ErrOffsetOutOfRange = errors.New("offset out of range")
	// ErrCorruptBatch marks a record batch that fails structural or CRC
	// validation (CORRUPT_MESSAGE).
	ErrCorruptBatch = errors.New("corrupt record batch")
	// ErrUnsupportedMagic marks a batch in the pre-v2 message formats,
	// which this broker never stores (UNSUPPORTED_FOR_MESSAGE_FORMAT).
	ErrUnsupportedMagic = errors.New("unsupported record batch magic")
	// ErrBatchTooLarge marks a single batch larger than the configured
	// maximum (MESSAGE_TOO_LARGE).
	ErrBatchTooLarge = errors.New("record batch too large")
	// ErrClosed is returned by every operation on a closed log.
	ErrClosed = errors.New("log closed")
)

// Batch layout constants (Kafka record batch, magic 2). All integers are
// big endian.
const (
	// batchHeaderSize is the fixed part of a batch before the records.
	batchHeaderSize = 61
	// batchPrefixSize is baseOffset + batchLength; batchLength counts the
	// bytes after it, so a batch occupies batchPrefixSize+batchLength bytes.
	batchPrefixSize = 12
	// minBatchLength is the smallest legal batchLength field value.
	minBatchLength = batchHeaderSize - batchPrefixSize
	// crcStart is the first byte covered by the CRC; everything before it
	// (baseOffset, batchLength, partitionLeaderEpoch, magic, crc) is not,
	// which is what lets the broker rewrite baseOffset and the leader epoch
	// without recomputing the checksum.
	crcStart = 21
	// minRecordSize is the smallest possible encoded record: one byte each
	// for length, attributes, timestampDelta, offsetDelta, keyLength,
	// valueLength and header count. It bounds numRecords of an uncompressed
	// batch by its size, so a lying count cannot make later stages allocate.
	minRecordSize = 7

	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offNumRecords      = 57

	attrCompressionMask = 0x07
	attrTimestampType   = 0x08
	attrTransactional   = 0x10
	attrControl         = 0x20

	// Compression codecs as stored in the low attribute bits.
	CompressionNone   int8 = 0
	CompressionGzip   int8 = 1
	CompressionSnappy int8 = 2
	CompressionLZ4    int8 = 3
	CompressionZstd   int8 = 4
)

// castagnoli is the CRC-32C table used by the v2 batch checksum. It is
// immutable after construction, so sharing it is not mutable global state.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BatchHeader is the decoded fixed header of a v2 record batch.
type BatchHeader struct {
	BaseOffset int64
	// Length is the total size of the batch in bytes, including the
	// 12-byte baseOffset+batchLength prefix (batchLength field + 12).
	Length               int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// LastOffset is the offset of the last record the batch covers. After
// compaction a batch may hold fewer records than it covers offsets, but
// it still claims its whole original range so that offsets are never
// reused and idempotent producer state can be rebuilt from it.
func (h BatchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// IsControl reports whether the batch holds transaction markers.
func (h BatchHeader) IsControl() bool { return h.Attributes&attrControl != 0 }

// IsTransactional reports whether the batch belongs to a transaction.
func (h BatchHeader) IsTransactional() bool { return h.Attributes&attrTransactional != 0 }

// Compression returns the codec id (CompressionNone..CompressionZstd).
func (h BatchHeader) Compression() int8 { return int8(h.Attributes & attrCompressionMask) }

// ParseBatchHeader decodes the fixed 61-byte header at the start of b. It
// checks only that b is long enough and that the length field is in the
// representable range; ParseBatches does the full validation.
func ParseBatchHeader(b []byte) (BatchHeader, error) {
	if len(b) < batchHeaderSize {
		return BatchHeader{}, fmt.Errorf("batch header needs %d bytes, have %d: %w", batchHeaderSize, len(b), ErrCorruptBatch)
	}
	bl := int32(binary.BigEndian.Uint32(b[offBatchLength:]))
	if bl < minBatchLength || bl > math.MaxInt32-batchPrefixSize {
		return BatchHeader{}, fmt.Errorf("batch length %d out of range: %w", bl, ErrCorruptBatch)
	}
	return decodeHeader(b, bl), nil
}

// decodeHeader decodes a header whose length field was already checked.
func decodeHeader(b []byte, batchLength int32) BatchHeader {
	_ = b[batchHeaderSize-1]
	return BatchHeader{
		BaseOffset:           int64(binary.BigEndian.Uint64(b[offBaseOffset:])),
		Length:               batchLength + batchPrefixSize,
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[offLeaderEpoch:])),
		Magic:                int8(b[offMagic]),
		CRC:                  binary.BigEndian.Uint32(b[offCRC:]),
		Attributes:           int16(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:])),
		FirstTimestamp:       int64(binary.BigEndian.Uint64(b[offFirstTimestamp:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		NumRecords:           int32(binary.BigEndian.Uint32(b[offNumRecords:])),
	}
}

// ParseBatches splits the records bytes of a produce request into batches
// and validates each one: magic 2, a sane length that fits in b, the
// CRC-32C over bytes [21:], a known codec, and a record count consistent
// with lastOffsetDelta (numRecords == lastOffsetDelta+1 when non-empty).
// A batch longer than maxBatchBytes (when > 0) fails with ErrBatchTooLarge.
//
// It never allocates in proportion to lengths claimed by the input, only
// one BatchHeader per batch actually present, so garbage is cheap to reject.
func ParseBatches(b []byte, maxBatchBytes int) ([]BatchHeader, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("no record batches: %w", ErrCorruptBatch)
	}
	// Producers almost always send a single batch per partition.
	hs := make([]BatchHeader, 0, 1)
	for pos := 0; pos < len(b); {
		h, err := validateBatch(b[pos:], maxBatchBytes, true)
		if err != nil {
			return nil, fmt.Errorf("batch %d at byte %d: %w", len(hs), pos, err)
		}
		hs = append(hs, h)
		pos += int(h.Length)
	}
	return hs, nil
}

// validateBatch validates the batch at the start of b (which may extend
// past the batch). strict requires numRecords == lastOffsetDelta+1 for a
// non-empty batch, as a producer must send; stored batches rewritten by
// compaction only satisfy numRecords <= lastOffsetDelta+1.
func validateBatch(b []byte, maxBatchBytes int, strict bool) (BatchHeader, error) {
	if len(b) < batchPrefixSize {
		return BatchHeader{}, fmt.Errorf("truncated batch prefix (%d bytes): %w", len(b), ErrCorruptBatch)
	}
	bl := int32(binary.BigEndian.Uint32(b[offBatchLength:]))
	if bl < minBatchLength || bl > math.MaxInt32-batchPrefixSize {
		return BatchHeader{}, fmt.Errorf("batch length %d out of range: %w", bl, ErrCorruptBatch)
	}
	total := int(bl) + batchPrefixSize
	if total > len(b) {
		return BatchHeader{}, fmt.Errorf("batch of %d bytes truncated to %d: %w", total, len(b), ErrCorruptBatch)
	}
	if maxBatchBytes > 0 && total > maxBatchBytes {
		return BatchHeader{}, fmt.Errorf("batch of %d bytes exceeds limit %d: %w", total, maxBatchBytes, ErrBatchTooLarge)
	}
	if m := int8(b[offMagic]); m != 2 {
		return BatchHeader{}, fmt.Errorf("magic %d: %w", m, ErrUnsupportedMagic)
	}
	h := decodeHeader(b, bl)
	if got := crc32.Checksum(b[crcStart:total], castagnoli); got != h.CRC {
		return BatchHeader{}, fmt.Errorf("crc %08x, header says %08x: %w", got, h.CRC, ErrCorruptBatch)
	}
	if err := checkHeaderFields(h, strict); err != nil {
		return BatchHeader{}, err
	}
	return h, nil
}

// checkHeaderFields validates the CRC-protected fields that the rest of
// the package relies on.
func checkHeaderFields(h BatchHeader, strict bool) error {
	if h.Compression() > CompressionZstd {
		return fmt.Errorf("unknown compression codec %d: %w", h.Compression(), ErrCorruptBatch)
	}
	if h.LastOffsetDelta < 0 {
		return fmt.Errorf("negative lastOffsetDelta %d: %w", h.LastOffsetDelta, ErrCorruptBatch)
	}
	if h.NumRecords < 0 {
		return fmt.Errorf("negative record count %d: %w", h.NumRecords, ErrCorruptBatch)
	}
	if int64(h.NumRecords) > int64(h.LastOffsetDelta)+1 {
		return fmt.Errorf("record count %d exceeds offset range %d: %w", h.NumRecords, int64(h.LastOffsetDelta)+1, ErrCorruptBatch)
	}
	if strict && h.NumRecords > 0 && int64(h.NumRecords) != int64(h.LastOffsetDelta)+1 {
		return fmt.Errorf("record count %d does not match lastOffsetDelta %d: %w", h.NumRecords, h.LastOffsetDelta, ErrCorruptBatch)
	}
	if h.Compression() == CompressionNone && int64(h.NumRecords)*minRecordSize > int64(h.Length)-batchHeaderSize {
		return fmt.Errorf("record count %d cannot fit in %d bytes: %w", h.NumRecords, h.Length, ErrCorruptBatch)
	}
	return nil
}

// BatchRecord is one record of a batch AppendBatch writes; a nil Value is
// a null value (a tombstone in a compacted log).
type BatchRecord struct {
	Key, Value []byte
}

// AppendBatch appends to dst one uncompressed magic-2 record batch holding
// recs (offset deltas 0..n-1), stamped with nowMillis, without a producer
// id: the batch the broker's own logs (group offsets, transaction state)
// are written in. The log assigns the base offset and leader epoch.
func AppendBatch(dst []byte, recs []BatchRecord, nowMillis int64) []byte {
	return appendBatch(dst, recs, 0, -1, -1, nowMillis)
}

// appendBatch is AppendBatch with the batch's attributes and producer.
func appendBatch(dst []byte, recs []BatchRecord, attrs int16, producerID int64, epoch int16, nowMillis int64) []byte {
	var body, scratch []byte
	for i, r := range recs {
		rec := kmsg.Record{OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		// Length counts the bytes after the length varint itself:
		// encode once with length 0 (a one-byte varint) to measure.
		scratch = rec.AppendTo(scratch[:0])
		rec.Length = int32(len(scratch) - 1)
		body = rec.AppendTo(body)
	}
	b := kmsg.RecordBatch{
		Length:               int32(batchHeaderSize - batchPrefixSize + len(body)),
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           attrs,
		LastOffsetDelta:      int32(len(recs) - 1),
		FirstTimestamp:       nowMillis,
		MaxTimestamp:         nowMillis,
		ProducerID:           producerID,
		ProducerEpoch:        epoch,
		FirstSequence:        -1,
		NumRecords:           int32(len(recs)),
		Records:              body,
	}
	start := len(dst)
	dst = b.AppendTo(dst)
	// The CRC covers the encoded bytes after it, so it is filled in last.
	binary.BigEndian.PutUint32(dst[start+offCRC:], crc32.Checksum(dst[start+crcStart:], castagnoli))
	return dst
}
