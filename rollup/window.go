package rollup

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	enc "github.com/DataDog/sketches-go/ddsketch/encoding"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"github.com/simtel/simtel/internal/lineproto"
)

// Resolution is one rollup level: its window length and its name, which
// names the output topic and the lake namespace (rollup_<name>).
type Resolution struct {
	Name   string
	Length time.Duration
}

// Resolutions are the rollup levels, finest first. Each level's windows
// are built by merging the closed windows of the level before it, so a
// coarser length must be a multiple of the finer one.
var Resolutions = [...]Resolution{{"10s", 10 * time.Second}, {"1m", time.Minute}, {"1h", time.Hour}}

// Topic is the output topic of a resolution; it is also the lake
// namespace of its tables (rollup_1m.<measurement>).
func (r Resolution) Topic() string { return "rollup_" + r.Name }

// topics are the output topics of Resolutions, made once: a record per
// window names one.
var topics = func() (t [levels]string) {
	for i, r := range Resolutions {
		t[i] = r.Topic()
	}
	return t
}()

const levels = len(Resolutions)

// RelativeAccuracy is the sketches' accuracy: a quantile q is answered
// with a value within this fraction of the value of rank q·(count−1)
// among the window's finite values, for values of any magnitude. The
// sketches keep their bins in pages allocated for the ranges the values
// use (sketches-go's BufferedPaginatedStore), which inserts faster than
// its dense stores and never collapses bins; a 1% sketch spans the whole
// float64 range in at most about 70,000 bins, so its size stays bounded.
const RelativeAccuracy = 0.01

// quantiles are the quantiles each window reports, and their column
// suffixes.
var quantiles = [...]struct {
	q      float64
	suffix string
}{{0.5, "_p50"}, {0.95, "_p95"}, {0.99, "_p99"}}

// sketches creates and recycles the windows' sketches. All share one
// index mapping, so any two merge.
type sketches struct {
	mapping *mapping.CubicallyInterpolatedMapping
	// minIndexable and maxIndexable bound the magnitudes the sketches
	// keep in bins (DDSketch.AddWithCount).
	minIndexable, maxIndexable float64
	free                       []*ddsketch.DDSketch
	// freeVals are fields' pending buffers, empty, by capacity:
	// minPending<<i in freeVals[i].
	freeVals [pendClasses][][]int32
	// names holds one copy of each field name, which every window's
	// aggregate of the field shares: a sample compares the names of its
	// window's fields, and shared ones stay in the cache.
	names map[string]string
}

// intern returns name as a string, one copy per name up to maxLineNames
// names (names come from the input).
func (p *sketches) intern(name []byte) string {
	if s, ok := p.names[string(name)]; ok {
		return s
	}
	s := string(name)
	if p.names == nil {
		p.names = map[string]string{}
	}
	if len(p.names) < maxLineNames {
		p.names[s] = s
	}
	return s
}

// sketchMapping is the index mapping of every sketch. It is not changed
// after it is made, so workers share it. The cubically interpolated
// mapping keeps the same relative accuracy as the logarithmic one with a
// few more bins, and finds a value's bin from the bits of the float
// rather than a logarithm: every sample takes one per numeric field.
var sketchMapping = func() *mapping.CubicallyInterpolatedMapping {
	m, err := mapping.NewCubicallyInterpolatedMapping(RelativeAccuracy)
	if err != nil {
		panic(err) // a constant accuracy in (0, 1)
	}
	return m
}()

// logMapping is the index mapping of the sketches and pending values in
// state records of the versions before sketchMapping (stateReader.log).
var logMapping = func() *mapping.LogarithmicMapping {
	m, err := mapping.NewLogarithmicMapping(RelativeAccuracy)
	if err != nil {
		panic(err) // as above
	}
	return m
}()

func newSketches() *sketches {
	m := sketchMapping
	return &sketches{mapping: m, minIndexable: m.MinIndexableValue(), maxIndexable: m.MaxIndexableValue()}
}

// Classes of a pending value's code (sketches.code): its low two bits.
const (
	pendPositive = 1
	pendNegative = 2
	pendZero     = 3
)

