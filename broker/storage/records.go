package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// record is one decoded record of a v2 batch. raw is the complete encoded
// record, length prefix included; because offsetDelta and timestampDelta
// are relative to the batch's baseOffset and firstTimestamp, a record can
// be copied verbatim into a rewritten batch that keeps both.
type record struct {
	raw            []byte
	timestampDelta int64
	offsetDelta    int32
	key            []byte // nil for a null key
	value          []byte // nil for a null value
	valueNull      bool   // tombstone
}

var errBadRecord = errors.New("malformed record")

// nextRecord decodes the record at the start of b and returns it with
// its encoded size. Every length is checked against the bytes present.
func nextRecord(b []byte) (record, int, error) {
	length, n := binary.Varint(b)
	if n <= 0 || length < 0 || length > int64(len(b)-n) {
		return record{}, 0, errBadRecord
	}
	total := n + int(length)
	body := b[n:total]
	r := record{raw: b[:total]}
	p := 0
	if len(body) < 1 {
		return record{}, 0, errBadRecord
	}
	p++ // attributes, unused
	v, k := binary.Varint(body[p:])
	if k <= 0 {
		return record{}, 0, errBadRecord
	}
	r.timestampDelta = v
	p += k
	v, k = binary.Varint(body[p:])
	if k <= 0 || v < 0 || v > math.MaxInt32 {
		return record{}, 0, errBadRecord
	}
	r.offsetDelta = int32(v)
	p += k
	key, isNull, k, ok := varBytes(body[p:])
	if !ok {
		return record{}, 0, errBadRecord
	}
	if !isNull {
		r.key = key
	}
	p += k
	val, isNull, k, ok := varBytes(body[p:])
	if !ok {
		return record{}, 0, errBadRecord
	}
	r.valueNull = isNull
	if !isNull {
		r.value = val
	}
	p += k
	hc, k := binary.Varint(body[p:])
	if k <= 0 || hc < 0 || hc > int64(len(body)) {
		return record{}, 0, errBadRecord
	}
	p += k
	for range hc {
		if _, isNull, k, ok = varBytes(body[p:]); !ok || isNull {
			return record{}, 0, errBadRecord
		}
		p += k
		if _, _, k, ok = varBytes(body[p:]); !ok {
			return record{}, 0, errBadRecord
		}
		p += k
	}
	if p != len(body) {
		return record{}, 0, fmt.Errorf("record has %d trailing bytes: %w", len(body)-p, errBadRecord)
	}
	return r, total, nil
}

// varBytes decodes a varint-length-prefixed byte string where -1 is null.
func varBytes(b []byte) (v []byte, isNull bool, n int, ok bool) {
	l, k := binary.Varint(b)
	if k <= 0 || l < -1 {
		return nil, false, 0, false
	}
	if l == -1 {
		return nil, true, k, true
	}
	if l > int64(len(b)-k) {
		return nil, false, 0, false
	}
	return b[k : k+int(l)], false, k + int(l), true
}

// parseRecords decodes all records of a batch's (decompressed) records
// bytes, checking the count against the header.
func parseRecords(h BatchHeader, recs []byte, out []record) ([]record, error) {
	out = out[:0]
	for len(recs) > 0 {
		r, n, err := nextRecord(recs)
		if err != nil {
			return nil, err
		}
		if int64(r.offsetDelta) > int64(h.LastOffsetDelta) {
			return nil, fmt.Errorf("record offset delta %d beyond batch: %w", r.offsetDelta, errBadRecord)
		}
		out = append(out, r)
		recs = recs[n:]
	}
	if len(out) != int(h.NumRecords) {
		return nil, fmt.Errorf("batch claims %d records, holds %d: %w", h.NumRecords, len(out), errBadRecord)
	}
	return out, nil
}
