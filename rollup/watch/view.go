// Package watch is the live view of a run that `simtel runs watch` shows:
// a Watcher reads the run's windows from a rollup topic and its summary
// from the summary topic, and a View keeps per metric (or per metric and
// host) its recent windows and running figures and prints them as a
// table of sparklines.
package watch

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/simtel/simtel/rollup"
)

// View is what a watch shows: per line (metric, or metric and host) its
// recent windows and running figures, and the run's summary.
type View struct {
	run     string
	res     rollup.Resolution
	metrics []string
	perHost bool
	lines   map[lineKey]*line
	newest  int64 // unix ns start of the newest window of any line
	summary *rollup.SummaryLines
}

type lineKey struct{ metric, host string }

// line is one line of the view.
type line struct {
	windows  map[int64]*window // by window start (unix ns), the recent ones
	count    int64             // samples over every window read
	min, max float64
	newest   int64
}

// window is one window of a line, over its series.
type window struct {
	count   int64
	sum     float64
	p95     float64 // the highest series' p95
	lastSum float64
	lastN   int
	hasP95  bool
}

// keepWindows bounds the windows a line keeps for its sparkline.
const keepWindows = 512

// NewView returns an empty view of run's windows of resolution res.
// metrics, when not empty, are the metrics (measurement.field) or
// measurements shown; perHost makes one line per metric and host.
func NewView(run string, res rollup.Resolution, metrics []string, perHost bool) *View {
	return &View{run: run, res: res, metrics: metrics, perHost: perHost, lines: map[lineKey]*line{}, summary: rollup.NewSummaryLines(run)}
}

// wants reports whether the view shows metric (measurement.field).
func (v *View) wants(measurement, metric string) bool {
	return len(v.metrics) == 0 || slices.Contains(v.metrics, metric) || slices.Contains(v.metrics, measurement)
}

// Add adds one window line of any run; lines of other runs and
// resolutions are left out.
func (v *View) Add(l rollup.WindowLine) {
	if l.Tags["run"] != v.run || l.Resolution != v.res {
		return
	}
	start := l.Start.UnixNano()
	for _, f := range l.Fields {
		metric := l.Measurement + "." + f.Field
		if f.Count == 0 || !v.wants(l.Measurement, metric) {
			continue // no finite numeric value, or not asked for
		}
		k := lineKey{metric: metric}
		if v.perHost {
			k.host = l.Tags["host"]
		}
		ln := v.lines[k]
		if ln == nil {
			ln = &line{windows: map[int64]*window{}, min: math.Inf(1), max: math.Inf(-1)}
			v.lines[k] = ln
		}
		ln.count += f.Count
		ln.min, ln.max = min(ln.min, f.Min), max(ln.max, f.Max)
		if start < ln.newest-keepWindows*int64(v.res.Length) {
			continue // too old for the sparkline
		}
		win := ln.windows[start]
		if win == nil {
			win = &window{}
			ln.windows[start] = win
		}
		win.count += f.Count
		win.sum += f.Sum
		if !math.IsNaN(f.P95) && (!win.hasP95 || f.P95 > win.p95) {
			win.p95, win.hasP95 = f.P95, true
		}
		if last, ok := f.Last.(float64); ok {
			win.lastSum += last
			win.lastN++
		}
		if start > ln.newest {
			ln.newest = start
			for s := range ln.windows {
				if s < start-keepWindows*int64(v.res.Length) {
					delete(ln.windows, s)
				}
			}
		}
		v.newest = max(v.newest, start)
	}
}

// AddSummary adds one record of the run's summary partition.
func (v *View) AddSummary(key, value []byte) { v.summary.Add(key, value) }

// Ended reports whether the run's summary has arrived.
func (v *View) Ended() bool {
	s, ok, err := v.summary.Summary()
	return err == nil && ok && s.State != ""
}

// Print writes the snapshot: a header, the run's state, then a table of
// the lines with sparklines width windows wide, ending at the newest
// window of any line so the lines' sparklines align in time.
func (v *View) Print(w io.Writer, width int, now time.Time) error {
	fmt.Fprintf(w, "run %s · %s windows · %s\n", v.run, v.res.Name, now.UTC().Format(time.RFC3339))
	s, ok, err := v.summary.Summary()
	switch {
	case err != nil:
		fmt.Fprintf(w, "summary: cannot read it: %v\n", err)
	case ok:
		fmt.Fprintf(w, "ended: %s", dash(s.State))
		if s.ExitCode != nil {
			fmt.Fprintf(w, ", exit %d", *s.ExitCode)
		}
		if s.WallTime > 0 {
			fmt.Fprintf(w, ", wall time %s", time.Duration(s.WallTime*float64(time.Second)).Round(time.Second))
		}
		if len(s.Nodes) > 0 {
			fmt.Fprintf(w, ", nodes %s", strings.Join(s.Nodes, ","))
		}
		fmt.Fprintf(w, " (summary: simtel runs show %s)\n", v.run)
	default:
		fmt.Fprintln(w, "running (no summary yet)")
	}
	if len(v.lines) == 0 {
		fmt.Fprintf(w, "waiting for run %s: no window of it on %s yet\n", v.run, v.res.Topic())
		return nil
	}
	fmt.Fprintf(w, "newest window %s\n\n", time.Unix(0, v.newest).UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "METRIC\t"
	if v.perHost {
		header += "HOST\t"
	}
	fmt.Fprintln(tw, header+"RECENT\tLAST\tMIN\tMAX\tP95\tCOUNT")
	keys := slices.SortedFunc(maps.Keys(v.lines), func(a, b lineKey) int {
		if c := strings.Compare(a.metric, b.metric); c != 0 {
			return c
		}
		return strings.Compare(a.host, b.host)
	})
	step := int64(v.res.Length)
	for _, k := range keys {
		ln := v.lines[k]
		means := make([]float64, width)
		for i := range means {
			means[i] = math.NaN()
			if win := ln.windows[v.newest-int64(width-1-i)*step]; win != nil && win.count > 0 {
				means[i] = win.sum / float64(win.count)
			}
		}
		last, p95 := "-", "-"
		if win := ln.windows[ln.newest]; win != nil {
			if win.lastN > 0 {
				last = fmtFloat(win.lastSum / float64(win.lastN))
			}
			if win.hasP95 {
				p95 = fmtFloat(win.p95)
			}
		}
		row := k.metric + "\t"
		if v.perHost {
			row += dash(k.host) + "\t"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%d\n", row, sparkline(means), last, fmtFloat(ln.min), fmtFloat(ln.max), p95, ln.count)
	}
	return tw.Flush()
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// dash is s, or "-" for an empty value.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sparkBlocks are the sparkline's levels, lowest first.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws vs scaled between their lowest and highest finite
// value; a NaN or infinite value (no window) is a space, and a series
// whose finite values are all equal is drawn at mid height, so a flat
// line shows as data rather than as the minimum.
func sparkline(vs []float64) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	out := make([]rune, len(vs))
	top := len(sparkBlocks) - 1
	for i, v := range vs {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			out[i] = ' '
		case hi == lo:
			out[i] = sparkBlocks[top/2]
		default:
			out[i] = sparkBlocks[int(math.Round((v-lo)/(hi-lo)*float64(top)))]
		}
	}
	return string(out)
}