// code is a finite value as a sketch keeps it, DDSketch.AddWithCount's
// way: the bin index of its magnitude above two bits naming the store of
// its sign, or zero. It reports false for a magnitude beyond the bins,
// which a sketch does not keep.
func (p *sketches) code(v float64) (int32, bool) {
	switch {
	case v > p.minIndexable:
		if v > p.maxIndexable {
			return 0, false
		}
		return int32(p.mapping.Index(v))<<2 | pendPositive, true //nolint:gosec // |index| < 2^16 at 1% accuracy
	case v < -p.minIndexable:
		if v < -p.maxIndexable {
			return 0, false
		}
		return int32(p.mapping.Index(-v))<<2 | pendNegative, true //nolint:gosec // as above
	}
	return pendZero, true
}

func (p *sketches) provider() store.Store { return store.NewBufferedPaginatedStore() }

// get returns an empty sketch: a pooled one, or a new one for a nil p.
func (p *sketches) get() *ddsketch.DDSketch {
	if p != nil && len(p.free) > 0 {
		s := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		return s
	}
	return ddsketch.NewDDSketch(sketchMapping, p.provider(), p.provider())
}

func (p *sketches) put(s *ddsketch.DDSketch) {
	if s != nil && len(p.free) < 1<<16 {
		s.Clear()
		p.free = append(p.free, s)
	}
}

// valsOf returns an empty buffer for a field's pending values, of
// capacity minPending<<class.
func (p *sketches) valsOf(class int) []int32 {
	free := p.freeVals[class]
	if n := len(free); n > 0 {
		v := free[n-1]
		p.freeVals[class] = free[:n-1]
		return v
	}
	return make([]int32, 0, minPending<<class)
}

// valsFor returns an empty buffer for a field's pending values with room
// for n of them, up to maxPending: a field whose count can be foreseen
// (the series' last window, the windows merging into a coarser one) gets
// its buffer at once instead of growing it a class at a time.
func (p *sketches) valsFor(n int) []int32 {
	class := 0
	for class < pendClasses-1 && minPending<<class < n {
		class++
	}
	return p.valsOf(class)
}

// pendClass is the class of a buffer valsOf made, -1 for any other.
func pendClass(v []int32) int {
	c := cap(v)
	if c < minPending || c > maxPending || c&(c-1) != 0 {
		return -1
	}
	return bits.TrailingZeros(uint(c / minPending))
}

func (p *sketches) putVals(v []int32) {
	if c := pendClass(v); c >= 0 && len(p.freeVals[c]) < 1<<16 {
		p.freeVals[c] = append(p.freeVals[c], v[:0])
	}
}

// growVals returns v with room for n more values (len(v)+n at most
// maxPending): a pooled buffer of twice its capacity or more, v going back
// to the pool. Buffers grow and are recycled by class, so the pending
// values of windows, which grow at every window, are not reallocated.
func (p *sketches) growVals(v []int32, n int) []int32 {
	if len(v)+n <= cap(v) {
		return v
	}
	class := max(pendClass(v)+1, 0)
	for minPending<<class < len(v)+n {
		class++
	}
	g := append(p.valsOf(class), v...)
	p.putVals(v)
	return g
}

// decode decodes a sketch encoded without its mapping: sketchMapping's
// bins, or logMapping's for a state record written before it (log).
func (p *sketches) decode(b []byte, log bool) (*ddsketch.DDSketch, error) {
	if !log {
		return ddsketch.DecodeDDSketch(b, p.provider, p.mapping)
	}
	d, err := ddsketch.DecodeDDSketch(b, p.provider, logMapping)
	if err != nil {
		return nil, err
	}
	return p.fromLog(d), nil
}

