package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/rollup"
)

type runsWatchFlags struct {
	brokers, resolution, summaryTopic string
	metrics                           []string
	interval, since, timeout          time.Duration
	width                             int
	once, exitOnEnd, perHost          bool
	sec                               clientSecFlags
}

// newRunsWatchCmd follows a run's rollups live in a terminal.
func newRunsWatchCmd() *cobra.Command {
	var o runsWatchFlags
	cmd := &cobra.Command{
		Use:   "watch <run>",
		Short: "Follow a run live: per metric a sparkline of its recent rollup windows, last value, min, max, p95",
		Long: `Follow a run from the rollup worker's live topic (rollup_10s, or rollup_1m with
--resolution 1m): one line per metric (measurement.field, over all the run's
series, or per host with --per-host) with a sparkline of the mean of its
recent windows (▁ lowest … █ highest of the windows shown), the last value
(the newest window's last sample; the mean of the hosts' last samples when
several hosts send the metric), the minimum and maximum over every window
read, the newest window's p95 (the highest host's), and the count of
samples. Windows reach the topic once they are final, --allowed-lateness of
the rollup worker after their end, so the newest shown lags the run by that.

The topic is read from its start, or from --since ago (by the windows'
start times), and followed. In a terminal the view is redrawn every
--interval; otherwise one plain snapshot is printed per interval, so the
output can be piped. --once reads what the topic holds now, prints one
snapshot and exits.

Until a window of the run arrives it says it is waiting for the run. Once
the run has ended and the rollup worker has written its summary
(` + "`simtel runs show`" + `), the view shows the run's final state; --exit-on-end then
prints a last snapshot and exits. Only numeric fields are shown.`,
		Example: `  simtel runs watch r42 --brokers broker1:9092
  simtel runs watch r42 --metric reward.value --metric sim.step_time --per-host
  simtel runs watch r42 --resolution 1m --since 2h --exit-on-end
  simtel runs watch r42 --once | grep reward`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "comma-separated broker addresses")
	o.sec.register(f)
	f.StringArrayVar(&o.metrics, "metric", nil, "show only this metric (measurement.field) or measurement; repeatable, or comma-separated")
	f.StringVar(&o.resolution, "resolution", "10s", "window length of the rollup topic read: 10s, 1m or 1h")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "redraw (or print a snapshot) this often")
	f.DurationVar(&o.since, "since", 0, "read the windows that started this long ago or later (0: the whole topic)")
	f.IntVar(&o.width, "width", 0, "windows in a sparkline (0: fit the terminal, 40 when not a terminal)")
	f.BoolVar(&o.perHost, "per-host", false, "one line per metric and host")
	f.BoolVar(&o.once, "once", false, "print one snapshot of what the topic holds now and exit")
	f.BoolVar(&o.exitOnEnd, "exit-on-end", false, "exit once the run's summary says it ended")
	f.StringVar(&o.summaryTopic, "summary-topic", rollup.DefaultSummaryTopic, "the rollup worker's summary topic")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "with --once: give up reading after this long")
	return cmd
}

// run follows the topics and draws until ctx ends, or once.
func (o *runsWatchFlags) run(ctx context.Context, out io.Writer, run string) error {
	res, ok := resolutionNamed(o.resolution)
	if !ok {
		return fmt.Errorf("--resolution %q is not 10s, 1m or 1h", o.resolution)
	}
	if o.interval <= 0 {
		return fmt.Errorf("--interval %v: want a positive duration", o.interval)
	}
	if o.width < 0 {
		return fmt.Errorf("--width %d is negative", o.width)
	}
	opts, err := o.sec.opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(splitList(o.brokers)...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records tell --once that a partition ending with a
		// transaction marker was read to its end.
		kgo.KeepControlRecords(),
	}, opts...)...)
	if err != nil {
		return fmt.Errorf("cannot connect to %s: %w", o.brokers, err)
	}
	defer cl.Close()
	tty := false
	if f, ok := out.(*os.File); ok {
		tty = isTerminal(f)
	}
	w := &runWatch{o: o, run: run, res: res, cl: cl, adm: kadm.NewClient(cl), tty: tty, out: out,
		view: newWatchView(run, res, splitMetrics(o.metrics), o.perHost), pending: map[string]map[int32]int64{}}
	if o.once {
		octx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		if err := w.readOnce(octx); err != nil {
			return fmt.Errorf("cannot read the rollups of run %q from %s within %v: is `simtel broker` running there? (%w)", run, o.brokers, o.timeout, err)
		}
		return w.draw()
	}
	return w.follow(ctx)
}

func resolutionNamed(name string) (rollup.Resolution, bool) {
	for _, r := range rollup.Resolutions {
		if r.Name == name {
			return r, true
		}
	}
	return rollup.Resolution{}, false
}

func splitMetrics(vs []string) []string {
	var out []string
	for _, v := range vs {
		out = append(out, splitList(v)...)
	}
	return out
}

