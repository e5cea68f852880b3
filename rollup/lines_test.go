package rollup

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// The line of every window is the one lineproto.AppendLine writes from a
// map of its columns: names to escape, field names that prefix others,
// booleans, strings, fields only NaN and a sum overflowing to infinity.
func TestAppendLineMatchesMap(t *testing.T) {
	sk := newSketches()
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"v", "v_p", "v_count", "a b", "x=y", "c,d", "é", "z\\x", "bad\x01", "_", "v_min"}
	meas := []string{"cpu", "a b", "m,n", "bad\x02"}
	tagSets := []map[string]string{{}, {"host": "n1", "run": "r1"}, {"k k": "v,v", "a=b": "c d", "empty": ""}, {"bad": "x\x03"}}
	var lw lineWriter
	for i := range 3000 {
		s := &series{key: strconv.Itoa(i), measurement: meas[rng.IntN(len(meas))], tags: tagSets[rng.IntN(len(tagSets))]}
		w := &window{start: int64(rng.IntN(1 << 40))}
		for range rng.IntN(5) {
			f := w.field([]byte(names[rng.IntN(len(names))]), 0, sk)
			for range rng.IntN(4) {
				switch rng.IntN(8) {
				case 0:
					f.addNumber(math.NaN(), int64(rng.IntN(100)), sk)
				case 1:
					f.addNumber(math.MaxFloat64, int64(rng.IntN(100)), sk)
				case 2:
					f.setLast(int64(rng.IntN(100)))
					f.kind, f.lastNum = lastBool, float64(rng.IntN(2))
				case 3:
					f.setLast(int64(rng.IntN(100)))
					f.kind, f.lastStr = lastString, []string{"s", `q"\`, "\xff"}[rng.IntN(3)]
				default:
					f.addNumber(rng.NormFloat64()*1e3, int64(rng.IntN(100)), sk)
				}
			}
		}
		got, gotErr := lw.append([]byte("dst"), i%levels, s, w)
		want, wantErr := lw.appendMap([]byte("dst"), i%levels, s, w)
		if (gotErr != nil) != (wantErr != nil) || string(got) != string(want) {
			t.Fatalf("window %d:\n got %q (%v)\nwant %q (%v)", i, got, gotErr, want, wantErr)
		}
		w.release(sk)
	}
}