// fromLog returns a sketch of sketchMapping holding d's counts (a sketch
// of logMapping): each bin's count goes to the bin of its value. The
// value is within the relative accuracy of the bin's samples and its new
// bin's value within that of it, so quantiles of converted state are
// within twice the accuracy; DDSketch.ChangeMapping instead splits
// counts across bins into fractions, which the windows' whole counts
// (quantiles by rank) do not take.
func (p *sketches) fromLog(d *ddsketch.DDSketch) *ddsketch.DDSketch {
	out := p.get()
	move := func(from, to store.Store) {
		from.ForEach(func(i int, n float64) bool {
			v := min(max(logMapping.Value(i), p.minIndexable), p.maxIndexable)
			to.AddWithCount(p.mapping.Index(v), n)
			return false
		})
	}
	move(d.GetPositiveValueStore(), out.GetPositiveValueStore())
	move(d.GetNegativeValueStore(), out.GetNegativeValueStore())
	if z := d.GetZeroCount(); z > 0 {
		_ = out.AddWithCount(0, z) // zero is always kept
	}
	return out
}

// lastKind is the type of a field's last value.
type lastKind uint8

const (
	lastNone lastKind = iota
	lastNumber
	lastString
	lastBool
)

// field aggregates one field of one series over one window. Numbers
// (floats, integers, unsigned) feed count, min, max, sum and the sketch
// when finite; NaN and ±Inf are only counted in nonfinite. Strings and
// booleans are carried as last only. last is the value with the latest
// sample time (the later record on a tie); a non-finite number is never
// last.
type field struct {
	name          string
	count         int64
	nonfinite     int64
	min, max, sum float64
	// sk is nil until values go into it (flush, merge, a decoded state):
	// a 10 s window whose values all stay pending never takes one.
	sk *ddsketch.DDSketch
	// pend holds the codes (sketches.code) of finite values not in sk
	// yet. Adding a value to a sketch touches its store's memory,
	// scattered over every open window's sketches, so the values of a
	// window gather here and go into its sketch together when it is read
	// (sketch) or pend is full. A closing 10 s window's quantiles are read
	// from them (quantiles) and they merge as codes into the window's
	// 1 min window and run (merge), so most 10 s windows never fill their
	// sketch. A checkpoint encodes them as they are (appendPending).
	pend  []int32
	lastT int64
	kind  lastKind
	// binned is false while sk surely holds no values (none flushed,
	// merged or decoded into it since it was taken from the pool), and
	// sk is not nil once it is set: most 10 s windows close with all
	// their values pending, and the flag spares a merge, a checkpoint and
	// a close reading the sketch's stores to learn that it is empty.
	binned bool
	// rebase: since the window's last state record, the sketch changed
	// or pending values went into it, so the next record of the window
	// is a whole one (worker.checkpoint); otherwise it carries only
	// pend[ckpt:], the values pending since.
	rebase  bool
	ckpt    int32
	lastNum float64
	lastStr string
}

func (f *field) setLast(t int64) bool {
	if f.kind != lastNone && t < f.lastT {
		return false
	}
	f.lastT = t
	return true
}

// addNumber adds a numeric value at sample time t.
func (f *field) addNumber(v float64, t int64, p *sketches) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		f.nonfinite++
		return false
	}
	if f.count == 0 {
		f.min, f.max = v, v
	} else {
		f.min, f.max = min(f.min, v), max(f.max, v)
	}
	f.count++
	f.sum += v
	if c, ok := p.code(v); ok {
		if len(f.pend) == cap(f.pend) {
			f.pend = p.growVals(f.pend, 1)
		}
		f.pend = append(f.pend, c)
		if len(f.pend) == maxPending {
			f.flush(p)
		}
	}
	if f.setLast(t) {
		f.kind, f.lastNum = lastNumber, v
	}
	return true
}

// maxPending bounds a field's pending values (4 bytes each); a buffer
// starts at minPending and doubles, pendClasses sizes in all.
const (
	minPending  = 64
	maxPending  = 512
	pendClasses = 4
)

// flush adds the pending values to the sketch, taking one from p (a new
// one for a nil p) if the field has none.
func (f *field) flush(p *sketches) {
	if len(f.pend) == 0 {
		return
	}
	if f.sk == nil {
		f.sk = p.get()
	}
	f.binned, f.rebase, f.ckpt = true, true, 0
	pos, neg := f.sk.GetPositiveValueStore(), f.sk.GetNegativeValueStore()
	for _, c := range f.pend {
		switch c & 3 {
		case pendPositive:
			pos.Add(int(c >> 2))
		case pendNegative:
			neg.Add(int(c >> 2))
		default:
			_ = f.sk.Add(0) // the zero count
		}
	}
	f.pend = f.pend[:0]
}