// runWatch reads the rollup topic of one resolution and the run's
// partition of the summary topic with one direct consumer, adding each
// topic's partitions once it exists.
type runWatch struct {
	o       *runsWatchFlags
	run     string
	res     rollup.Resolution
	cl      *kgo.Client
	adm     *kadm.Client
	tty     bool
	out     io.Writer
	view    *watchView
	dec     lineproto.Decoder
	rollups bool // the rollup topic's partitions are consumed
	summary bool // the summary partition is consumed
	// pending (--once) is, per topic and partition, the offset to read
	// up to: the partition's last stable offset when it was attached.
	pending map[string]map[int32]int64
}

// attach starts consuming the topics that exist and are not consumed yet.
func (w *runWatch) attach(ctx context.Context) error {
	if !w.rollups {
		ok, err := w.attachTopic(ctx, w.res.Topic(), func(parts []int32) (map[int32]kgo.Offset, error) {
			offsets := map[int32]kgo.Offset{}
			if w.o.since <= 0 {
				for _, p := range parts {
					offsets[p] = kgo.NewOffset().AtStart()
				}
				return offsets, nil
			}
			// The windows' record timestamps are their starts.
			listed, err := w.adm.ListOffsetsAfterMilli(ctx, time.Now().Add(-w.o.since).UnixMilli(), w.res.Topic())
			if err == nil {
				err = listed.Error()
			}
			if err != nil {
				return nil, fmt.Errorf("cannot find the offsets of %v ago in %s: %w", w.o.since, w.res.Topic(), err)
			}
			listed.Each(func(l kadm.ListedOffset) { offsets[l.Partition] = kgo.NewOffset().At(l.Offset) })
			return offsets, nil
		})
		if err != nil {
			return err
		}
		w.rollups = ok
	}
	if !w.summary {
		ok, err := w.attachTopic(ctx, w.o.summaryTopic, func(parts []int32) (map[int32]kgo.Offset, error) {
			return map[int32]kgo.Offset{rollup.SummaryPartition(w.run, len(parts)): kgo.NewOffset().AtStart()}, nil
		})
		if err != nil {
			return err
		}
		w.summary = ok
	}
	return nil
}

// attachTopic consumes topic from the offsets start chooses, if the topic
// exists; with --once it notes where each partition ends now.
func (w *runWatch) attachTopic(ctx context.Context, topic string, start func([]int32) (map[int32]kgo.Offset, error)) (bool, error) {
	td, err := w.adm.ListTopics(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("cannot describe topic %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return false, nil
	}
	if d.Err != nil || len(d.Partitions) == 0 {
		return false, fmt.Errorf("cannot describe topic %s: %v", topic, d.Err)
	}
	offsets, err := start(d.Partitions.Numbers())
	if err != nil {
		return false, err
	}
	if w.o.once {
		starts, err := w.adm.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return false, fmt.Errorf("cannot list the start offsets of %s: %w", topic, err)
		}
		ends, err := w.adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return false, fmt.Errorf("cannot list the end offsets of %s: %w", topic, err)
		}
		// A partition whose first offset to read (its start, or the
		// offset of --since) is its end has nothing to read; otherwise it
		// is done once a record at end−1 arrives.
		w.pending[topic] = map[int32]int64{}
		for p, o := range offsets {
			from, _ := starts.Lookup(topic, p)
			first := from.Offset
			if at := o.EpochOffset().Offset; at >= 0 {
				first = max(first, at)
			}
			if end, _ := ends.Lookup(topic, p); end.Offset > first {
				w.pending[topic][p] = end.Offset
			}
		}
	}
	w.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	return true, nil
}

