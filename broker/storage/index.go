package storage

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

// offsetEntry is one sparse offset index entry: the batch whose base
// offset is segmentBase+rel starts at byte pos of the segment file.
type offsetEntry struct {
	rel uint32
	pos uint32
}

// timeEntry is one sparse time index entry. ts is the largest batch
// maxTimestamp of every batch *before* the batch at segmentBase+rel, which
// is also an offset index point. Because every earlier batch has
// maxTimestamp <= ts, a search for the first batch with maxTimestamp >=
// target may start at the last entry whose ts < target. Entries are only
// added when ts grows, so the list is strictly increasing in both fields.
type timeEntry struct {
	ts  int64
	rel uint32
}

const (
	offsetEntrySize = 8
	timeEntrySize   = 12
)

// segIndex is the in-memory offset and time index of one segment. It is
// maintained incrementally by Append (O(1) amortised per batch), rebuilt by
// recovery scans and by compaction, and persisted only for closed segments.
type segIndex struct {
	offsets []offsetEntry
	times   []timeEntry
	// sinceEntry counts bytes appended since the last index point.
	sinceEntry int64
	// maxTs is the largest maxTimestamp of all batches indexed so far.
	maxTs int64
}

func newSegIndex() segIndex { return segIndex{maxTs: math.MinInt64} }

// add records a batch of length bytes with the given base offset and max
// timestamp at byte pos. The first batch of a segment is never indexed:
// a lookup that finds no entry starts at position 0.
func (x *segIndex) add(segBase, baseOffset int64, pos int64, length int32, maxTs int64, interval int64) {
	if pos > 0 && x.sinceEntry >= interval {
		rel := uint32(baseOffset - segBase)
		x.offsets = append(x.offsets, offsetEntry{rel: rel, pos: uint32(pos)})
		if n := len(x.times); n == 0 || x.maxTs > x.times[n-1].ts {
			x.times = append(x.times, timeEntry{ts: x.maxTs, rel: rel})
		}
		x.sinceEntry = 0
	}
	x.sinceEntry += int64(length)
	if maxTs > x.maxTs {
		x.maxTs = maxTs
	}
}

// lookup returns the position of the last indexed batch whose base offset
// is <= segBase+rel, or 0. Scanning forward from there finds the batch
// containing the offset.
func (x *segIndex) lookup(rel int64) int64 {
	i := sort.Search(len(x.offsets), func(i int) bool { return int64(x.offsets[i].rel) > rel })
	if i == 0 {
		return 0
	}
	return int64(x.offsets[i-1].pos)
}

// lookupTime returns the position from which to scan for the first batch
// with maxTimestamp >= ts: the index point of the last time entry with a
// smaller timestamp, or 0.
func (x *segIndex) lookupTime(ts int64) int64 {
	i := sort.Search(len(x.times), func(i int) bool { return x.times[i].ts >= ts })
	if i == 0 {
		return 0
	}
	return x.lookup(int64(x.times[i-1].rel))
}

// truncate drops entries pointing at or past byte pos.
func (x *segIndex) truncate(pos int64) {
	n := sort.Search(len(x.offsets), func(i int) bool { return int64(x.offsets[i].pos) >= pos })
	x.offsets = x.offsets[:n]
	var lastRel int64 = -1
	if n > 0 {
		lastRel = int64(x.offsets[n-1].rel)
	}
	m := sort.Search(len(x.times), func(i int) bool { return int64(x.times[i].rel) > lastRel })
	x.times = x.times[:m]
	x.maxTs = math.MinInt64
	if m > 0 {
		x.maxTs = x.times[m-1].ts
	}
	x.sinceEntry = 0
}

// encodeOffsets serialises the offset index: big-endian (rel uint32,
// pos uint32) pairs.
func (x *segIndex) encodeOffsets() []byte {
	b := make([]byte, 0, len(x.offsets)*offsetEntrySize)
	for _, e := range x.offsets {
		b = binary.BigEndian.AppendUint32(b, e.rel)
		b = binary.BigEndian.AppendUint32(b, e.pos)
	}
	return b
}

// encodeTimes serialises the time index: big-endian (ts int64, rel
// uint32) records.
func (x *segIndex) encodeTimes() []byte {
	b := make([]byte, 0, len(x.times)*timeEntrySize)
	for _, e := range x.times {
		b = binary.BigEndian.AppendUint64(b, uint64(e.ts))
		b = binary.BigEndian.AppendUint32(b, e.rel)
	}
	return b
}

// decodeIndexes parses persisted index files and checks their internal
// consistency against a segment file of fileSize bytes: entries strictly
// increasing, positions inside the file, and every time entry sitting on
// an offset index point. It never trusts a count from the file.
func decodeIndexes(offs, times []byte, fileSize int64) (segIndex, error) {
	x := newSegIndex()
	if len(offs)%offsetEntrySize != 0 {
		return x, fmt.Errorf("offset index size %d not a multiple of %d", len(offs), offsetEntrySize)
	}
	if len(times)%timeEntrySize != 0 {
		return x, fmt.Errorf("time index size %d not a multiple of %d", len(times), timeEntrySize)
	}
	// Every indexed batch is at least batchHeaderSize bytes long.
	if int64(len(offs)/offsetEntrySize) > fileSize/batchHeaderSize {
		return x, fmt.Errorf("offset index has %d entries for %d bytes", len(offs)/offsetEntrySize, fileSize)
	}
	if len(times)/timeEntrySize > len(offs)/offsetEntrySize {
		return x, fmt.Errorf("time index has more entries than offset index")
	}
	x.offsets = make([]offsetEntry, 0, len(offs)/offsetEntrySize)
	for i := 0; i < len(offs); i += offsetEntrySize {
		e := offsetEntry{rel: binary.BigEndian.Uint32(offs[i:]), pos: binary.BigEndian.Uint32(offs[i+4:])}
		if int64(e.pos) == 0 || int64(e.pos) >= fileSize {
			return x, fmt.Errorf("offset index position %d outside (0, %d)", e.pos, fileSize)
		}
		if n := len(x.offsets); n > 0 && (e.rel <= x.offsets[n-1].rel || e.pos <= x.offsets[n-1].pos) {
			return x, fmt.Errorf("offset index entry %d not increasing", n)
		}
		x.offsets = append(x.offsets, e)
	}
	x.times = make([]timeEntry, 0, len(times)/timeEntrySize)
	j := 0
	for i := 0; i < len(times); i += timeEntrySize {
		e := timeEntry{ts: int64(binary.BigEndian.Uint64(times[i:])), rel: binary.BigEndian.Uint32(times[i+8:])}
		if n := len(x.times); n > 0 && (e.ts <= x.times[n-1].ts || e.rel <= x.times[n-1].rel) {
			return x, fmt.Errorf("time index entry %d not increasing", n)
		}
		for j < len(x.offsets) && x.offsets[j].rel < e.rel {
			j++
		}
		if j == len(x.offsets) || x.offsets[j].rel != e.rel {
			return x, fmt.Errorf("time index entry for relative offset %d has no offset index point", e.rel)
		}
		x.times = append(x.times, e)
	}
	if len(x.offsets) > 0 && len(x.times) == 0 {
		return x, fmt.Errorf("time index empty for %d offset entries", len(x.offsets))
	}
	if n := len(x.times); n > 0 {
		x.maxTs = x.times[n-1].ts
	}
	return x, nil
}