// maxDeltaLen bounds the bytes of a pending index's delta (appendPending).
const maxDeltaLen = 5

// appendPending encodes pending values as sketches-go encodes the
// unsorted bins of a store (index deltas) and a zero count, which a
// sketch's decoding adds to the bins it decoded before: a field's sketch
// followed by its pending values decode as the sketch holding them all,
// so a checkpoint leaves the values pending.
func appendPending(dst []byte, pend []int32) []byte {
	var n [4]uint64
	for _, c := range pend {
		n[c&3]++
	}
	for _, class := range [...]int32{pendPositive, pendNegative} {
		if n[class] == 0 {
			continue
		}
		t := enc.FlagTypePositiveStore
		if class == pendNegative {
			t = enc.FlagTypeNegativeStore
		}
		enc.EncodeFlag(&dst, enc.NewFlag(t, enc.BinEncodingIndexDeltas))
		enc.EncodeUvarint64(&dst, n[class])
		// The deltas are written into room made for them at once, each
		// as enc.EncodeVarint64 writes it: an index is below 2^30 in
		// magnitude, so a delta's zigzag takes at most 5 bytes, where
		// its varint and LEB128 agree.
		dst = slices.Grow(dst, maxDeltaLen*int(n[class]))
		out, o := dst[len(dst):cap(dst)], 0
		prev := int64(0)
		for _, c := range pend {
			if c&3 != class {
				continue
			}
			i := int64(c >> 2)
			d := i - prev
			prev = i
			u := uint64(d>>63 ^ d<<1)
			for u >= 0x80 {
				out[o] = byte(u) | 0x80
				u >>= 7
				o++
			}
			out[o] = byte(u)
			o++
		}
		dst = dst[:len(dst)+o]
	}
	if n[pendZero] > 0 {
		enc.EncodeFlag(&dst, enc.FlagZeroCountVarFloat)
		enc.EncodeVarfloat64(&dst, float64(n[pendZero]))
	}
	return dst
}

// addCodes adds pending values (sketches.code) of another aggregate.
func (f *field) addCodes(cs []int32, p *sketches) {
	for len(cs) > 0 {
		n := min(len(cs), maxPending-len(f.pend))
		f.pend = append(p.growVals(f.pend, n), cs[:n]...)
		cs = cs[n:]
		if len(f.pend) == maxPending {
			f.flush(p)
		}
	}
}

// quantileScratch holds the bin indexes of a field whose values are all
// pending (field.quantiles), and their counts by bin for each sign.
type quantileScratch struct {
	pos, neg           orderStats
	posCount, negCount *binCounts
}

// quantiles sets qs to the values at quantiles[i].q that the field's
// sketch with its pending values would answer (DDSketch.GetValueAtQuantile),
// and reports false when it would answer none (no finite value within the
// sketch's range). A 10 s window's values are usually all pending when it
// closes (fewer than maxPending per field): they are then read from their
// bin indexes, the bins the sketch would have, without being added to it.
func (f *field) quantiles(sc *quantileScratch, qs *[len(quantiles)]float64) bool {
	if f.count == 0 {
		return false
	}
	if len(f.pend) == 0 || f.binned && !f.sk.IsEmpty() {
		sk := f.sketch()
		for i, q := range quantiles {
			v, err := sk.GetValueAtQuantile(q.q)
			if err != nil {
				return false
			}
			qs[i] = v
		}
		return true
	}
	pos, neg, zero := sc.pos.idx[:0], sc.neg.idx[:0], 0
	posLo, posHi, negLo, negHi := int32(math.MaxInt32), int32(math.MinInt32), int32(math.MaxInt32), int32(math.MinInt32)
	for _, c := range f.pend {
		switch i := c >> 2; c & 3 {
		case pendPositive:
			pos = append(pos, i)
			posLo, posHi = min(posLo, i), max(posHi, i)
		case pendNegative:
			neg = append(neg, i)
			negLo, negHi = min(negLo, i), max(negHi, i)
		default:
			zero++
		}
	}
	sc.pos.reset(pos, posLo, posHi, &sc.posCount)
	sc.neg.reset(neg, negLo, negHi, &sc.negCount)
	// As GetValueAtQuantile computes it, operation for operation, so the
	// same float rounding picks the same bin.
	count := float64(len(pos) + len(neg) + zero)
	negCount, zeroCount := float64(len(neg)), float64(zero)
	for i, q := range quantiles {
		rank := float64(q.q * (count - 1))
		switch {
		case rank < negCount:
			qs[i] = -sketchMapping.Value(sc.neg.keyAtRank(negCount - 1 - rank))
		case rank < zeroCount+negCount:
			qs[i] = 0
		default:
			qs[i] = sketchMapping.Value(sc.pos.keyAtRank(rank - zeroCount - negCount))
		}
	}
	sc.pos.clear()
	sc.neg.clear()
	return true
}

