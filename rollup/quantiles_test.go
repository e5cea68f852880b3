package rollup

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	enc "github.com/DataDog/sketches-go/ddsketch/encoding"
)

// A field's quantiles read from its pending values are the ones its
// sketch answers once they are added to it: positive, negative, zero and
// tiny values, values beyond the sketch's range, counts up to a full
// buffer, and a field merged from others; in one case of two, values
// spread over more bins than orderStats counts by bin.
func TestPendingQuantilesMatchSketch(t *testing.T) {
	sk := newSketches()
	rng := rand.New(rand.NewPCG(3, 4))
	var sc quantileScratch
	wide := false
	value := func() float64 {
		switch rng.IntN(8) {
		case 7:
			if wide {
				return math.Pow(10, float64(rng.IntN(600)-300)) * (rng.Float64() - 0.5)
			}
		case 0:
			return 0
		case 1:
			return -rng.ExpFloat64()
		case 2:
			return 1e-320 // in the zero bin
		case 3:
			return math.MaxFloat64 // counted, beyond the bins
		}
		return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10))
	}
	for i := range 3000 {
		wide = i%2 == 1
		fast, slow := &field{name: "v"}, &field{name: "v"}
		if i%3 == 0 {
			// Merged from two finer windows, as a 1 min window is.
			for range 2 {
				o := &field{name: "v"}
				for range rng.IntN(maxPending / 2) {
					o.addNumber(value(), 0, sk)
				}
				fast.merge(o, sk)
				slow.merge(o, sk)
				o.release(sk)
			}
		} else {
			for range 1 + rng.IntN(maxPending-1) {
				v := value()
				fast.addNumber(v, 0, sk)
				slow.addNumber(v, 0, sk)
			}
		}
		if fast.sk != nil && !fast.sk.IsEmpty() {
			t.Fatalf("case %d: values were added to the sketch before it was read", i)
		}
		var got [len(quantiles)]float64
		ok := fast.quantiles(&sc, &got)
		for j, q := range quantiles {
			var want float64
			err := errors.New("no sketch")
			if s := slow.sketch(); s != nil {
				want, err = s.GetValueAtQuantile(q.q)
			}
			if ok != (err == nil) || ok && math.Float64bits(got[j]) != math.Float64bits(want) {
				t.Fatalf("case %d, q %v: got %v (%v), the sketch answers %v (%v)", i, q.q, got[j], ok, want, err)
			}
		}
		fast.release(sk)
		slow.release(sk)
	}
}

// selectKth puts at each position the value a sort puts there, with no
// greater value before it and no smaller one after, for inputs of few
// distinct values, sorted, reversed and random.
func TestSelectKth(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		n := 1 + rng.IntN(maxPending)
		v := make([]int32, n)
		for j := range v {
			switch i % 4 {
			case 0:
				v[j] = int32(rng.IntN(3))
			case 1:
				v[j] = int32(j)
			case 2:
				v[j] = int32(n - j)
			default:
				v[j] = rng.Int32N(1000) - 500
			}
		}
		sorted := slices.Clone(v)
		slices.Sort(sorted)
		k := rng.IntN(n)
		selectKth(v, k)
		if v[k] != sorted[k] {
			t.Fatalf("case %d: position %d of %d holds %d, sorted %d", i, k, n, v[k], sorted[k])
		}
		for j := range v {
			if j < k && v[j] > v[k] || j > k && v[j] < v[k] {
				t.Fatalf("case %d: %d at position %d, %d at %d", i, v[j], j, v[k], k)
			}
		}
	}
}

// appendPending writes the bytes sketches-go's encoders write for the same
// bins, and they decode to the sketch holding the values: positive,
// negative and zero values, indexes far apart.
func TestAppendPendingEncoding(t *testing.T) {
	sk := newSketches()
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 500 {
		f := &field{name: "v"}
		for range 1 + rng.IntN(maxPending-1) {
			v := rng.NormFloat64()
			switch rng.IntN(6) {
			case 0:
				v = 0
			case 1:
				v = math.Pow(10, float64(rng.IntN(600)-300)) * v
			}
			if i%3 == 0 {
				v = math.Abs(v)
			}
			f.addNumber(v, 0, sk)
		}
		var want []byte
		for _, class := range [...]int32{pendPositive, pendNegative} {
			var idx []int64
			for _, c := range f.pend {
				if c&3 == class {
					idx = append(idx, int64(c>>2))
				}
			}
			if len(idx) == 0 {
				continue
			}
			typ := enc.FlagTypePositiveStore
			if class == pendNegative {
				typ = enc.FlagTypeNegativeStore
			}
			enc.EncodeFlag(&want, enc.NewFlag(typ, enc.BinEncodingIndexDeltas))
			enc.EncodeUvarint64(&want, uint64(len(idx)))
			prev := int64(0)
			for _, x := range idx {
				enc.EncodeVarint64(&want, x-prev)
				prev = x
			}
		}
		zeros := 0
		for _, c := range f.pend {
			if c&3 == pendZero {
				zeros++
			}
		}
		if zeros > 0 {
			enc.EncodeFlag(&want, enc.FlagZeroCountVarFloat)
			enc.EncodeVarfloat64(&want, float64(zeros))
		}
		got := appendPending([]byte{0xAA}, f.pend)
		if !bytes.Equal(got[1:], want) || got[0] != 0xAA {
			t.Fatalf("case %d: appendPending wrote %x, the encoders %x", i, got[1:], want)
		}
		d, err := sk.decode(got[1:], false)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		s := f.sketch()
		if d.GetCount() != s.GetCount() {
			t.Fatalf("case %d: decoded %v values, the sketch holds %v", i, d.GetCount(), s.GetCount())
		}
		for _, q := range []float64{0, 0.3, 0.5, 0.9, 1} {
			a, err1 := d.GetValueAtQuantile(q)
			b, err2 := s.GetValueAtQuantile(q)
			if a != b || (err1 == nil) != (err2 == nil) {
				t.Fatalf("case %d, q %v: decoded %v, the sketch %v", i, q, a, b)
			}
		}
		f.release(sk)
	}
}
