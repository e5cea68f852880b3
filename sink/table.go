package sink

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/schema"
)

// reservedColumn reports whether name is a fixed column of a telemetry
// object (see lake/schema). A tag or field with such a name sends its
// record to the dead-letter object.
func reservedColumn(name []byte) bool { return schema.Reserved(string(name)) }

// span locates bytes in a partition buffer's arena.
type span struct{ off, n uint32 }

// blockRows is the number of rows of a column block. Columns grow by whole
// blocks, so a large flush never copies a column to grow it, and a
// partition reuses its blocks from flush to flush.
const blockRows = 4096

// block holds blockRows slots of one column: the value (float bits, an
// integer, an unsigned integer, 0/1 for a boolean, the column dictionary
// index for a tag, or a packed arena span off<<32|n for a string) and
// whether it is set.
type block struct {
	vals  [blockRows]uint64
	valid [blockRows]bool
}

// blockPool keeps the blocks of a partition's finished flushes.
type blockPool struct{ free []*block }

func (p *blockPool) get() *block {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	return new(block)
}

func (p *blockPool) put(bs []*block) { p.free = append(p.free, bs...) }

// column is one tag or field column of a table, dense: one slot per row
// (rows 0..n-1), in blocks.
type column struct {
	name   string
	tag    bool
	kind   fieldKind // fields only
	n      int
	blocks []*block
	// A tag column is dictionary-coded by the sink itself: its slots hold
	// the index of the value in dict, whose entries are arena spans, each
	// distinct value once. The encoder hands Parquet these indexes and the
	// dictionary as they are, so no value is hashed per row.
	dict    []uint64
	byVal   map[string]uint32
	last    uint32 // index of the last value set, checked before byVal
	hasLast bool
}

// intern returns the dictionary index of tag value v, adding it (copied
// into the arena) if it is new.
func (c *column) intern(v []byte, a *arena) uint32 {
	if c.hasLast && string(a.get(c.dict[c.last])) == string(v) {
		return c.last
	}
	id, ok := c.byVal[string(v)]
	if !ok {
		if c.byVal == nil {
			c.byVal = map[string]uint32{}
		}
		id = uint32(len(c.dict))
		span := a.put(v)
		c.dict = append(c.dict, span)
		c.byVal[string(a.get(span))] = id
	}
	c.last, c.hasLast = id, true
	return id
}

// get returns row r's value and whether it is set.
func (c *column) get(r int32) (uint64, bool) {
	b := c.blocks[r/blockRows]
	i := r % blockRows
	return b.vals[i], b.valid[i]
}

// push appends a row.
func (c *column) push(pool *blockPool, v uint64, valid bool) {
	i := c.n % blockRows
	if i == 0 {
		c.blocks = append(c.blocks, pool.get())
	}
	b := c.blocks[len(c.blocks)-1]
	b.vals[i], b.valid[i] = v, valid
	c.n++
}

// table buffers the decoded rows of one (measurement, run, UTC date) of one
// partition until the partition is flushed.
type table struct {
	measurement, run, date string
	tns                    []int64 // exact sample time, ns
	offs                   []int64
	cols                   []*column
	pool                   *blockPool
	byName                 map[string]int
	slots, layout          []int // column of each field of the current and the previous line
}

func newTable(measurement, run, date string, pool *blockPool) *table {
	return &table{measurement: measurement, run: run, date: date, pool: pool, byName: map[string]int{}}
}

// release gives the table's blocks back to the pool.
func (t *table) release() {
	for _, c := range t.cols {
		t.pool.put(c.blocks)
		c.blocks = nil
	}
}

func (t *table) rows() int { return len(t.tns) }

// lookup finds the column named name; slot is the position of the token
// among the line's fields, used to guess from the previous
// line of the table, which usually has the same layout.
func (t *table) lookup(slot int, name []byte) int {
	if slot < len(t.layout) {
		if ci := t.layout[slot]; ci >= 0 && t.cols[ci].name == string(name) {
			return ci
		}
	}
	if ci, ok := t.byName[string(name)]; ok {
		return ci
	}
	return -1
}