// readOnce reads every partition up to where it ended when attached.
func (w *runWatch) readOnce(ctx context.Context) error {
	if err := w.attach(ctx); err != nil {
		return err
	}
	for w.left() > 0 {
		if err := w.poll(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (w *runWatch) left() int {
	n := 0
	for _, ps := range w.pending {
		n += len(ps)
	}
	return n
}

// poll adds one poll's records to the view.
func (w *runWatch) poll(ctx context.Context) error {
	fs := w.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		ferr = fmt.Errorf("cannot read partition %d of %s: %w", p, t, err)
	})
	if ferr != nil {
		return ferr
	}
	fs.EachRecord(func(r *kgo.Record) {
		if end, ok := w.pending[r.Topic][r.Partition]; ok && r.Offset+1 >= end {
			delete(w.pending[r.Topic], r.Partition)
		}
		if r.Attrs.IsControl() {
			return
		}
		if r.Topic == w.o.summaryTopic {
			w.view.summary.Add(r.Key, r.Value)
			return
		}
		if r.Value == nil {
			return
		}
		if l, err := rollup.ParseWindowLine(&w.dec, r.Value); err == nil {
			w.view.add(l)
		}
	})
	return nil
}

// follow polls and draws every interval until ctx ends or, with
// --exit-on-end, the run's summary arrives.
func (w *runWatch) follow(ctx context.Context) error {
	// The first snapshot after one interval of reading, not an empty one.
	next := time.Now().Add(w.o.interval)
	for {
		if !w.rollups || !w.summary {
			if err := w.attach(ctx); err != nil && ctx.Err() == nil {
				return fmt.Errorf("cannot follow the rollups of run %q on %s: %w", w.run, w.o.brokers, err)
			}
		}
		if !time.Now().Before(next) {
			if err := w.draw(); err != nil {
				return err
			}
			if w.o.exitOnEnd && w.view.ended() {
				return nil
			}
			next = time.Now().Add(w.o.interval)
		}
		pctx, cancel := context.WithDeadline(ctx, next)
		err := w.poll(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil // interrupted: the last snapshot stays on screen
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

// draw prints a snapshot: in a terminal over the previous one.
func (w *runWatch) draw() error {
	width := w.o.width
	if width == 0 {
		width = 40
		if f, ok := w.out.(*os.File); ok && w.tty {
			if cols, _, err := term.GetSize(int(f.Fd())); err == nil {
				// Room for the other columns (about 70 characters).
				width = min(max(cols-70, 10), 240)
			}
		}
	}
	var b strings.Builder
	if w.tty {
		b.WriteString("\x1b[H\x1b[2J")
	}
	if err := w.view.print(&b, width, time.Now()); err != nil {
		return err
	}
	if !w.tty {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w.out, b.String())
	return err
}

// watchView is what a watch shows: per line (metric, or metric and host)
// its recent windows and running figures, and the run's summary.
type watchView struct {
	run     string
	res     rollup.Resolution
	metrics []string
	perHost bool
	lines   map[watchKey]*watchLine
	newest  int64 // unix ns start of the newest window of any line
	summary *rollup.SummaryLines
}

type watchKey struct{ metric, host string }

// watchLine is one line of the view.
type watchLine struct {
	windows  map[int64]*watchWindow // by window start (unix ns), the recent ones
	count    int64                  // samples over every window read
	min, max float64
	newest   int64
}

// watchWindow is one window of a line, over its series.
type watchWindow struct {
	count   int64
	sum     float64
	p95     float64 // the highest series' p95
	lastSum float64
	lastN   int
	hasP95  bool
}

// keepWindows bounds the windows a line keeps for its sparkline.
const keepWindows = 512

func newWatchView(run string, res rollup.Resolution, metrics []string, perHost bool) *watchView {
	return &watchView{run: run, res: res, metrics: metrics, perHost: perHost, lines: map[watchKey]*watchLine{}, summary: rollup.NewSummaryLines(run)}
}

// wants reports whether the view shows metric (measurement.field).
func (v *watchView) wants(measurement, metric string) bool {
	return len(v.metrics) == 0 || slices.Contains(v.metrics, metric) || slices.Contains(v.metrics, measurement)
}

// add adds one window line of any run.
func (v *watchView) add(l rollup.WindowLine) {
	if l.Tags["run"] != v.run || l.Resolution != v.res {
		return
	}
	start := l.Start.UnixNano()
	for _, f := range l.Fields {
		metric := l.Measurement + "." + f.Field
		if f.Count == 0 || !v.wants(l.Measurement, metric) {
			continue // no finite numeric value, or not asked for
		}
		k := watchKey{metric: metric}
		if v.perHost {
			k.host = l.Tags["host"]
		}
		line := v.lines[k]
		if line == nil {
			line = &watchLine{windows: map[int64]*watchWindow{}, min: math.Inf(1), max: math.Inf(-1)}
			v.lines[k] = line
		}
		line.count += f.Count
		line.min, line.max = min(line.min, f.Min), max(line.max, f.Max)
		if start < line.newest-keepWindows*int64(v.res.Length) {
			continue // too old for the sparkline
		}
		win := line.windows[start]
		if win == nil {
			win = &watchWindow{}
			line.windows[start] = win
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
		if start > line.newest {
			line.newest = start
			for s := range line.windows {
				if s < start-keepWindows*int64(v.res.Length) {
					delete(line.windows, s)
				}
			}
		}
		v.newest = max(v.newest, start)
	}
}

// ended reports whether the run's summary has arrived.
func (v *watchView) ended() bool {
	s, ok, err := v.summary.Summary()
	return err == nil && ok && s.State != ""
}

// print writes the snapshot: a header, the run's state, then a table of
// the lines with sparklines width windows wide, ending at the newest
// window of any line so the lines' sparklines align in time.
func (v *watchView) print(w io.Writer, width int, now time.Time) error {
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
	keys := slices.SortedFunc(maps.Keys(v.lines), func(a, b watchKey) int {
		if c := strings.Compare(a.metric, b.metric); c != 0 {
			return c
		}
		return strings.Compare(a.host, b.host)
	})
	step := int64(v.res.Length)
	for _, k := range keys {
		line := v.lines[k]
		means := make([]float64, width)
		for i := range means {
			means[i] = math.NaN()
			if win := line.windows[v.newest-int64(width-1-i)*step]; win != nil && win.count > 0 {
				means[i] = win.sum / float64(win.count)
			}
		}
		last, p95 := "-", "-"
		if win := line.windows[line.newest]; win != nil {
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
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%d\n", row, sparkline(means), last, fmtFloat(line.min), fmtFloat(line.max), p95, line.count)
	}
	return tw.Flush()
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

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