// orderStats answers a store's KeyAtRank over bin indexes, one per value,
// in any order. When the indexes span at most histBins bins, they are
// counted by bin (binCounts) and a rank is found by summing the counts
// from the lowest bin: a window reads three ranks, usually increasing, so
// one pass over the counts answers them. Otherwise each rank is selected
// (selectKth) rather than the indexes sorted, and each selection narrows
// the next to the part of idx between the ranks selected before.
type orderStats struct {
	idx []int32
	sel [len(quantiles)]int // positions holding their sorted value
	n   int
	// h holds the counts of idx by bin, from bin lo, when not nil; blk
	// and below are where the last rank was found: the first block
	// holding it and the count of the blocks before.
	h          *binCounts
	lo         int32
	blk, below int
}

// histBins is the span of bin indexes counted by bin; histBlock bins make
// a block, whose count lets a rank's search skip the block.
const (
	histBins  = 1 << 14
	histBlock = 64
)

// binCounts counts bin indexes from a lowest one: n by bin, blk by block
// of histBlock bins. Every count is zero between uses (orderStats.clear).
// A count stays below 1<<16: the indexes are one field's pending values,
// at most maxPending.
type binCounts struct {
	n   [histBins]uint16
	blk [histBins / histBlock]uint16
}

// reset prepares o for the indexes idx, which lie in [lo, hi]; *h is the
// counts to use, made if needed.
func (o *orderStats) reset(idx []int32, lo, hi int32, h **binCounts) {
	o.idx, o.n, o.h = idx, 0, nil
	if len(idx) < 2 || int64(hi)-int64(lo) >= histBins {
		return
	}
	if *h == nil {
		*h = new(binCounts)
	}
	o.h, o.lo, o.blk, o.below = *h, lo, 0, 0
	for _, i := range idx {
		b := i - lo
		o.h.n[b]++
		o.h.blk[b/histBlock]++
	}
}

// clear zeroes the counts reset made.
func (o *orderStats) clear() {
	if o.h == nil {
		return
	}
	for _, i := range o.idx {
		b := i - o.lo
		o.h.n[b] = 0
		o.h.blk[b/histBlock] = 0
	}
	o.h = nil
}

// keyAtRank is the least index whose cumulative count exceeds rank: the
// value at position rank of the sorted indexes.
func (o *orderStats) keyAtRank(rank float64) int {
	if len(o.idx) == 0 {
		return 0
	}
	j := 0
	if rank > 0 {
		j = min(int(rank), len(o.idx)-1)
	}
	if h := o.h; h != nil {
		if j < o.below {
			o.blk, o.below = 0, 0
		}
		for o.below+int(h.blk[o.blk]) <= j {
			o.below += int(h.blk[o.blk])
			o.blk++
		}
		c := o.below
		for b := o.blk * histBlock; ; b++ {
			if c += int(h.n[b]); c > j {
				return int(o.lo) + b
			}
		}
	}
	lo, hi := 0, len(o.idx)
	for _, s := range o.sel[:o.n] {
		switch {
		case s == j:
			return int(o.idx[j])
		case s < j:
			lo = max(lo, s+1)
		default:
			hi = min(hi, s)
		}
	}
	selectKth(o.idx[lo:hi], j-lo)
	if o.n < len(o.sel) {
		o.sel[o.n] = j
		o.n++
	}
	return int(o.idx[j])
}

