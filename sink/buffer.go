package sink

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/schema"
)

// Record is one Kafka record as the buffer needs it.
type Record struct {
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	Headers   []schema.Header
}

// recordOverhead approximates what a record costs in the broker beyond its
// key and value (varint lengths, deltas, attributes) for FlushBytes.
const recordOverhead = 16

// buffer is what a partition has consumed since its last flush: decoded
// rows per (measurement, run, date), dead letters, or raw records. It is
// owned by one goroutine.
type buffer struct {
	topic     string
	partition int32
	telemetry bool

	first, last int64 // offsets of the buffered range; first < 0 when empty
	records     int64
	bytes       int64     // input bytes (key + value + overhead)
	since       time.Time // when the first buffered record arrived

	arena  arena
	tables []*table
	byKey  map[string]*table
	keyBuf []byte
	dead   []schema.DeadLetterRow
	raw    []schema.RawRow
	runs   map[string]bool // runs with rows in the buffer
	// types gives fields their lake-wide types; nil lets each object's
	// first line decide (encoder tests and benchmarks).
	types fieldTyper

	p       lineproto.Decoder
	dc      dateCache
	mru     [8]*table // tables of recent records, checked before byKey
	pool    blockPool
	mruNext int
	// series maps a series key (the bytes of a line up to the fields:
	// measurement and tags, see lineproto.SeriesEnd) to what decoding it gave, so a
	// line of a known series only has its fields and timestamp decoded,
	// and its tags go to their columns without a lookup.
	series map[string]*series
}

// series is a decoded series key of the buffer: the same bytes always
// decode to the same measurement and tags, which are copies owned here.
type series struct {
	measurement []byte
	run         []byte // the run tag's value, nil without one
	tags        []lineproto.Tag
	bind        binding // to the table of its last line
}

func newSeries(p *lineproto.Decoder) *series {
	s := &series{measurement: bytes.Clone(p.Measurement), tags: make([]lineproto.Tag, len(p.Tags))}
	for i, tg := range p.Tags {
		s.tags[i] = lineproto.Tag{Key: bytes.Clone(tg.Key), Value: bytes.Clone(tg.Value)}
		if string(tg.Key) == "run" {
			s.run = s.tags[i].Value
		}
	}
	return s
}

// maxSeries bounds the series cache of a flush: past it, lines of new
// series are decoded in full every time (a tag with a new value on every
// line would otherwise fill it for nothing).
const maxSeries = 1 << 16

// recent returns the table of a recent record with these keys, or nil.
func (b *buffer) recent(measurement, run []byte, date string) *table {
	for _, t := range b.mru {
		if t != nil && t.date == date && t.measurement == string(measurement) && t.run == string(run) {
			return t
		}
	}
	return nil
}

func newBuffer(topic string, partition int32, telemetry bool) *buffer {
	b := &buffer{topic: topic, partition: partition, telemetry: telemetry}
	b.reset()
	return b
}

func (b *buffer) reset() {
	b.first, b.last, b.records, b.bytes = -1, -1, 0, 0
	b.since = time.Time{}
	b.arena.b = b.arena.b[:0]
	for _, t := range b.tables {
		t.release()
	}
	b.tables = nil
	b.byKey = map[string]*table{}
	b.dead = nil
	b.raw = nil
	b.runs = map[string]bool{}
	b.mru = [8]*table{}
	if b.series == nil {
		b.series = map[string]*series{}
	}
	clear(b.series)
}

func (b *buffer) empty() bool { return b.first < 0 }

