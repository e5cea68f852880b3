package rollup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/DataDog/sketches-go/ddsketch"
)

// The state topic holds, per input partition (state partition = input
// partition), one record per open window, keyed by stateKey and replaced
// at each checkpoint that changed it, a tombstone once it is emitted, and
// the partition's event-time record (metaKey). It is compacted, so its
// size follows the open windows, not the input.

// stateVersion is the first byte of every state value but a window's.
const stateVersion = 1

// windowVersion is the first byte of a window's state value. Version 1
// lacked the flags byte: it was written while every sample went to its
// run's aggregate one by one, so its windows decode as inRun.
const windowVersion = 2

// Bits of a window's flags byte.
const windowInRun = 1

// metaKey is the key of a partition's event-time record.
var metaKey = []byte("\x00partition")

// stateKey is the state-topic key of a series' window.
func stateKey(seriesKey string, res int, start int64) []byte {
	return appendStateKey(make([]byte, 0, len(seriesKey)+28), seriesKey, res, start)
}

func appendStateKey(k []byte, seriesKey string, res int, start int64) []byte {
	k = append(k, seriesKey...)
	k = append(k, 0)
	k = append(k, Resolutions[res].Name...)
	k = append(k, 0)
	return strconv.AppendInt(k, start, 10)
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

// appendField encodes a field aggregate with its sketch.
func appendField(dst []byte, f *field) []byte {
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
		if f.binned && !f.sk.IsEmpty() {
			dst = appendSketch(dst, f.sk)
		}
		dst = appendPending(dst, f.pend)
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
		d, err := sk.decode(enc)
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
	if r.byte() != stateVersion {
		return fmt.Errorf("%w: unknown version", errState)
	}
	p.maxEvent, p.closed = r.varint(), r.varint()
	return r.err
}

// decodeWindow restores a window into p (its series created if new).
func decodeWindow(b []byte, p *partition, sk *sketches) (*series, error) {
	r := stateReader{b: b}
	version := r.byte()
	if version != 1 && version != windowVersion {
		return nil, fmt.Errorf("%w: unknown version", errState)
	}
	res := int(r.byte())
	if res >= levels {
		return nil, fmt.Errorf("%w: resolution %d", errState, res)
	}
	inRun := true
	if version == windowVersion {
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
	w.fields, w.saved, w.inRun = w.fields[:0], true, inRun
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
	p.series[key] = s
	p.nextEnd = min(p.nextEnd, start+int64(Resolutions[res].Length))
	return s, nil
}

// dropWindow removes the window a tombstone names from p, if loaded.
func dropWindow(key []byte, p *partition, sk *sketches) {
	// seriesKey \0 res \0 start: the series key holds no NUL (line
	// protocol forbids control characters outside string values).
	i := bytes.IndexByte(key, 0)
	if i < 0 {
		return
	}
	rest := key[i+1:]
	j := bytes.IndexByte(rest, 0)
	if j < 0 {
		return
	}
	s := p.series[string(key[:i])]
	start, err := strconv.ParseInt(string(rest[j+1:]), 10, 64)
	if s == nil || err != nil {
		return
	}
	for res := range levels {
		if Resolutions[res].Name != string(rest[:j]) {
			continue
		}
		for n, w := range s.open[res] {
			if w.start == start {
				if s.cur == w {
					s.cur = nil
				}
				w.release(sk)
				s.open[res] = append(s.open[res][:n], s.open[res][n+1:]...)
				break
			}
		}
	}
	for res := range levels {
		if len(s.open[res]) > 0 {
			return
		}
	}
	delete(p.series, s.key)
}