// binding is where a series' tags go in one table: the column of each tag
// and the dictionary index of its value there. Columns and dictionary
// entries never change or go away while the table lives, so a complete
// binding is valid for every later line of the series.
type binding struct {
	t        *table
	cols     []int    // column of each tag, -1 while the column does not exist
	ids      []uint32 // dictionary index of each tag value, noID while unknown
	complete bool     // every column and index known
}

const noID = ^uint32(0)

// bindTags (re)binds the tags of a series to t and reports why a line with
// these tags cannot join t, or "". Known columns and indexes are kept.
func (t *table) bindTags(tags []lineproto.Tag, b *binding) string {
	if b.t != t {
		b.t = t
		b.cols = b.cols[:0]
		b.ids = b.ids[:0]
		for range tags {
			b.cols = append(b.cols, -1)
			b.ids = append(b.ids, noID)
		}
		b.complete = false
	}
	if b.complete {
		return ""
	}
	for i := range tags {
		tg := &tags[i]
		if reservedColumn(tg.Key) {
			return fmt.Sprintf("tag %q uses a reserved column name", tg.Key)
		}
		if b.cols[i] >= 0 {
			continue
		}
		ci, ok := t.byName[string(tg.Key)]
		if !ok {
			continue
		}
		if !t.cols[ci].tag {
			return fmt.Sprintf("tag %q has the name of a field column", tg.Key)
		}
		b.cols[i] = ci
	}
	return ""
}

// resolveFields finds the columns of the parsed line's fields (into
// t.slots, -1 for a new column) and reports why the line cannot join this
// table, or "". tags are the line's tags. With types, a new column takes
// the field's lake-wide type (fixed at first sight, see fieldTypeBook), so
// every column of the table already has its field's fixed type; without
// (encoder tests, benchmarks), the first line of the table decides. The
// error is errFieldType's: the type could not be learnt, the line is not
// judged.
func (t *table) resolveFields(p *lineproto.Decoder, tags []lineproto.Tag, types fieldTyper, at origin) (string, error) {
	t.slots = t.slots[:0]
	for i := range p.Fields {
		f := &p.Fields[i]
		if reservedColumn(f.Key) {
			return fmt.Sprintf("field %q uses a reserved column name", f.Key), nil
		}
		ci := t.lookup(len(t.slots), f.Key)
		if ci >= 0 {
			c := t.cols[ci]
			if c.tag {
				return fmt.Sprintf("field %q has the name of a tag column", f.Key), nil
			}
			if c.kind != f.Type {
				if types != nil {
					return typeConflict(t.measurement, f, c.kind), nil
				}
				return fmt.Sprintf("field %q is %s but its column in this object is %s", f.Key, f.Type, c.kind), nil
			}
		} else {
			// A new column: the line must not use the name twice with
			// different meanings.
			for j := range i {
				if string(p.Fields[j].Key) == string(f.Key) && p.Fields[j].Type != f.Type {
					return fmt.Sprintf("field %q appears twice with types %s and %s", f.Key, p.Fields[j].Type, f.Type), nil
				}
			}
			for j := range tags {
				if string(tags[j].Key) == string(f.Key) {
					return fmt.Sprintf("field %q has the name of a tag", f.Key), nil
				}
			}
			if types != nil {
				k, err := types.fieldType(t.measurement, f.Key, f.Type, at)
				if err != nil {
					return "", err
				}
				if k != f.Type {
					return typeConflict(t.measurement, f, k), nil
				}
			}
		}
		t.slots = append(t.slots, ci)
	}
	return "", nil
}

// typeConflict is the dead-letter reason of a sample whose field has
// another type than the one fixed for the measurement.
func typeConflict(measurement string, f *lineproto.FieldValue, fixed fieldKind) string {
	return fmt.Sprintf("field type conflict: field %q is %s, but %q fixed it as %s (the lake keeps the first type seen)", f.Key, f.Type, measurement, fixed)
}

