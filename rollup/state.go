package rollup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/DataDog/sketches-go/ddsketch"
)

// The state topic holds, per input partition (state partition = input
// partition), the records of each open window, a tombstone for each once
// it is emitted, and the partition's event-time record (metaKey). It is
// compacted, so its size follows the open windows, not the input.
//
// A window's records are a whole one, keyed by stateKey, and deltas,
// keyed by stateKey and their part number (appendPartKey). A checkpoint
// of a window already in the topic writes a delta when it can: the
// window's aggregates and only the values pending since its last record.
// It writes a whole record again, with a tombstone for each delta, when
// the window's sketch changed since, its fields or inRun changed, or it
// has maxParts records. Records are read back in order, so a whole
// record replaces what came before it and a delta adds to it.

// stateVersion is the first byte of every state value but a window's.
// Version 1 has its sketches in logMapping's bins.
const stateVersion = 2

// windowVersion is the first byte of a window's state value. Version 1
// lacked the flags byte: it was written while every sample went to its
// run's aggregate one by one, so its windows decode as inRun. Versions 1
// and 2 have their sketches and pending values in logMapping's bins.
const windowVersion = 4

// deltaVersion is the first byte of a window's delta; deltaVersionLog,
// of one in logMapping's bins.
const (
	deltaVersion    = 5
	deltaVersionLog = 3
)

// maxParts bounds the records of one window: a window with that many
// takes a whole record at its next checkpoint.
const maxParts = 16

// Bits of a window's flags byte.
const windowInRun = 1

// metaKey is the key of a partition's event-time record.
var metaKey = []byte("\x00partition")

// appendStateKey appends the state-topic key of a series' window (its
// whole record's).
func appendStateKey(k []byte, seriesKey string, res int, start int64) []byte {
	k = append(k, seriesKey...)
	k = append(k, 0)
	k = append(k, Resolutions[res].Name...)
	k = append(k, 0)
	return strconv.AppendInt(k, start, 10)
}

// appendPartKey appends the key of record part of a window: its
// stateKey, and for a delta (part > 0) a NUL and the part number.
func appendPartKey(k []byte, seriesKey string, res int, start int64, part int32) []byte {
	k = appendStateKey(k, seriesKey, res, start)
	if part == 0 {
		return k
	}
	k = append(k, 0)
	return strconv.AppendInt(k, int64(part), 10)
}

// parseStateKey splits a window's key (appendPartKey) into the series
// key, resolution, start and part. The series key holds no NUL: line
// protocol forbids control characters outside string values.
func parseStateKey(key []byte) (seriesKey []byte, res int, start int64, part int32, ok bool) {
	parts := bytes.SplitN(key, []byte{0}, 5)
	if len(parts) < 3 || len(parts) > 4 {
		return nil, 0, 0, 0, false
	}
	res = slices.IndexFunc(Resolutions[:], func(r Resolution) bool { return r.Name == string(parts[1]) })
	start, err := strconv.ParseInt(string(parts[2]), 10, 64)
	if res < 0 || err != nil {
		return nil, 0, 0, 0, false
	}
	if len(parts) == 4 {
		n, err := strconv.ParseInt(string(parts[3]), 10, 32)
		if err != nil || n <= 0 {
			return nil, 0, 0, 0, false
		}
		part = int32(n)
	}
	return parts[0], res, start, part, true
}

