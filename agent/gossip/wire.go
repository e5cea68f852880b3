package gossip

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math"
	"slices"
	"time"
)

// Wire format (all integers are unsigned varints unless noted):
//
//	entry    = key:8 bytes big-endian (FNV-1a 64 of the policy name)
//	           version since (unix milliseconds, 0 = unknown)
//	entries  = count entry*
//
//	meta     = 0x01 'i' boot seq entries field*  holdings inline
//	         | 0x01 'x' boot seq field*          holdings only in the record
//	field    = tag:1 byte len bytes              optional, appended later:
//	           'a' = the node's policy relay address (host:port)
//	record   = ('r' | 'd') 0x01 len(node) node boot seq entries
//	           'r' arrived by gossip and is passed on, 'd' was sent
//	           directly to every member and is not
//	state    = 0x01 count (len record)*          push/pull payload
//
// Policy names are never sent: View asks about one name and hashes it, so
// the meta size does not depend on how long the names are. A 64-bit hash
// makes a collision between the few policies of a run vanishingly
// unlikely. Decoders ignore trailing bytes so later versions can append
// fields; they reject a different leading version byte. The meta's fields
// are such an appendix: nodes that predate them stop reading after the
// entries (or the stamp), and a decoder skips tags it does not know and
// drops a truncated field without failing the meta.

const (
	wireVersion  = 0x01
	metaInline   = 'i'
	metaExternal = 'x'
	msgRecord    = 'r'
	msgDirect    = 'd'
	fieldRelay   = 'a'

	// maxRelayAddr bounds the relay address a meta carries (a host:port;
	// a DNS name is at most 253 bytes).
	maxRelayAddr = 260

	// minEntrySize is the smallest encoded entry: the key and two one-byte
	// varints. It bounds the count a decoder believes before allocating.
	minEntrySize = 8 + 1 + 1
)

// errCorrupt is returned by the decoders for input that is not in the
// format above (truncated, unknown version, counts larger than the input).
var errCorrupt = errors.New("corrupt gossip payload")

// entry is one advertised holding, in wire form.
type entry struct {
	key     uint64
	version int64
	sinceMs int64 // unix milliseconds; 0 = unknown
}

// stamp orders the records of one node. boot is the node's start time in
// unix nanoseconds (a restarted node wins over its former self), seq counts
// its changes since then.
type stamp struct {
	boot, seq uint64
}

func (s stamp) newer(than stamp) bool {
	return s.boot > than.boot || (s.boot == than.boot && s.seq > than.seq)
}

// meta is a decoded node meta.
type meta struct {
	stamp    stamp
	external bool
	entries  []entry // when !external
	relay    string  // policy relay address, "" if the node has none
}

// record carries the holdings of a node whose holdings do not fit its meta.
type record struct {
	node    string
	stamp   stamp
	entries []entry
}

func policyKey(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

func toMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixMilli(), 0)
}

func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func find(es []entry, key uint64) (entry, bool) {
	i, ok := slices.BinarySearchFunc(es, key, func(e entry, k uint64) int {
		switch {
		case e.key < k:
			return -1
		case e.key > k:
			return 1
		}
		return 0
	})
	if !ok {
		return entry{}, false
	}
	return es[i], true
}