// newColumn adds a column with n null rows.
func (t *table) newColumn(name []byte, tag bool, kind fieldKind) int {
	if ci, ok := t.byName[string(name)]; ok {
		return ci // the line repeats a key
	}
	c := &column{name: string(name), tag: tag, kind: kind}
	for range len(t.tns) {
		c.push(t.pool, 0, false)
	}
	t.byName[c.name] = len(t.cols)
	t.cols = append(t.cols, c)
	return len(t.cols) - 1
}

// set stores v in row (the last row, or — for a repeated key — overwrites it).
// It reports whether the row is new to the column.
func (c *column) set(pool *blockPool, row int, v uint64) bool {
	if c.n == row+1 {
		b := c.blocks[row/blockRows]
		b.vals[row%blockRows], b.valid[row%blockRows] = v, true
		return false
	}
	c.push(pool, v, true)
	return true
}

// add appends the parsed line as a row: tags through their binding (which
// bindTags has made for t), fields through t.slots (from resolveFields).
// Strings are copied into the arena.
func (t *table) add(p *lineproto.Decoder, tags []lineproto.Tag, b *binding, tns, offset int64, a *arena) {
	row := len(t.tns)
	filled := 0
	if !b.complete {
		b.complete = true
		for i := range tags {
			tg := &tags[i]
			if b.cols[i] < 0 {
				b.cols[i] = t.newColumn(tg.Key, true, 0)
			}
			if b.ids[i] == noID {
				b.ids[i] = t.cols[b.cols[i]].intern(tg.Value, a)
			}
		}
	}
	for i, ci := range b.cols {
		if t.cols[ci].set(t.pool, row, uint64(b.ids[i])) {
			filled++
		}
	}
	for i := range p.Fields {
		f := &p.Fields[i]
		ci := t.slots[i]
		if ci < 0 {
			ci = t.newColumn(f.Key, false, f.Type)
			t.slots[i] = ci
		}
		v := f.Num
		if f.Type == kindString {
			v = a.put(f.Str)
		}
		if t.cols[ci].set(t.pool, row, v) {
			filled++
		}
	}
	t.layout = append(t.layout[:0], t.slots...)
	t.tns = append(t.tns, tns)
	t.offs = append(t.offs, offset)
	if filled != len(t.cols) {
		for _, c := range t.cols {
			if c.n == row {
				c.push(t.pool, 0, false)
			}
		}
	}
}

// arena holds the string bytes of a partition buffer.
type arena struct{ b []byte }

func (a *arena) put(s []byte) uint64 {
	off := len(a.b)
	a.b = append(a.b, s...)
	return uint64(off)<<32 | uint64(len(s))
}

func (a *arena) get(v uint64) []byte {
	off, n := v>>32, v&math.MaxUint32
	return a.b[off : off+n : off+n]
}

// order returns the row permutation sorted by (time, offset).
func (t *table) order(perm []int32) []int32 {
	perm = perm[:0]
	sorted := true
	for i := range t.tns {
		perm = append(perm, int32(i))
		if i > 0 && (t.tns[i] < t.tns[i-1] || t.tns[i] == t.tns[i-1] && t.offs[i] < t.offs[i-1]) {
			sorted = false
		}
	}
	if !sorted {
		slices.SortFunc(perm, func(a, b int32) int {
			if t.tns[a] != t.tns[b] {
				if t.tns[a] < t.tns[b] {
					return -1
				}
				return 1
			}
			if t.offs[a] < t.offs[b] {
				return -1
			}
			if t.offs[a] > t.offs[b] {
				return 1
			}
			return 0
		})
	}
	return perm
}

// utcDate is lake.Date of a nanosecond timestamp, cached per day.
type dateCache struct {
	day  int64
	date string
}

func (d *dateCache) of(ns int64) string {
	day := floorDiv(ns, int64(24*time.Hour))
	if d.date == "" || day != d.day {
		d.day = day
		d.date = lake.Date(time.Unix(0, ns))
	}
	return d.date
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
