package rollup

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A field checkpointed with values still pending decodes with the sketch
// those values make once added: the same count, zero count and quantiles,
// for values of both signs, zeros, magnitudes below and above the bins,
// with part of them added to the sketch before the checkpoint.
func TestPendingValuesCheckpointed(t *testing.T) {
	sk := newSketches()
	rng := rand.New(rand.NewPCG(3, 4))
	values := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			switch rng.IntN(10) {
			case 0:
				v[i] = 0
			case 1:
				v[i] = math.SmallestNonzeroFloat64 * float64(rng.IntN(3)-1)
			case 2:
				v[i] = math.MaxFloat64 * float64(rng.IntN(3)-1)
			default:
				v[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10))
			}
		}
		return v
	}
	for _, n := range []int{1, 7, maxPending - 1, maxPending + 100, 3*maxPending + 5} {
		var f field
		f.name = "v"
		vs := values(n)
		for i, v := range vs {
			f.addNumber(v, int64(i), sk)
		}
		r := stateReader{b: appendField(nil, &f)}
		g, err := r.field(sk)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.pend) != 0 || g.count != f.count || g.sum != f.sum {
			t.Fatalf("n=%d: decoded count %d sum %v pending %d, want %d %v 0", n, g.count, g.sum, len(g.pend), f.count, f.sum)
		}
		want, got := f.sketch(), g.sketch()
		if got.GetCount() != want.GetCount() || got.GetZeroCount() != want.GetZeroCount() {
			t.Fatalf("n=%d: sketch count %v zero %v, want %v %v", n, got.GetCount(), got.GetZeroCount(), want.GetCount(), want.GetZeroCount())
		}
		for q := 0.0; q <= 1; q += 0.01 {
			a, errA := got.GetValueAtQuantile(q)
			b, errB := want.GetValueAtQuantile(q)
			if a != b || (errA == nil) != (errB == nil) {
				t.Fatalf("n=%d: quantile %v is %v (%v), want %v (%v)", n, q, a, errA, b, errB)
			}
		}
		f.release(sk)
		g.release(sk)
	}
}
