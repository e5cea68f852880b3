package rollup

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
)

// feed adds lines to their 10 s windows in partition p as the worker does.
func feed(t *testing.T, p *partition, sk *sketches, lines ...string) {
	t.Helper()
	var d lineproto.Decoder
	for _, l := range lines {
		if err := d.Decode([]byte(l)); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		key := l[:lineproto.SeriesEnd([]byte(l))]
		s := p.series[key]
		if s == nil {
			s = newSeries([]byte(key), &d)
			p.series[key] = s
		}
		p.maxEvent = max(p.maxEvent, d.Time)
		w := p.window(s, 0, floorTo(d.Time, int64(10*time.Second)))
		for i := range d.Fields {
			w.field(d.Fields[i].Key, i, sk).add(&d.Fields[i], d.Time, sk)
		}
	}
}

func closeAll(t *testing.T, p *partition, sk *sketches, wm int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	p.closeThrough(wm, sk, func(res int, s *series, w *window) {
		b, err := appendLine(nil, res, s, w)
		if err != nil {
			t.Fatal(err)
		}
		out[string(outputKey(s, w))+" "+Resolutions[res].Name] = string(b)
	})
	return out
}

// NaN and infinities are counted apart and leave the statistics alone;
// strings and booleans are carried as last only.
func TestFieldBadValues(t *testing.T) {
	sk := newSketches()
	var f field
	for i, v := range []float64{1, math.NaN(), 3, math.Inf(1), math.Inf(-1), 2} {
		f.addNumber(v, int64(i), sk)
	}
	if f.count != 3 || f.nonfinite != 3 || f.sum != 6 || f.min != 1 || f.max != 3 || f.lastNum != 2 {
		t.Errorf("got count %d nonfinite %d sum %v min %v max %v last %v, want 3 3 6 1 3 2", f.count, f.nonfinite, f.sum, f.min, f.max, f.lastNum)
	}
	if q, _ := f.sketch().GetValueAtQuantile(1); math.Abs(q-3) > 0.03 {
		t.Errorf("p100 %v, want 3 within 1%%", q)
	}
	p := newPartition(0, 0)
	feed(t, p, sk, `ev,host=a msg="start",ok=t 1000000000`, `ev,host=a msg="stop",ok=f 2000000000`)
	got := closeAll(t, p, sk, int64(time.Hour)*2)
	line := got["ev,host=a 0 10s"]
	if want := `rollup_10s.ev,host=a msg_last="stop",ok_last=false 0`; line != want {
		t.Errorf("got %q, want %q", line, want)
	}
}

// The 1 min and 1 h windows merged from closed 10 s windows equal the
// windows computed from the samples directly, and a window's state
// survives encoding and decoding.
func TestMergeAndState(t *testing.T) {
	sk := newSketches()
	var lines []string
	for i := range 400 {
		lines = append(lines, "cpu,host=a v="+strconv.Itoa(i%37)+" "+strconv.Itoa(i*int(time.Second)))
	}
	p := newPartition(0, 0)
	feed(t, p, sk, lines...)
	// Round-trip every open window through the state encoding.
	q := newPartition(0, 0)
	for _, s := range p.series {
		for res := range levels {
			for _, w := range s.open[res] {
				if _, err := decodeWindow(appendWindow(nil, s, res, w), q, sk); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	q.maxEvent = p.maxEvent
	a, b := closeAll(t, p, sk, int64(2*time.Hour)), closeAll(t, q, sk, int64(2*time.Hour))
	if len(a) != 40+7+1 {
		t.Errorf("%d windows, want 48", len(a))
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("window %s after a state round trip: got %q, want %q", k, b[k], v)
		}
	}
	h := a["cpu,host=a 0 1h"]
	var sum int
	for i := range 400 {
		sum += i % 37
	}
	if !strings.Contains(h, "v_count=400i") || !strings.Contains(h, "v_sum="+strconv.Itoa(sum)+" ") || !strings.Contains(h, "v_min=0,") || !strings.Contains(h, "v_max=36,") {
		t.Errorf("hourly window %q: want count 400, sum %d, min 0, max 36", h, sum)
	}
}