// sortEntries sorts by key; the decoders rely on sorted input only for
// lookups, so a peer sending unsorted entries is sorted on receipt.
func sortEntries(es []entry) {
	slices.SortFunc(es, func(a, b entry) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
}

func appendEntries(b []byte, es []entry) []byte {
	b = binary.AppendUvarint(b, uint64(len(es)))
	for _, e := range es {
		b = binary.BigEndian.AppendUint64(b, e.key)
		b = binary.AppendUvarint(b, uint64(e.version))
		b = binary.AppendUvarint(b, uint64(e.sinceMs))
	}
	return b
}

func encodeInlineMeta(s stamp, es []entry) []byte {
	b := []byte{wireVersion, metaInline}
	b = binary.AppendUvarint(b, s.boot)
	b = binary.AppendUvarint(b, s.seq)
	return appendEntries(b, es)
}

func encodeExternalMeta(s stamp) []byte {
	b := []byte{wireVersion, metaExternal}
	b = binary.AppendUvarint(b, s.boot)
	return binary.AppendUvarint(b, s.seq)
}

// appendMetaFields appends the optional fields of a meta.
func appendMetaFields(b []byte, relay string) []byte {
	if relay == "" {
		return b
	}
	b = append(b, fieldRelay)
	b = binary.AppendUvarint(b, uint64(len(relay)))
	return append(b, relay...)
}

// metaFields reads the optional fields that follow a meta's entries into
// m. A field cut short ends the reading without an error: the rest of the
// meta is good, and what follows may be a later version's appendix.
func metaFields(r *reader, m *meta) {
	for r.err == nil && len(r.b) > 0 {
		tag := r.byte()
		v := r.bytes(r.uvarint())
		if r.err != nil {
			return
		}
		if tag == fieldRelay && len(v) <= maxRelayAddr {
			m.relay = string(v)
		}
	}
}

func encodeRecord(r record) []byte {
	b := []byte{msgRecord, wireVersion}
	b = binary.AppendUvarint(b, uint64(len(r.node)))
	b = append(b, r.node...)
	b = binary.AppendUvarint(b, r.stamp.boot)
	b = binary.AppendUvarint(b, r.stamp.seq)
	return appendEntries(b, r.entries)
}

func encodeState(records [][]byte) []byte {
	b := []byte{wireVersion}
	b = binary.AppendUvarint(b, uint64(len(records)))
	for _, r := range records {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	return b
}

// reader decodes varints and fixed fields; the first failure sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.err = errCorrupt
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

// int63 reads a uvarint that must fit an int64.
func (r *reader) int63() int64 {
	v := r.uvarint()
	if v > math.MaxInt64 {
		r.err = errCorrupt
		return 0
	}
	return int64(v)
}

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errCorrupt
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) entries() []entry {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)/minEntrySize) {
		r.err = errCorrupt
		return nil
	}
	es := make([]entry, 0, n)
	for range n {
		key := r.bytes(8)
		e := entry{version: r.int63(), sinceMs: r.int63()}
		if r.err != nil {
			return nil
		}
		e.key = binary.BigEndian.Uint64(key)
		es = append(es, e)
	}
	sortEntries(es)
	return es
}

// decodeMeta decodes a node meta. An empty meta (not set, as before the
// first NodeMeta call) is an inline meta without entries and a zero stamp.
func decodeMeta(b []byte) (meta, error) {
	if len(b) == 0 {
		return meta{}, nil
	}
	r := reader{b: b}
	if r.byte() != wireVersion {
		return meta{}, errCorrupt
	}
	var m meta
	kind := r.byte()
	if kind != metaInline && kind != metaExternal {
		return meta{}, errCorrupt
	}
	m.stamp = stamp{boot: r.uvarint(), seq: r.uvarint()}
	if kind == metaInline {
		m.entries = r.entries()
	} else {
		m.external = true
	}
	if r.err != nil {
		return meta{}, r.err
	}
	metaFields(&r, &m)
	return m, nil
}

func decodeRecord(b []byte) (record, error) {
	r := reader{b: b}
	if t := r.byte(); (t != msgRecord && t != msgDirect) || r.byte() != wireVersion {
		return record{}, errCorrupt
	}
	var rec record
	rec.node = string(r.bytes(r.uvarint()))
	rec.stamp = stamp{boot: r.uvarint(), seq: r.uvarint()}
	rec.entries = r.entries()
	if r.err != nil {
		return record{}, r.err
	}
	if rec.node == "" {
		return record{}, errCorrupt
	}
	return rec, nil
}

// decodeState returns the encoded records of a push/pull payload, each
// still to be decoded with decodeRecord.
func decodeState(b []byte) ([][]byte, error) {
	r := reader{b: b}
	if r.byte() != wireVersion {
		return nil, errCorrupt
	}
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		return nil, errCorrupt
	}
	out := make([][]byte, 0, n)
	for range n {
		rec := r.bytes(r.uvarint())
		if r.err != nil {
			return nil, r.err
		}
		out = append(out, rec)
	}
	return out, nil
}