// add buffers one record: what cannot be decoded, or conflicts with a
// field type fixed in the lake, becomes a dead letter. It fails only when
// a field's type cannot be learnt (errFieldType; only with types set):
// then the record is not buffered at all and may be added again. now is
// called only for the first record of a flush.
func (b *buffer) add(r *Record, now func() time.Time) error {
	prevFirst, prevLast, prevSince := b.first, b.last, b.since
	if b.first < 0 {
		b.first = r.Offset
		b.since = now()
	}
	b.last = r.Offset
	b.records++
	b.bytes += int64(len(r.Key)+len(r.Value)) + recordOverhead
	if !b.telemetry {
		b.raw = append(b.raw, schema.RawRow{
			Partition: b.partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(),
			Key: clone(r.Key), Value: clone(r.Value), Headers: r.Headers,
		})
		return nil
	}
	line := r.Value
	p := &b.p
	var s *series
	if k := lineproto.SeriesEnd(line); k > 0 {
		s = b.series[string(line[:k])]
		if s != nil {
			// A known series: its key bytes decoded fine before, so only the
			// rest of the line is new.
			if err := p.DecodeFields(line, k); err != nil {
				b.deadLetter(r, "line protocol: "+err.Error())
				return nil
			}
		}
	}
	if s == nil {
		if err := p.Decode(line); err != nil {
			b.deadLetter(r, "line protocol: "+err.Error())
			return nil
		}
		s = newSeries(p)
		if k := p.TagsEnd; len(b.series) < maxSeries && k > 0 && k == lineproto.SeriesEnd(line) {
			b.series[string(line[:k])] = s
		}
	}
	tns := p.Time
	if !p.HasTime {
		tns = r.Timestamp.UnixNano()
	}
	date := b.dc.of(tns)
	t := s.bind.t
	if t == nil || t.date != date {
		t = b.table(s.measurement, s.run, date)
	}
	if reason := t.bindTags(s.tags, &s.bind); reason != "" {
		b.deadLetter(r, reason)
		return nil
	}
	reason, err := t.resolveFields(p, s.tags, b.types, origin{b.topic, b.partition, r.Offset})
	if err != nil {
		// Not buffered after all: it is added again later.
		b.first, b.last, b.since = prevFirst, prevLast, prevSince
		b.records--
		b.bytes -= int64(len(r.Key)+len(r.Value)) + recordOverhead
		return err
	}
	if reason != "" {
		b.deadLetter(r, reason)
		return nil
	}
	t.add(p, s.tags, &s.bind, tns, r.Offset, &b.arena)
	return nil
}

// table returns the table of (measurement, run, date), making it if new.
func (b *buffer) table(measurement, run []byte, date string) *table {
	t := b.recent(measurement, run, date)
	if t != nil {
		return t
	}
	b.keyBuf = append(append(append(append(append(b.keyBuf[:0], measurement...), 0), run...), 0), date...)
	t = b.byKey[string(b.keyBuf)]
	if t == nil {
		t = newTable(string(measurement), string(run), date, &b.pool)
		b.byKey[string(b.keyBuf)] = t
		b.tables = append(b.tables, t)
		b.runs[t.run] = true
	}
	b.mru[b.mruNext%len(b.mru)] = t
	b.mruNext++
	return t
}

func (b *buffer) deadLetter(r *Record, reason string) {
	b.dead = append(b.dead, schema.DeadLetterRow{
		Partition: b.partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(),
		Key: clone(r.Key), Value: clone(r.Value), Reason: reason,
	})
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// encode turns the buffer into the objects of one flush of [first, last],
// in key order. The same buffered records always give the same objects.
func (b *buffer) encode(sc *encodeScratch) ([]encoded, error) {
	var out []encoded
	for _, t := range b.tables {
		if t.rows() == 0 {
			continue // every record of it went to the dead letters
		}
		e, err := encodeTable(t, &b.arena, b.topic, b.partition, b.first, b.last, sc)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	deads, err := encodeByDate(b, b.dead, func(r *schema.DeadLetterRow) time.Time { return r.Timestamp },
		lake.DeadLetterKey, lake.KindDeadLetter, schema.DeadLetterColumns, "dead letters")
	if err != nil {
		return nil, err
	}
	raws, err := encodeByDate(b, b.raw, func(r *schema.RawRow) time.Time { return r.Timestamp },
		lake.RawKey, lake.KindRaw, schema.RawColumns, "raw records")
	if err != nil {
		return nil, err
	}
	out = append(append(out, deads...), raws...)
	slices.SortFunc(out, func(x, y encoded) int { return strings.Compare(x.key, y.key) })
	return out, nil
}
