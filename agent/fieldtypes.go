package agent

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/simtel/simtel/internal/lineproto"
)

// fieldTypes remembers the type of every field the agent has accepted, per
// run (the run tag a sample ends up with) and measurement, so that a line
// giving a field another type is refused as InfluxDB refuses it ("field
// type conflict") instead of reaching the lake, where a column has one type.
// A different run may give the same field another type.
//
// Memory is bounded: a remembered field costs the bytes of its measurement
// and key plus fieldCost, a run runCost plus its name, and the total stays
// within limit. A new field that does not fit makes the agent forget the
// run it checked a line of least recently (all of that run's fields), then
// the next, until it fits; the run of the line itself is never forgotten
// for it, so when that run alone fills the memory its new fields are not
// remembered and their lines are accepted unchecked (counted). Nothing is
// kept across restarts: the sink checks types against the lake's catalog
// in any case.
//
// Checking goroutines keep a typeCache each, so a line whose run,
// measurement and fields (keys and types, in order) match one checked
// before costs no lock and no map lookup.
type fieldTypes struct {
	limit int64
	// gen changes whenever a run is forgotten: a typeCache filled before
	// may vouch for fields no longer remembered, and starts afresh.
	gen atomic.Uint64

	mu struct {
		sync.Mutex
		runs   map[string]*runTypes
		bytes  int64
		fields int
		// key and news are scratch space of the checking call.
		key  []byte
		news []newField
	}

	forgottenRuns atomic.Int64 // runs forgotten to make room
	unremembered  atomic.Int64 // new fields not remembered: their run fills the memory
}

// Estimated bytes of one remembered field beyond its key (map slot, string
// header, allocation rounding), and of a run beyond its name.
const (
	fieldCost = 48
	runCost   = 160
)

// runTypes is what fieldTypes remembers of one run.
type runTypes struct {
	// used is the unix second of the last line of the run checked; set
	// by checking goroutines without the lock (a store at most once a
	// second each), read under it to pick the run to forget.
	used atomic.Int64
	// types maps measurement + "\x00" + field key (both unescaped; line
	// protocol refuses control characters in them) to the field's type.
	// Guarded by fieldTypes.mu.
	types map[string]lineproto.FieldType
	bytes int64 // guarded by fieldTypes.mu
}

type newField struct {
	i          int // index in the line's fields
	keyStart   int // the key in mu.key
	keyEnd     int
	typ        lineproto.FieldType
	duplicated bool // an earlier field of the line has the same key and type
}

func newFieldTypes(limit int64) *fieldTypes {
	ft := &fieldTypes{limit: limit}
	ft.mu.runs = map[string]*runTypes{}
	return ft
}

// check checks the fields of one line of run and measurement meas against
// the remembered types and remembers the new ones. It returns the run's
// entry, whether every field of the line is now remembered, and on a
// conflict the index of the first conflicting field and the type the
// field already has (conflict < 0: none). A conflicting line changes
// nothing. now is the current unix second.
func (ft *fieldTypes) check(run, meas []byte, fields []lineproto.Field, now int64) (rt *runTypes, all bool, conflict int, have lineproto.FieldType) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	rt = ft.mu.runs[string(run)]
	key := ft.mu.key[:0]
	news := ft.mu.news[:0]
	defer func() { ft.mu.key, ft.mu.news = key, news }()
	for i, f := range fields {
		start := len(key)
		key = append(key, meas...)
		key = append(key, 0)
		key = f.AppendKey(key)
		k := key[start:]
		if rt != nil {
			if t, ok := rt.types[string(k)]; ok {
				key = key[:start]
				if t != f.Type {
					return rt, false, i, t
				}
				continue
			}
		}
		// New to the run: it must agree with an earlier field of the
		// line with the same key, which would be remembered first.
		dup := false
		for _, nf := range news {
			if string(key[nf.keyStart:nf.keyEnd]) == string(k) {
				if nf.typ != f.Type {
					return rt, false, i, nf.typ
				}
				dup = true
				break
			}
		}
		news = append(news, newField{i: i, keyStart: start, keyEnd: len(key), typ: f.Type, duplicated: dup})
	}
	if rt != nil {
		rt.used.Store(now)
	}
	if len(news) == 0 {
		return rt, true, -1, 0
	}
	all = true
	if rt == nil {
		cost := int64(runCost + len(run))
		if !ft.makeRoomLocked(cost, nil) {
			ft.unremembered.Add(int64(len(news)))
			return nil, false, -1, 0
		}
		rt = &runTypes{types: map[string]lineproto.FieldType{}, bytes: cost}
		rt.used.Store(now)
		ft.mu.runs[string(run)] = rt
		ft.mu.bytes += cost
	}
	for _, nf := range news {
		if nf.duplicated {
			continue
		}
		k := key[nf.keyStart:nf.keyEnd]
		cost := int64(fieldCost + len(k))
		if !ft.makeRoomLocked(cost, rt) {
			ft.unremembered.Add(1)
			all = false
			continue
		}
		rt.types[string(k)] = nf.typ
		rt.bytes += cost
		ft.mu.bytes += cost
		ft.mu.fields++
	}
	return rt, all, -1, 0
}