// selectKth reorders v so that v[k] holds the value it would hold sorted,
// with no greater value before it and no smaller one after: quickselect
// with a three-way partition, so runs of equal indexes (a window of
// repeated values) take one pass. Past a depth a sort finishes the range,
// so no input costs more than a sort.
func selectKth(v []int32, k int) {
	lo, hi := 0, len(v)
	for depth := 2 * bits.Len(uint(len(v))); hi-lo > 12; depth-- {
		if depth == 0 {
			slices.Sort(v[lo:hi])
			return
		}
		a, b, c := v[lo], v[lo+(hi-lo)/2], v[hi-1]
		if a > b {
			a, b = b, a
		}
		pivot := max(a, min(b, c)) // the median of a, b, c
		lt, i, gt := lo, lo, hi
		for i < gt {
			switch x := v[i]; {
			case x < pivot:
				v[lt], v[i] = x, v[lt]
				lt++
				i++
			case x > pivot:
				gt--
				v[i], v[gt] = v[gt], x
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k >= gt:
			lo = gt
		default:
			return
		}
	}
	slices.Sort(v[lo:hi])
}

// sketch returns the sketch of the finite values, nil if there are none.
func (f *field) sketch() *ddsketch.DDSketch {
	if f.count == 0 {
		return nil
	}
	if f.sk == nil {
		// Values all beyond the bins, or read where no pool is at hand.
		f.sk = (*sketches)(nil).get()
	}
	f.flush(nil)
	return f.sk
}

// release returns the sketch and the pending buffer to p.
func (f *field) release(p *sketches) {
	p.put(f.sk)
	p.putVals(f.pend)
	f.sk, f.pend, f.binned, f.rebase, f.ckpt = nil, nil, false, false, 0
}

// add adds a decoded value at sample time t; it reports false for a
// non-finite number.
func (f *field) add(v *lineproto.FieldValue, t int64, p *sketches) bool {
	switch v.Type {
	case lineproto.Float:
		return f.addNumber(v.Float(), t, p)
	case lineproto.Integer:
		return f.addNumber(float64(v.Int()), t, p)
	case lineproto.Unsigned:
		return f.addNumber(float64(v.Uint()), t, p)
	case lineproto.Boolean:
		if f.setLast(t) {
			f.kind, f.lastNum = lastBool, 0
			if v.Bool() {
				f.lastNum = 1
			}
		}
	case lineproto.String:
		if f.setLast(t) && (f.kind != lastString || f.lastStr != string(v.Str)) {
			f.kind, f.lastStr = lastString, string(v.Str)
		}
	}
	return true
}

// merge adds the aggregate of a finer window.
func (f *field) merge(o *field, p *sketches) {
	if o.count > 0 {
		if f.count == 0 {
			f.min, f.max = o.min, o.max
		} else {
			f.min, f.max = min(f.min, o.min), max(f.max, o.max)
		}
		f.count += o.count
		f.sum += o.sum
		// o's pending values stay pending here: a closing 10 s window
		// merges into its 1 min window and its run without adding them
		// to its own sketch first.
		if o.binned && !o.sk.IsEmpty() {
			if f.sk == nil {
				f.sk = p.get()
			}
			_ = f.sk.MergeWith(o.sk) // one mapping for all sketches
			f.binned, f.rebase = true, true
		}
		f.addCodes(o.pend, p)
	}
	f.nonfinite += o.nonfinite
	if o.kind != lastNone && f.setLast(o.lastT) {
		f.kind, f.lastNum, f.lastStr = o.kind, o.lastNum, o.lastStr
	}
}

// window is one open window of one series at one resolution.
type window struct {
	start int64 // unix ns, a multiple of the resolution's length
	// fields are held in the window, not pointed at: a sample reaches
	// its field's aggregate without another pointer to follow.
	fields []field
	// dirty: changed since the last checkpoint; closed: it was emitted
	// (a dirty list may still point at it).
	dirty, closed bool
	// parts is how many state records of it the state topic holds: a
	// whole one (part 0) and the deltas after it (worker.checkpoint);
	// closing it writes a tombstone for each. ckptFields and ckptInRun
	// are its field count and inRun as of the last.
	parts      int32
	ckptFields int32
	ckptInRun  bool
	// inRun: the window's samples are in its run's aggregate already, so
	// closing it does not fold it there and its further samples go there
	// one by one (summarize.go). Set once its run's aggregate took it
	// (the run ended while it was open), and for a 10 s window of a
	// checkpoint written before windows were folded.
	inRun bool
}

// field returns the window's aggregate of the field named name, adding it;
// the pointer is good until the next field is added. hint is where it is
// likely to be: a series' lines mostly carry the same fields in the same
// order.
func (w *window) field(name []byte, hint int, p *sketches) *field {
	if hint < len(w.fields) && w.fields[hint].name == string(name) {
		return &w.fields[hint]
	}
	for i := range w.fields {
		if w.fields[i].name == string(name) {
			return &w.fields[i]
		}
	}
	w.fields = append(w.fields, field{name: p.intern(name)})
	return &w.fields[len(w.fields)-1]
}

// merge adds o, a window of a finer resolution, ratio times shorter.
func (w *window) merge(o *window, p *sketches, ratio int) {
	if w.fields == nil {
		w.fields = make([]field, 0, len(o.fields))
	}
	for i := range o.fields {
		of := &o.fields[i]
		f := w.field([]byte(of.name), i, p)
		if f.pend == nil && f.count == 0 && len(of.pend) > 0 {
			// As many values in each of its finer windows.
			f.pend = p.valsFor(min(len(of.pend)*ratio, maxPending))
		}
		f.merge(of, p)
	}
}

func (w *window) release(p *sketches) {
	for i := range w.fields {
		w.fields[i].release(p)
	}
}

// floorTo is the start of the window of length n (ns) holding t.
func floorTo(t, n int64) int64 {
	s := t - t%n
	if t < 0 && s != t {
		s -= n
	}
	return s
}

// outputKey is the key of a window's output record: the series key and
// the window start, so compaction keeps one record per series and window.
func outputKey(s *series, w *window) []byte {
	return appendOutputKey(make([]byte, 0, len(s.key)+21), s, w)
}

func appendOutputKey(k []byte, s *series, w *window) []byte {
	k = append(k, s.key...)
	k = append(k, ' ')
	return strconv.AppendInt(k, w.start, 10)
}

// newWindow returns a window starting at start with room for n fields,
// which up to 8 fields are allocated with the window: a sample then reads
// the window and its fields from one block.
func newWindow(start int64, n int) *window {
	var w *window
	switch {
	case n <= 0:
		return &window{start: start}
	case n <= 2:
		b := new(struct {
			w window
			f [2]field
		})
		w, b.w.fields = &b.w, b.f[:0]
	case n <= 4:
		b := new(struct {
			w window
			f [4]field
		})
		w, b.w.fields = &b.w, b.f[:0]
	case n <= 8:
		b := new(struct {
			w window
			f [8]field
		})
		w, b.w.fields = &b.w, b.f[:0]
	default:
		w = &window{fields: make([]field, 0, n)}
	}
	w.start = start
	return w
}

// insertWindow returns the window of ws starting at start, adding it in
// start order if missing (created reports that) with room for n fields.
func insertWindow(ws []*window, start int64, n int) (_ []*window, w *window, created bool) {
	if n := len(ws); n > 0 && ws[n-1].start == start {
		return ws, ws[n-1], false
	}
	i, found := slices.BinarySearchFunc(ws, start, func(w *window, s int64) int {
		switch {
		case w.start < s:
			return -1
		case w.start > s:
			return 1
		}
		return 0
	})
	if found {
		return ws, ws[i], false
	}
	w = newWindow(start, n)
	return slices.Insert(ws, i, w), w, true
}