// appendMeta encodes a partition's event time.
func appendMeta(dst []byte, p *partition) []byte {
	dst = append(dst, stateVersion)
	dst = binary.AppendVarint(dst, p.maxEvent)
	return binary.AppendVarint(dst, p.closed)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendFloat(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}

// appendWindow encodes a window with its series, so a state record alone
// restores both.
func appendWindow(dst []byte, s *series, res int, w *window) []byte {
	var flags byte
	if w.inRun {
		flags |= windowInRun
	}
	dst = append(dst, windowVersion, byte(res), flags)
	if s.stateHead == nil {
		// The series' part, the same in each of its records, is
		// encoded once.
		h := appendString(nil, s.key)
		h = appendString(h, s.measurement)
		h = binary.AppendUvarint(h, uint64(len(s.tags)))
		for k, v := range s.tags {
			h = appendString(h, k)
			h = appendString(h, v)
		}
		s.stateHead = h
	}
	dst = append(dst, s.stateHead...)
	dst = binary.AppendVarint(dst, w.start)
	dst = binary.AppendUvarint(dst, uint64(len(w.fields)))
	for i := range w.fields {
		dst = appendField(dst, &w.fields[i])
	}
	return dst
}

// appendDelta encodes what a window gained since its last record: its
// fields' aggregates, each with the values pending since (field.ckpt).
// Only for a window whose last record has the same fields in the same
// order and no field rebased since.
func appendDelta(dst []byte, w *window) []byte {
	dst = append(dst, deltaVersion)
	dst = binary.AppendUvarint(dst, uint64(len(w.fields)))
	for i := range w.fields {
		f := &w.fields[i]
		dst = appendFieldFrom(dst, f, false, f.pend[f.ckpt:])
	}
	return dst
}

// appendField encodes a field aggregate with its sketch.
func appendField(dst []byte, f *field) []byte {
	return appendFieldFrom(dst, f, true, f.pend)
}

// appendFieldFrom encodes a field aggregate with its sketch if withSketch
// and the pending values pend.
func appendFieldFrom(dst []byte, f *field, withSketch bool, pend []int32) []byte {
	dst = appendString(dst, f.name)
	dst = binary.AppendUvarint(dst, uint64(f.count))
	dst = binary.AppendUvarint(dst, uint64(f.nonfinite))
	dst = appendFloat(dst, f.min)
	dst = appendFloat(dst, f.max)
	dst = appendFloat(dst, f.sum)
	dst = binary.AppendVarint(dst, f.lastT)
	dst = append(dst, byte(f.kind))
	dst = appendFloat(dst, f.lastNum)
	dst = appendString(dst, f.lastStr)
	start := len(dst)
	if f.count > 0 {
		if withSketch && f.binned && !f.sk.IsEmpty() {
			dst = appendSketch(dst, f.sk)
		}
		dst = appendPending(dst, pend)
	}
	return prefixLength(dst, start)
}

// appendSketch appends the encoding of a sketch that is not empty (an
// empty one encodes as nothing). It is a function of its own because the
// sketch's encoding takes a pointer to dst, which moves dst to the heap:
// here only when there is a sketch to encode, not for every field.
func appendSketch(dst []byte, sk *ddsketch.DDSketch) []byte {
	sk.Encode(&dst, true)
	return dst
}

// prefixLength puts the length of dst[start:] before it as appendString
// does, so a value is encoded in place instead of into a buffer of its own.
func prefixLength(dst []byte, start int) []byte {
	var l [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(l[:], uint64(len(dst)-start))
	dst = append(dst, l[:n]...)
	copy(dst[start+n:], dst[start:len(dst)-n])
	copy(dst[start:], l[:n])
	return dst
}

// readField decodes a field aggregate written by appendField.
func (r *stateReader) field(sk *sketches) (*field, error) {
	f := &field{name: sk.intern(r.bytes())}
	f.count, f.nonfinite = int64(r.uvarint()), int64(r.uvarint())
	f.min, f.max, f.sum = r.float(), r.float(), r.float()
	f.lastT = r.varint()
	f.kind = lastKind(r.byte())
	f.lastNum = r.float()
	f.lastStr = string(r.bytes())
	if enc := r.bytes(); r.err == nil && f.count > 0 {
		d, err := sk.decode(enc, r.log)
		if err != nil {
			return nil, fmt.Errorf("%w: sketch of field %q: %v", errState, f.name, err)
		}
		f.sk, f.binned = d, true
	}
	return f, r.err
}

// errState is wrapped by every decoding error of a state record.
var errState = errors.New("malformed rollup state record")

// stateReader reads the fields of a state value in order; the first
// error sticks.
type stateReader struct {
	b   []byte
	err error
	// log: the record's sketches are in logMapping's bins (an older
	// version's record).
	log bool
}

func (r *stateReader) fail() {
	if r.err == nil {
		r.err = errState
	}
	r.b = nil
}

func (r *stateReader) byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *stateReader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *stateReader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint reads a varint with decode (binary.Uvarint or Varint).
func readVarint[T uint64 | int64](r *stateReader, decode func([]byte) (T, int)) T {
	v, n := decode(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) float() float64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

func (r *stateReader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// decodeMeta restores a partition's event time.
func decodeMeta(b []byte, p *partition) error {
	r := stateReader{b: b}
	if v := r.byte(); v != stateVersion && v != 1 {
		return fmt.Errorf("%w: unknown version", errState)
	}
	p.maxEvent, p.closed = r.varint(), r.varint()
	return r.err
}

// decodeWindow restores a window into p (its series created if new).
func decodeWindow(b []byte, p *partition, sk *sketches) (*series, error) {
	r := stateReader{b: b}
	version := r.byte()
	if version != 1 && version != 2 && version != windowVersion {
		return nil, fmt.Errorf("%w: unknown version", errState)
	}
	r.log = version < windowVersion
	res := int(r.byte())
	if res >= levels {
		return nil, fmt.Errorf("%w: resolution %d", errState, res)
	}
	inRun := true
	if version != 1 {
		inRun = r.byte()&windowInRun != 0
	}
	key := string(r.bytes())
	s := p.series[key]
	if s == nil {
		s = &series{key: key, tags: map[string]string{}}
	}
	s.measurement, s.stateHead = string(r.bytes()), nil
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		k := string(r.bytes())
		s.tags[k] = string(r.bytes())
	}
	start := r.varint()
	if r.err != nil {
		return nil, r.err
	}
	ws, w, _ := insertWindow(s.open[res], start, 0)
	s.open[res] = ws
	w.release(sk)
	w.fields, w.inRun = w.fields[:0], inRun
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		f, err := r.field(sk)
		if err != nil {
			return nil, err
		}
		w.fields = append(w.fields, *f)
	}
	if r.err != nil {
		return nil, r.err
	}
	w.parts, w.ckptFields, w.ckptInRun = 1, int32(len(w.fields)), inRun
	p.series[key] = s
	p.nextEnd = min(p.nextEnd, start+int64(Resolutions[res].Length))
	return s, nil
}

// openWindow returns the loaded window of p a state key names, nil if
// there is none.
func openWindow(p *partition, seriesKey []byte, res int, start int64) (*series, int, *window) {
	s := p.series[string(seriesKey)]
	if s == nil {
		return nil, 0, nil
	}
	for n, w := range s.open[res] {
		if w.start == start {
			return s, n, w
		}
	}
	return s, 0, nil
}

// decodeDelta adds a window's delta (appendDelta), record part of it, to
// the window as loaded so far.
func decodeDelta(key, b []byte, p *partition, sk *sketches) error {
	seriesKey, res, start, part, ok := parseStateKey(key)
	if !ok || part == 0 {
		return fmt.Errorf("%w: a delta's key %q", errState, key)
	}
	_, _, w := openWindow(p, seriesKey, res, start)
	if w == nil {
		return fmt.Errorf("%w: delta %d of a window not loaded (%q)", errState, part, key)
	}
	r := stateReader{b: b}
	switch r.byte() {
	case deltaVersion:
	case deltaVersionLog:
		r.log = true
	default:
		return fmt.Errorf("%w: unknown version", errState)
	}
	if n := r.uvarint(); r.err == nil && n != uint64(len(w.fields)) {
		return fmt.Errorf("%w: delta %d of %q has %d fields, the window %d", errState, part, key, n, len(w.fields))
	}
	for i := range w.fields {
		d, err := r.field(sk)
		if err != nil {
			return err
		}
		f := &w.fields[i]
		if d.name != f.name {
			d.release(sk)
			return fmt.Errorf("%w: delta %d of %q has field %q where the window has %q", errState, part, key, d.name, f.name)
		}
		f.count, f.nonfinite, f.min, f.max, f.sum = d.count, d.nonfinite, d.min, d.max, d.sum
		f.lastT, f.kind, f.lastNum, f.lastStr = d.lastT, d.kind, d.lastNum, d.lastStr
		if d.binned && !d.sk.IsEmpty() {
			if f.sk == nil {
				f.sk = sk.get()
			}
			_ = f.sk.MergeWith(d.sk) // one mapping for all sketches
			f.binned = true
		}
		d.release(sk)
	}
	if r.err != nil {
		return r.err
	}
	w.parts = max(w.parts, part+1)
	return nil
}

// dropWindow removes the window a tombstone names from p, if loaded. A
// delta's tombstone leaves the window.
func dropWindow(key []byte, p *partition, sk *sketches) {
	seriesKey, res, start, part, ok := parseStateKey(key)
	if !ok || part > 0 {
		return
	}
	s, n, w := openWindow(p, seriesKey, res, start)
	if w == nil {
		return
	}
	if s.cur == w {
		s.cur = nil
	}
	w.release(sk)
	s.open[res] = append(s.open[res][:n], s.open[res][n+1:]...)
	for res := range levels {
		if len(s.open[res]) > 0 {
			return
		}
	}
	delete(p.series, s.key)
}