// makeRoomLocked forgets the least recently checked runs other than keep
// until cost more bytes fit within the limit, and reports whether they do.
func (ft *fieldTypes) makeRoomLocked(cost int64, keep *runTypes) bool {
	for ft.mu.bytes+cost > ft.limit {
		var oldest *runTypes
		var name string
		for n, rt := range ft.mu.runs {
			if rt != keep && (oldest == nil || rt.used.Load() < oldest.used.Load()) {
				oldest, name = rt, n
			}
		}
		if oldest == nil {
			return false
		}
		delete(ft.mu.runs, name)
		ft.mu.bytes -= oldest.bytes
		ft.mu.fields -= len(oldest.types)
		ft.forgottenRuns.Add(1)
		ft.gen.Add(1)
	}
	return true
}

// stats reports the fields remembered and the bytes they are counted as.
func (ft *fieldTypes) stats() (fields int, bytes int64) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.mu.fields, ft.mu.bytes
}

// typeCache holds the shapes of lines one goroutine has checked: run,
// measurement, and the keys (as sent) and types of the fields in order.
// Every field of a cached shape is remembered in fieldTypes with that type
// (as of generation gen), so a line of the same shape agrees with the
// remembered types. A few shapes cover a body: a job sends few
// measurements, each with the same fields on every line.
type typeCache struct {
	gen    uint64
	shapes [8]lineShape
	next   int // the slot the next miss fills
}

type lineShape struct {
	rt        *runTypes // nil: empty slot
	run, meas []byte
	fields    []byte // per field: its type, its key as sent, a 0 byte
}

// lookup returns the entry of the run of a cached shape the line has.
func (c *typeCache) lookup(run, meas []byte, fields []lineproto.Field) *runTypes {
	for i := range c.shapes {
		sh := &c.shapes[i]
		if sh.rt != nil && string(sh.meas) == string(meas) && string(sh.run) == string(run) && sh.matches(fields) {
			return sh.rt
		}
	}
	return nil
}

func (sh *lineShape) matches(fields []lineproto.Field) bool {
	p := sh.fields
	for _, f := range fields {
		n := len(f.Key)
		if len(p) < n+2 || p[0] != byte(f.Type) || p[n+1] != 0 || string(p[1:n+1]) != string(f.Key) {
			return false
		}
		p = p[n+2:]
	}
	return len(p) == 0
}

// add caches the shape of a line whose fields are all remembered for rt.
func (c *typeCache) add(rt *runTypes, run, meas []byte, fields []lineproto.Field) {
	sh := &c.shapes[c.next]
	c.next = (c.next + 1) % len(c.shapes)
	sh.rt = rt
	sh.run = append(sh.run[:0], run...)
	sh.meas = append(sh.meas[:0], meas...)
	sh.fields = sh.fields[:0]
	for _, f := range fields {
		sh.fields = append(sh.fields, byte(f.Type))
		sh.fields = append(sh.fields, f.Key...)
		sh.fields = append(sh.fields, 0)
	}
}

func (c *typeCache) clear() {
	for i := range c.shapes {
		c.shapes[i].rt = nil
	}
}

// typeConflict is a line refused because a field has another type than
// the one remembered for its run and measurement.
type typeConflict struct {
	line        int // 1-based line number in the body
	measurement string
	field       string
	got, have   lineproto.FieldType
}

// Error words the conflict as InfluxDB does, so that clients which look
// for "field type conflict" recognise it.
func (c *typeConflict) Error() string {
	return fmt.Sprintf("field type conflict: input field \"%s\" on measurement \"%s\" is type %s, already exists as type %s",
		c.field, c.measurement, c.got, c.have)
}
