package rollup

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/simtel/simtel/internal/lineproto"
)

// appendLine writes the output line of a closed window: measurement
// rollup_<res>.<measurement>, the series' tags, and per field
// <field>_count, _min, _max, _sum, _mean, _last, _p50, _p95, _p99 (and
// _nonfinite when any value was NaN or infinite), at the window's start.
// A field without finite values has count 0 and no statistics; a string
// or boolean field has only _last. The line is lineproto.AppendLine's.
func appendLine(dst []byte, res int, s *series, w *window) ([]byte, error) {
	var lw lineWriter
	return lw.append(dst, res, s, w)
}

// lineWriter writes output lines (appendLine). A window closes every 10 s
// per series, so the parts of a line that do not change — the table name
// of each measurement, the tags of each series, the columns of each field
// name — are escaped once (by lineproto.AppendLine itself, so the line is
// the same) and the columns are sorted as values, without a map.
type lineWriter struct {
	cols   map[string]*lineCols
	tables map[string]*[levels]string
	cells  []lineCell
	// order holds the field indexes of a window sorted by name.
	order []int
	// slots place a line's cells by their key (sortCells); their c is
	// nil between uses.
	slots []lineCell
	// fields is the map of the general path (appendMap).
	fields map[string]any
	qs     quantileScratch
}

// lineCols are a field's output columns, in the order of the suffixes:
// their names and, for the line, their escaped keys followed by '='.
type lineCols struct {
	name [len(colSuffixes)]string
	key  [len(colSuffixes)]string
	err  error // the field name cannot be a key
}

// colSuffixes end with the suffixes of quantiles, in their order.
var colSuffixes = [...]string{"_count", "_nonfinite", "_min", "_max", "_sum", "_mean", "_last", "_p50", "_p95", "_p99"}

const (
	colCount = iota
	colNonfinite
	colMin
	colMax
	colSum
	colMean
	colLast
	colQuantiles
)

// maxLineNames bounds the names a lineWriter keeps: field and measurement
// names come from the input.
const maxLineNames = 1 << 14

// lineCell is one column's value in a line.
type lineCell struct {
	c    *lineCols
	col  int
	kind lastKind // lastNumber (a float), lastBool, or lastNone for an integer
	num  float64
	n    int64
	// key orders the cells of a window whose field names are
	// prefix-free: the field's rank by name, then the suffix's.
	key int
}

// suffixRank is the rank of each column's suffix in sorted order.
var suffixRank = func() (r [len(colSuffixes)]int) {
	sorted := slices.Clone(colSuffixes[:])
	slices.Sort(sorted)
	for i, sfx := range colSuffixes {
		r[i] = slices.Index(sorted, sfx)
	}
	return r
}()

// sortCells sorts the cells of w's line by column name. When no field
// name of w is a prefix of another, every column of a field sorts before
// every column of the next field by name, so the cells sort by an integer
// key instead of their names.
func (lw *lineWriter) sortCells(cells []lineCell, w *window) {
	order := lw.order[:0]
	for i := range w.fields {
		order = append(order, i)
	}
	lw.order = order
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(w.fields[a].name, w.fields[b].name) })
	for i := 1; i < len(order); i++ {
		if strings.HasPrefix(w.fields[order[i]].name, w.fields[order[i-1]].name) {
			slices.SortFunc(cells, func(a, b lineCell) int { return strings.Compare(a.name(), b.name()) })
			return
		}
	}
	// order[rank] is a field index; cells carry their field index in key
	// (append), turned into its rank here.
	rank := order[len(order):cap(order)]
	if len(rank) < len(order) {
		rank = make([]int, len(order))
	}
	for r, fi := range order {
		rank[fi] = r
	}
	// The keys are distinct and below len(order)·len(colSuffixes): each
	// cell goes to the slot of its key, and the slots are read in order.
	slots := lw.slots
	if n := len(order) * len(colSuffixes); len(slots) < n {
		slots = make([]lineCell, n)
		lw.slots = slots
	}
	for i := range cells {
		c := &cells[i]
		c.key = rank[c.key]*len(colSuffixes) + suffixRank[c.col]
		slots[c.key] = *c
	}
	j := 0
	for k := range slots[:len(order)*len(colSuffixes)] {
		if slots[k].c != nil {
			cells[j] = slots[k]
			slots[k].c = nil
			j++
		}
	}
}

func (c *lineCell) name() string { return c.c.name[c.col] }

// The ends lineproto.AppendLine puts after the parts escapeParts cuts out
// of its lines.
const (
	probeField = "x"
	probeEnd   = " x=0i 0"
)

// escapePart returns the part of lineproto.AppendLine's line of
// measurement m, tags and the probe field between cut bytes from its
// start and end.
func escapePart(m string, tags map[string]string, field string, cut, end int) (string, error) {
	b, err := lineproto.AppendLine(nil, m, tags, map[string]any{field: int64(0)}, 0)
	if err != nil {
		return "", err
	}
	return string(b[cut : len(b)-end]), nil
}

func (lw *lineWriter) columns(name string) *lineCols {
	if c := lw.cols[name]; c != nil {
		return c
	}
	c := new(lineCols)
	for i, sfx := range colSuffixes {
		c.name[i] = name + sfx
		// "m <key>=0i 0": the key and '='.
		if c.err == nil {
			c.key[i], c.err = escapePart("m", nil, c.name[i], len("m "), len("0i 0"))
		}
	}
	if lw.cols == nil {
		lw.cols = map[string]*lineCols{}
	}
	if len(lw.cols) < maxLineNames {
		lw.cols[name] = c
	}
	return c
}

