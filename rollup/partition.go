package rollup

import (
	"math"
	"unsafe"

	"github.com/simtel/simtel/internal/lineproto"
)

// series is one measurement and tag set of one input partition, with its
// open windows at each resolution (sorted by start).
type series struct {
	key         string // the canonical line's series key: measurement and sorted tags, escaped
	measurement string
	tags        map[string]string
	open        [levels][]*window
	// lineTags are the tags as output lines have them (lineWriter.tags),
	// once lineTagsSet.
	lineTags    string
	lineTagsSet bool
	// stateHead is the series' part of its windows' state records
	// (appendWindow), once made.
	stateHead []byte
	// agg caches the aggregate of the series' run in its partition, so a
	// sample reaches it without looking up the run, the host and each
	// field by name (summarize.go); aggFields[i] is the run's aggregate of
	// the i-th field of the last line, checked by name before use.
	agg       *runAgg
	aggFields []*field
	// aggGen is agg.gen when the cache was filled; aggMarked is the
	// epoch of agg in which the series last marked its measurement dirty.
	aggGen, aggMarked uint64
	// cur is the 10 s window the series' last sample went to, while open
	// (not closed, not dropped): the next sample mostly goes there too.
	// It is the last field: a series made by newSeries holds its key's
	// bytes right after it, so the lookup that compares them brings cur
	// into the cache.
	cur *window
}

// dirtyRef points at a window changed since the last checkpoint.
type dirtyRef struct {
	s   *series
	res int
	w   *window
}

// closedWindow names a closed window whose records the next checkpoint
// deletes.
type closedWindow struct {
	seriesKey string
	res       int
	start     int64
	parts     int32
}

// partition is the rollup state of one input partition. Event time and
// the watermark are per partition: the agent keys records by run and
// host, so a series lives in one partition, and a partition replaying an
// old run does not make another partition's live samples late.
//
// Only the worker's loop goroutine touches it.
type partition struct {
	id     int32
	series map[string]*series
	// maxEvent is the latest sample time seen (unix ns).
	maxEvent int64
	// closed is the watermark of the last close pass: every window
	// ending at or before it has been emitted, and a sample of such a
	// window is late.
	closed int64
	// nextEnd is the earliest end of an open window: the close pass has
	// nothing to do before the watermark reaches it.
	nextEnd int64
	// lastArrival is when the partition last received a record (wall
	// clock, unix ns), for the idle advance of the watermark.
	lastArrival int64
	metaDirty   bool
	dirty       []dirtyRef
	// tombstones are the state keys of run records gone since the last
	// checkpoint; closedWindows the windows closed since then whose
	// records (parts of them) the state topic holds.
	tombstones    [][]byte
	closedWindows []closedWindow
	// runs holds the aggregate of each run with samples in the partition
	// not yet produced as a partial (summary.go).
	runs map[string]*runAgg
}

func newPartition(id int32, now int64) *partition {
	return &partition{id: id, series: map[string]*series{}, runs: map[string]*runAgg{}, maxEvent: math.MinInt64, closed: math.MinInt64, nextEnd: math.MaxInt64, lastArrival: now}
}

// emitFunc receives each window a close pass closes, in resolution order
// per series.
type emitFunc func(res int, s *series, w *window)

// window returns s's window at resolution res starting at start, adding
// it; it keeps nextEnd and the dirty list up to date.
func (p *partition) window(s *series, res int, start int64) *window {
	return p.windowFor(s, res, start, 0)
}

// windowFor is window, making a missing window with room for n fields.
func (p *partition) windowFor(s *series, res int, start int64, n int) *window {
	ws, w, created := insertWindow(s.open[res], start, n)
	s.open[res] = ws
	if created {
		p.nextEnd = min(p.nextEnd, start+int64(Resolutions[res].Length))
	}
	p.markDirty(s, res, w)
	return w
}

// markDirty lists w, s's window at resolution res, for the next
// checkpoint.
func (p *partition) markDirty(s *series, res int, w *window) {
	if !w.dirty {
		w.dirty = true
		p.dirty = append(p.dirty, dirtyRef{s, res, w})
	}
}

// closeThrough emits every window ending at or before wm: the 10 s
// windows first, each merged into its 1 min window, then the 1 min
// windows, each merged into its 1 h window, then the 1 h windows. A
// series left without open windows is forgotten. It returns how many
// series were forgotten.
func (p *partition) closeThrough(wm int64, sk *sketches, emit emitFunc) (forgotten int) {
	if wm <= p.closed {
		return 0
	}
	p.closed, p.metaDirty = wm, true
	if wm < p.nextEnd {
		return 0
	}
	next := int64(math.MaxInt64)
	for key, s := range p.series {
		empty := true
		for res := range levels {
			length := int64(Resolutions[res].Length)
			ws := s.open[res]
			n := 0
			for n < len(ws) && ws[n].start+length <= wm {
				w := ws[n]
				emit(res, s, w)
				if res+1 < levels {
					parent := p.windowFor(s, res+1, floorTo(w.start, int64(Resolutions[res+1].Length)), len(w.fields))
					parent.merge(w, sk, int(Resolutions[res+1].Length/Resolutions[res].Length))
				}
				if w.parts > 0 {
					p.closedWindows = append(p.closedWindows, closedWindow{s.key, res, w.start, w.parts})
				}
				w.closed = true
				w.release(sk)
				n++
			}
			if n > 0 {
				clear(ws[:n])
				s.open[res] = ws[n:]
			}
			if len(s.open[res]) > 0 {
				empty = false
				next = min(next, s.open[res][0].start+length)
			}
		}
		if empty {
			delete(p.series, key)
			forgotten++
		}
	}
	p.nextEnd = next
	return forgotten
}

// watermark is the event time up to which windows close: the latest
// sample time less the allowed lateness, advanced by the wall-clock time
// the partition has been idle once that exceeds idle (so the last windows
// of a run that stopped sending close too).
func (p *partition) watermark(lateness, idle, now int64) int64 {
	if p.maxEvent == math.MinInt64 {
		return math.MinInt64
	}
	wm := p.maxEvent - lateness
	if quiet := now - p.lastArrival; idle > 0 && quiet >= idle {
		wm += quiet
	}
	return wm
}

// newSeries makes the series of a decoded line whose series key is key.
func newSeries(key []byte, d *lineproto.Decoder) *series {
	s := allocSeries(key)
	s.measurement, s.tags = string(d.Measurement), make(map[string]string, len(d.Tags))
	for _, t := range d.Tags {
		s.tags[string(t.Key)] = string(t.Value)
	}
	return s
}

// allocSeries returns a series whose key is a copy of key, held in the
// series' own allocation right after it when up to 256 bytes: a sample's
// lookup reads the key, then the series.
func allocSeries(key []byte) *series {
	switch n := len(key); {
	case n == 0 || n > 256:
		return &series{key: string(key)}
	case n <= 64:
		return seriesBeside[[64]byte](key)
	case n <= 128:
		return seriesBeside[[128]byte](key)
	default:
		return seriesBeside[[256]byte](key)
	}
}

// seriesBeside allocates a series and a copy of key in one object, the
// key in an array of type K (one of three sizes) right after the series.
func seriesBeside[K [64]byte | [128]byte | [256]byte](key []byte) *series {
	b := new(struct {
		s series
		k K
	})
	copy(unsafe.Slice(&b.k[0], len(key)), key)
	b.s.key = unsafe.String(&b.k[0], len(key))
	return &b.s
}
