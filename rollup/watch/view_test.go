package watch

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/rollup"
)

func TestSparkline(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		name string
		in   []float64
		want string
	}{
		{"rising", []float64{0, 1, 2, 3, 4, 5, 6, 7}, "▁▂▃▄▅▆▇█"},
		{"negative", []float64{-10, -5, 0}, "▁▅█"},
		{"flat", []float64{3, 3, 3}, "▄▄▄"},
		{"gaps", []float64{nan, 1, nan, 2}, " ▁ █"},
		{"infinite is a gap", []float64{math.Inf(1), 0, 1, math.Inf(-1)}, " ▁█ "},
		{"no value", []float64{nan, nan}, "  "},
		{"empty", nil, ""},
	} {
		if got := sparkline(c.in); got != c.want {
			t.Errorf("%s: sparkline(%v) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// TestWatchView feeds rollup lines of two hosts and another run to a view
// and checks its table, per metric and per host.
func TestWatchView(t *testing.T) {
	res := rollup.Resolutions[0]
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	lines := []string{
		// window 0: n1 values 1, 3 (last 3); n2 values 5 (last 5)
		"rollup_10s.sim,host=n1,run=r1 loss_count=2i,loss_min=1,loss_max=3,loss_sum=4,loss_mean=2,loss_last=3,loss_p95=3 %d",
		"rollup_10s.sim,host=n2,run=r1 loss_count=1i,loss_min=5,loss_max=5,loss_sum=5,loss_mean=5,loss_last=5,loss_p95=5 %d",
		// window 1 (+10 s): n1 value -2
		"rollup_10s.sim,host=n1,run=r1 loss_count=1i,loss_min=-2,loss_max=-2,loss_sum=-2,loss_mean=-2,loss_last=-2,loss_p95=-2,phase_last=\"warm\" %d",
		// another run and a non-numeric field: not shown
		"rollup_10s.sim,host=n1,run=r2 loss_count=1i,loss_min=99,loss_max=99,loss_sum=99,loss_mean=99,loss_last=99,loss_p95=99 %d",
	}
	starts := []time.Time{t0, t0, t0.Add(10 * time.Second), t0}
	feed := func(v *View) {
		var dec lineproto.Decoder
		for i, l := range lines {
			wl, err := rollup.ParseWindowLine(&dec, []byte(fmt.Sprintf(l, starts[i].UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			v.Add(wl)
		}
	}
	v := NewView("r1", res, nil, false)
	feed(v)
	var b strings.Builder
	if err := v.Print(&b, 3, t0); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Means: window 0 (4+5)/3 = 3, window 1 −2; no window before them.
	if !regexp.MustCompile(`(?m)^sim\.loss +  █▁ +-2 +-2 +5 +-2 +4$`).MatchString(out) {
		t.Errorf("view by metric:\n%s\nwant sim.loss with sparkline \"  █▁\", last -2, min -2, max 5, p95 -2, count 4", out)
	}
	if strings.Contains(out, "phase") || strings.Contains(out, "99") {
		t.Errorf("view shows a string field or another run:\n%s", out)
	}
	if !strings.Contains(out, "running (no summary yet)") {
		t.Errorf("view of a run without summary:\n%s", out)
	}

	v = NewView("r1", res, []string{"sim"}, true)
	feed(v)
	b.Reset()
	if err := v.Print(&b, 2, t0); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	for _, want := range []string{`(?m)^sim\.loss +n1 +█▁ +-2 +-2 +3 +-2 +3$`, `(?m)^sim\.loss +n2 +▄  +5 +5 +5 +5 +1$`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("view per host:\n%s\nwant a line matching %s", out, want)
		}
	}

	v = NewView("r1", res, []string{"other.metric"}, false)
	feed(v)
	b.Reset()
	if err := v.Print(&b, 2, t0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "waiting for run r1") {
		t.Errorf("view of no wanted metric:\n%s", b.String())
	}
}
