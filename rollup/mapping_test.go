package rollup

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// logField is a field aggregate of vals as a worker before sketchMapping
// kept it: most values in a sketch of logMapping's bins, the last ones
// pending as logMapping's codes.
func logField(vals []float64) *field {
	f := &field{name: "v", binned: true, kind: lastNumber}
	f.sk = ddsketch.NewDDSketch(logMapping, store.NewBufferedPaginatedStore(), store.NewBufferedPaginatedStore())
	for i, v := range vals {
		if f.count == 0 {
			f.min, f.max = v, v
		}
		f.min, f.max = min(f.min, v), max(f.max, v)
		f.count++
		f.sum += v
		f.lastNum = v
		if i < len(vals)-100 {
			_ = f.sk.Add(v)
			continue
		}
		switch {
		case v > 0:
			f.pend = append(f.pend, int32(logMapping.Index(v))<<2|pendPositive) //nolint:gosec // small
		case v < 0:
			f.pend = append(f.pend, int32(logMapping.Index(-v))<<2|pendNegative) //nolint:gosec // small
		default:
			f.pend = append(f.pend, pendZero)
		}
	}
	return f
}

// worstQuantileError is the largest relative difference between the
// quantiles of sk and of ref, which hold the same number of values.
func worstQuantileError(t *testing.T, sk, ref *ddsketch.DDSketch) float64 {
	t.Helper()
	if got, want := sk.GetCount(), ref.GetCount(); got != want {
		t.Fatalf("the sketch holds %v values, want %v", got, want)
	}
	worst := 0.0
	for q := 0.0; q <= 1; q += 0.01 {
		got, err1 := sk.GetValueAtQuantile(q)
		want, err2 := ref.GetValueAtQuantile(q)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if want == 0 {
			if got != 0 {
				return math.Inf(1)
			}
			continue
		}
		worst = max(worst, math.Abs(got-want)/math.Abs(want))
	}
	return worst
}

// TestLogMappingStateDecodes: state records written before the sketches
// took sketchMapping (windows of versions 1 and 2, deltas of version 3,
// run records of version 1) hold logMapping's bins; they decode into
// sketchMapping's with quantiles within the relative accuracy of those
// the old sketch gave (so within twice it of the values'), and read as
// today's bins they would not be.
func TestLogMappingStateDecodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vals := make([]float64, 5000)
	for i := range vals {
		switch i % 10 {
		case 0:
			vals[i] = 0
		case 1, 2:
			vals[i] = -math.Exp(rng.NormFloat64() * 4)
		default:
			vals[i] = math.Exp(rng.NormFloat64() * 4)
		}
	}
	// What the old sketch answered: all values in logMapping's bins.
	ref := ddsketch.NewDDSketch(logMapping, store.NewBufferedPaginatedStore(), store.NewBufferedPaginatedStore())
	for _, v := range vals {
		_ = ref.Add(v)
	}
	sk := newSketches()
	bound := RelativeAccuracy * (1 + 1e-9)

	// The field as today's encoder writes it, then decoded both ways.
	enc := appendField(nil, logField(vals))
	asLog := stateReader{b: enc, log: true}
	f, err := asLog.field(sk)
	if err != nil {
		t.Fatal(err)
	}
	if e := worstQuantileError(t, f.sk, ref); e > bound {
		t.Fatalf("converted: worst quantile error %.4f, want at most %.4f", e, bound)
	}
	asNew := stateReader{b: enc}
	f, err = asNew.field(sk)
	if err != nil {
		t.Fatal(err)
	}
	if e := worstQuantileError(t, f.sk, ref); e <= bound {
		t.Fatalf("read as sketchMapping's bins, logMapping's are within %.4f: the test cannot tell them apart", e)
	}

	// Each record kind takes the conversion by its version byte.
	s := &series{key: "m,host=a", measurement: "m", tags: map[string]string{"host": "a"}}
	w := &window{start: 0, fields: []field{*logField(vals)}}
	for _, version := range []byte{1, 2} {
		rec := appendWindow(nil, s, 0, w)
		if version == 1 {
			// Version 1 had no flags byte.
			rec = append(rec[:2:2], rec[3:]...)
		}
		rec[0] = version
		p := newPartition(0, 0)
		got, err := decodeWindow(rec, p, sk)
		if err != nil {
			t.Fatalf("window version %d: %v", version, err)
		}
		if e := worstQuantileError(t, got.open[0][0].fields[0].sk, ref); e > bound {
			t.Fatalf("window version %d: worst quantile error %.4f", version, e)
		}
	}

	// A whole record with the sketch, then a delta with the values
	// pending since.
	p := newPartition(0, 0)
	sketchOnly := *logField(vals)
	sketchOnly.pend = nil
	whole := appendWindow(nil, s, 0, &window{start: 0, fields: []field{sketchOnly}})
	whole[0] = 2
	if _, err := decodeWindow(whole, p, sk); err != nil {
		t.Fatal(err)
	}
	delta := appendDelta(nil, w)
	delta[0] = deltaVersionLog
	key := appendPartKey(nil, s.key, 0, 0, 1)
	if err := decodeDelta(key, delta, p, sk); err != nil {
		t.Fatalf("delta version %d: %v", deltaVersionLog, err)
	}
	if e := worstQuantileError(t, p.series[s.key].open[0][0].fields[0].sk, ref); e > bound {
		t.Fatalf("delta version %d: worst quantile error %.4f", deltaVersionLog, e)
	}

	a := newRunAgg("r", 0)
	a.metrics["m"] = map[string]*field{"v": logField(vals)}
	rec := appendRunMeasurement(nil, a, "m")
	rec[0] = 1
	got, _, err := decodeRunRecord(rec, sk)
	if err != nil {
		t.Fatalf("run record version 1: %v", err)
	}
	if e := worstQuantileError(t, got.metrics["m"]["v"].sk, ref); e > bound {
		t.Fatalf("run record version 1: worst quantile error %.4f", e)
	}
}