// table returns the escaped table name of measurement at resolution res.
func (lw *lineWriter) table(res int, measurement string) (string, error) {
	t := lw.tables[measurement]
	if t == nil {
		t = new([levels]string)
		for r := range levels {
			n, err := escapePart(Resolutions[r].Topic()+"."+measurement, nil, probeField, 0, len(probeEnd))
			if err != nil {
				return "", err
			}
			t[r] = n
		}
		if lw.tables == nil {
			lw.tables = map[string]*[levels]string{}
		}
		if len(lw.tables) < maxLineNames {
			lw.tables[measurement] = t
		}
	}
	return t[res], nil
}

// tags returns the series' tags as a line has them (",k=v..."), made
// once per series.
func (lw *lineWriter) tags(s *series) (string, error) {
	if !s.lineTagsSet {
		t, err := escapePart("m", s.tags, probeField, len("m"), len(probeEnd))
		if err != nil {
			return "", err
		}
		s.lineTags, s.lineTagsSet = t, true
	}
	return s.lineTags, nil
}

func (lw *lineWriter) append(dst []byte, res int, s *series, w *window) ([]byte, error) {
	cells := lw.cells[:0]
	defer func() { lw.cells = cells[:0] }()
	for i := range w.fields {
		f := &w.fields[i]
		c := lw.columns(f.name)
		n := len(cells)
		numeric := f.count > 0 || f.nonfinite > 0
		if numeric {
			cells = append(cells, lineCell{c: c, col: colCount, n: f.count})
		}
		if f.nonfinite > 0 {
			cells = append(cells, lineCell{c: c, col: colNonfinite, n: f.nonfinite})
		}
		if f.count > 0 {
			cells = append(cells,
				lineCell{c: c, col: colMin, kind: lastNumber, num: f.min},
				lineCell{c: c, col: colMax, kind: lastNumber, num: f.max},
				lineCell{c: c, col: colSum, kind: lastNumber, num: f.sum},
				lineCell{c: c, col: colMean, kind: lastNumber, num: f.sum / float64(f.count)})
			var qs [len(quantiles)]float64
			if f.quantiles(&lw.qs, &qs) {
				for i, v := range qs {
					cells = append(cells, lineCell{c: c, col: colQuantiles + i, kind: lastNumber, num: v})
				}
			}
		}
		switch f.kind {
		case lastNumber:
			cells = append(cells, lineCell{c: c, col: colLast, kind: lastNumber, num: f.lastNum})
		case lastString:
			if !numeric {
				// Rare (a field only ever a string): the general path
				// escapes it.
				return lw.appendMap(dst, res, s, w)
			}
		case lastBool:
			if !numeric {
				cells = append(cells, lineCell{c: c, col: colLast, kind: lastBool, num: f.lastNum})
			}
		}
		if c.err != nil && len(cells) > n {
			return dst, fmt.Errorf("invalid field key of %q: %w", f.name, c.err)
		}
		for j := n; j < len(cells); j++ {
			cells[j].key = i
		}
	}
	if len(cells) == 0 {
		return dst, errors.New("no field values")
	}
	table, err := lw.table(res, s.measurement)
	if err != nil {
		return dst, err
	}
	tags, err := lw.tags(s)
	if err != nil {
		return dst, err
	}
	// Two cells never share a name: no suffix ends another.
	lw.sortCells(cells, w)
	b := append(dst, table...)
	b = append(b, tags...)
	sep := byte(' ')
	for i := range cells {
		cl := &cells[i]
		b = append(b, sep)
		sep = ','
		b = append(b, cl.c.key[cl.col]...)
		switch cl.kind {
		case lastNumber:
			if math.IsNaN(cl.num) || math.IsInf(cl.num, 0) {
				return dst, fmt.Errorf("field %q is %v, which line protocol cannot carry", cl.name(), cl.num)
			}
			b = strconv.AppendFloat(b, cl.num, 'g', -1, 64)
		case lastBool:
			b = strconv.AppendBool(b, cl.num != 0)
		default:
			b = append(strconv.AppendInt(b, cl.n, 10), 'i')
		}
	}
	b = append(b, ' ')
	return strconv.AppendInt(b, w.start, 10), nil
}

// appendMap writes the line of any window through a map of its columns
// and lineproto.AppendLine.
func (lw *lineWriter) appendMap(dst []byte, res int, s *series, w *window) ([]byte, error) {
	if lw.fields == nil {
		lw.fields = make(map[string]any, len(w.fields)*len(colSuffixes))
	}
	fields := lw.fields
	clear(fields)
	for i := range w.fields {
		f := &w.fields[i]
		c := lw.columns(f.name)
		numeric := f.count > 0 || f.nonfinite > 0
		if numeric {
			fields[c.name[colCount]] = f.count
		}
		if f.nonfinite > 0 {
			fields[c.name[colNonfinite]] = f.nonfinite
		}
		if f.count > 0 {
			fields[c.name[colMin]] = f.min
			fields[c.name[colMax]] = f.max
			fields[c.name[colSum]] = f.sum
			fields[c.name[colMean]] = f.sum / float64(f.count)
			for i, q := range quantiles {
				if v, err := f.sketch().GetValueAtQuantile(q.q); err == nil {
					fields[c.name[colQuantiles+i]] = v
				}
			}
		}
		switch f.kind {
		case lastNumber:
			fields[c.name[colLast]] = f.lastNum
		case lastString:
			if !numeric {
				fields[c.name[colLast]] = f.lastStr
			}
		case lastBool:
			if !numeric {
				fields[c.name[colLast]] = f.lastNum != 0
			}
		}
	}
	return lineproto.AppendLine(dst, Resolutions[res].Topic()+"."+s.measurement, s.tags, fields, w.start)
}
