package replay

import (
	"container/heap"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
)

// DefaultTopic is the telemetry topic the sink reads.
const DefaultTopic = "telemetry"

// Config selects what a replay reads.
type Config struct {
	// Run is the run to replay; empty replays every run (backfill).
	Run string
	// Topic is the telemetry topic (default DefaultTopic): the lake objects
	// written from it and, with Brokers, its unflushed tail.
	Topic string
	// From and To bound sample time to [From, To); zero: unbounded.
	From, To time.Time
	// FromStep, when set, starts at the first sample time at which any
	// sample of the run has a step (tag or field, compared as a number)
	// of at least *FromStep. It replaces From.
	FromStep *float64
	// Measurements restricts the replay to these; empty: all but the
	// rollup worker's output (the measurements of the lake's namespaces,
	// rollup_1m.cpu or summary.runs: query.Namespaces), which would come
	// back as samples, and be rolled up again, if a replay sent them into
	// the telemetry topic. Name them here to replay them anyway.
	Measurements []string
	// Brokers, when not empty, are read for the records after the lake's
	// last committed offset of every partition.
	Brokers []string
	// ClientOpts are extra franz-go options of the clients reading the
	// brokers (TLS, SASL).
	ClientOpts []kgo.Opt
	// Logger receives progress and warnings; nil discards them.
	Logger *slog.Logger
	// Engine configures the query engine (logger, progress of downloads).
	Engine query.Options
}

func (c *Config) defaults() {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Replay is a prepared replay: the lake part is open, the broker tail (if
// any) read. Call Run once, then Close.
type Replay struct {
	cfg   Config
	eng   *query.Engine
	last  map[int32]int64 // lake's last committed offset per partition of cfg.Topic
	tail  []Sample        // broker records after the lake, sorted
	lake  []*lakeStream
	total int64
	from  int64 // Unix ns, inclusive; math.MinInt64 when unbounded
	to    int64 // Unix ns, exclusive
	stats Stats
}

// Stats count what a running replay emitted; safe to read concurrently
// (metrics, progress).
type Stats struct {
	Lake     atomic.Int64 // samples emitted from the lake
	Broker   atomic.Int64 // samples emitted from the broker tail
	LastTime atomic.Int64 // Unix ns of the last sample emitted
}

// Stats returns the replay's live counters.
func (r *Replay) Stats() *Stats { return &r.stats }

// Open prepares a replay from the catalog snapshot snap: it opens a query
// engine over the selected telemetry objects (fetching them through
// cache), resolves FromStep, and reads the broker tail when cfg.Brokers is
// set.
func Open(ctx context.Context, snap *catalog.Snapshot, cache query.Fetcher, cfg Config) (*Replay, error) {
	cfg.defaults()
	r := &Replay{cfg: cfg, from: minInt64, to: maxInt64, last: lastOffsets(snap, cfg.Topic)}
	if !cfg.From.IsZero() {
		r.from = cfg.From.UnixNano()
	}
	if !cfg.To.IsZero() {
		r.to = cfg.To.UnixNano()
	}
	f := query.Filter{Run: cfg.Run, Topic: cfg.Topic, Measurements: cfg.Measurements, NoRaw: true}
	pruned := f
	pruned.From, pruned.To = cfg.From, cfg.To
	if cfg.FromStep != nil {
		pruned.From = time.Time{} // the step decides where to start
	}
	objs := slices.DeleteFunc(query.Select(snap, pruned), func(o catalog.Object) bool { return !cfg.wants(o.Measurement) })
	eo := cfg.Engine
	eo.NoHivePartitioning = true // the files' own run column, not the path's
	eng, err := query.OpenObjects(ctx, objs, cache, query.Filter{}, eo)
	if err != nil {
		return nil, err
	}
	r.eng = eng
	if len(cfg.Brokers) > 0 {
		if r.tail, err = r.readTail(ctx); err != nil {
			r.Close()
			return nil, err
		}
	}
	if cfg.FromStep != nil {
		from, ok, err := r.stepStart(ctx, *cfg.FromStep)
		if err != nil {
			r.Close()
			return nil, err
		}
		if !ok {
			r.Close()
			return nil, fmt.Errorf("no sample of run %q has a step of %v or more", cfg.Run, *cfg.FromStep)
		}
		r.from = max(r.from, from)
	}
	r.tail = slices.DeleteFunc(r.tail, func(s Sample) bool { return !r.keep(&s) })
	r.total = int64(len(r.tail))
	for _, v := range eng.Views() {
		ls, err := r.openLake(ctx, v)
		if err != nil {
			r.Close()
			return nil, err
		}
		if ls != nil {
			r.lake = append(r.lake, ls)
			r.total += ls.count
		}
	}
	return r, nil
}

const (
	minInt64 = -1 << 63
	maxInt64 = 1<<63 - 1
)

// lastOffsets is the highest committed offset of every partition of topic.
func lastOffsets(snap *catalog.Snapshot, topic string) map[int32]int64 {
	last := map[int32]int64{}
	for _, e := range snap.Entries {
		if e.Topic != topic {
			continue
		}
		if l, ok := last[e.Partition]; !ok || e.LastOffset > l {
			last[e.Partition] = e.LastOffset
		}
	}
	return last
}

// Total is the number of samples Run will emit.
func (r *Replay) Total() int64 { return r.total }

// Close releases the query engine and open results.
func (r *Replay) Close() error {
	var errs []error
	for _, ls := range r.lake {
		if ls.rows != nil {
			errs = append(errs, ls.rows.Close())
		}
	}
	errs = append(errs, r.eng.Close())
	return errors.Join(errs...)
}

// Run calls emit for every sample in order. The sample passed to emit is
// reused after emit returns. An error from emit stops the replay.
func (r *Replay) Run(ctx context.Context, emit func(*Sample) error) error {
	h := &mergeHeap{}
	for _, ls := range r.lake {
		ok, err := ls.next()
		if err != nil {
			return err
		}
		if ok {
			h.items = append(h.items, ls)
		}
	}
	if len(r.tail) > 0 {
		h.items = append(h.items, &sliceStream{samples: r.tail})
	}
	heap.Init(h)
	var prev Sample
	havePrev := false
	for h.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		top := h.items[0]
		s := top.current()
		if havePrev && !Less(&prev, s) {
			return fmt.Errorf("replay out of order or duplicated at partition %d offset %d (after partition %d offset %d): the lake holds this record twice", s.Partition, s.Offset, prev.Partition, prev.Offset)
		}
		prev.Time, prev.Partition, prev.Offset, havePrev = s.Time, s.Partition, s.Offset, true
		if err := emit(s); err != nil {
			return err
		}
		if _, fromTail := top.(*sliceStream); fromTail {
			r.stats.Broker.Add(1)
		} else {
			r.stats.Lake.Add(1)
		}
		r.stats.LastTime.Store(prev.Time)
		ok, err := top.next()
		if err != nil {
			return err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	return nil
}

// stream is one ordered source of samples.
type stream interface {
	current() *Sample
	next() (bool, error)
}

type mergeHeap struct{ items []stream }

func (h *mergeHeap) Len() int           { return len(h.items) }
func (h *mergeHeap) Less(i, j int) bool { return Less(h.items[i].current(), h.items[j].current()) }
func (h *mergeHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *mergeHeap) Push(x any)         { h.items = append(h.items, x.(stream)) }
func (h *mergeHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

type sliceStream struct {
	samples []Sample
	i       int
}

func (s *sliceStream) current() *Sample { return &s.samples[s.i] }
func (s *sliceStream) next() (bool, error) {
	if s.i+1 >= len(s.samples) {
		return false, nil
	}
	s.i++
	return true, nil
}

// lakeStream reads one measurement's rows in order.
type lakeStream struct {
	eng     *query.Engine
	view    query.View
	rows    *sql.Rows
	cols    []lakeCol
	vals    []any
	ptrs    []any
	count   int64
	cur     Sample
	started bool
}

type lakeCol struct {
	name string
	tag  bool
}

func (r *Replay) where() string {
	var conds []string
	if r.from != minInt64 {
		conds = append(conds, "_time_ns >= "+strconv.FormatInt(r.from, 10))
	}
	if r.to != maxInt64 {
		conds = append(conds, "_time_ns < "+strconv.FormatInt(r.to, 10))
	}
	switch r.cfg.Run {
	case "":
	case lake.NoValue:
		conds = append(conds, "run IS NULL")
	default:
		// Objects of a run hold only its samples; this guards against an
		// object listed under the wrong run.
		conds = append(conds, "run = "+query.Literal(r.cfg.Run))
	}
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

func (r *Replay) openLake(ctx context.Context, v query.View) (*lakeStream, error) {
	tags, err := query.TagColumns(ctx, r.eng, v)
	if err != nil {
		return nil, fmt.Errorf("cannot tell tags from fields in measurement %s: %w", v.Name, err)
	}
	ls := &lakeStream{eng: r.eng, view: v}
	sel := []string{"_time_ns", "_partition", "_offset"}
	hasRun := false
	for _, c := range v.Columns {
		switch c.Name {
		case "time", "_time_ns", "_partition", "_offset":
			continue
		case "run":
			hasRun = true
		}
		ls.cols = append(ls.cols, lakeCol{name: c.Name, tag: tags[c.Name]})
		sel = append(sel, query.Ident(c.Name))
	}
	where := r.where()
	if r.cfg.Run != "" && r.cfg.Run != lake.NoValue && !hasRun {
		return nil, nil // no sample of this measurement carries a run tag
	}
	if err := r.eng.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+query.Ident(v.Name)+where).Scan(&ls.count); err != nil {
		return nil, r.eng.Explain(fmt.Errorf("cannot count the rows of %s: %w", v.Name, err))
	}
	if ls.count == 0 {
		return nil, nil
	}
	rows, err := r.eng.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+query.Ident(v.Name)+where+" ORDER BY _time_ns, _partition, _offset")
	if err != nil {
		return nil, err
	}
	ls.rows = rows
	ls.vals = make([]any, len(sel))
	ls.ptrs = make([]any, len(sel))
	for i := range ls.vals {
		ls.ptrs[i] = &ls.vals[i]
	}
	return ls, nil
}

func (ls *lakeStream) current() *Sample { return &ls.cur }

func (ls *lakeStream) next() (bool, error) {
	if !ls.rows.Next() {
		if err := ls.rows.Err(); err != nil {
			return false, ls.eng.Explain(fmt.Errorf("cannot read measurement %s: %w", ls.view.Name, err))
		}
		return false, nil
	}
	clear(ls.vals)
	if err := ls.rows.Scan(ls.ptrs...); err != nil {
		return false, fmt.Errorf("cannot read a row of measurement %s: %w", ls.view.Name, err)
	}
	s := &ls.cur
	t, ok1 := ls.vals[0].(int64)
	p, ok2 := ls.vals[1].(int32)
	o, ok3 := ls.vals[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return false, fmt.Errorf("measurement %s has a row without _time_ns, _partition or _offset (%v): not an object written by the sink", ls.view.Name, ls.vals[:3])
	}
	s.Measurement, s.Time, s.Partition, s.Offset = ls.view.Measurement, t, p, o
	if s.Tags == nil {
		s.Tags, s.Fields = map[string]string{}, map[string]any{}
	}
	clear(s.Tags)
	clear(s.Fields)
	for i, c := range ls.cols {
		v := ls.vals[i+3]
		if v == nil {
			continue
		}
		if c.tag {
			str, ok := v.(string)
			if !ok {
				return false, fmt.Errorf("measurement %s: tag column %s holds %T", ls.view.Name, c.name, v)
			}
			s.Tags[c.name] = str
			continue
		}
		switch x := v.(type) {
		case float64, int64, uint64, bool, string:
			s.Fields[c.name] = x
		case float32:
			s.Fields[c.name] = float64(x)
		case int32:
			s.Fields[c.name] = int64(x)
		default:
			return false, fmt.Errorf("measurement %s: field column %s has type %T, which line protocol cannot carry", ls.view.Name, c.name, v)
		}
	}
	return true, nil
}

// stepStart finds the first sample time at which any sample of the run has
// a step of at least s.
func (r *Replay) stepStart(ctx context.Context, s float64) (int64, bool, error) {
	var best int64
	found := false
	for _, v := range r.eng.Views() {
		if !slices.ContainsFunc(v.Columns, func(c query.Column) bool { return c.Name == "step" }) {
			continue
		}
		where := r.where()
		cond := "TRY_CAST(step AS DOUBLE) >= " + strconv.FormatFloat(s, 'g', -1, 64)
		if where == "" {
			where = " WHERE " + cond
		} else {
			where += " AND " + cond
		}
		var t sql.NullInt64
		if err := r.eng.DB().QueryRowContext(ctx, "SELECT min(_time_ns) FROM "+query.Ident(v.Name)+where).Scan(&t); err != nil {
			return 0, false, r.eng.Explain(fmt.Errorf("cannot find step %v in %s: %w", s, v.Name, err))
		}
		if t.Valid && (!found || t.Int64 < best) {
			best, found = t.Int64, true
		}
	}
	for i := range r.tail {
		tl := &r.tail[i]
		if tl.Time < r.from || tl.Time >= r.to || (found && tl.Time >= best) {
			continue
		}
		if stepAtLeast(tl, s) {
			best, found = tl.Time, true
		}
	}
	return best, found, nil
}

// keep reports whether a broker sample belongs to the replay.
func (r *Replay) keep(s *Sample) bool {
	if s.Time < r.from || s.Time >= r.to {
		return false
	}
	return r.cfg.wants(s.Measurement)
}

// wants reports whether the replay reads measurement m: one of
// Measurements, or with none named, any measurement but the rollups'
// and the run summaries'.
func (c *Config) wants(m string) bool {
	if len(c.Measurements) > 0 {
		return slices.Contains(c.Measurements, m)
	}
	_, _, derived := query.Namespaced(m)
	return !derived
}

// stepAtLeast reports whether a sample's step tag or field is a number of
// at least min.
func stepAtLeast(s *Sample, min float64) bool {
	if v, ok := s.Tags["step"]; ok {
		f, err := strconv.ParseFloat(v, 64)
		return err == nil && f >= min
	}
	switch v := s.Fields["step"].(type) {
	case float64:
		return v >= min
	case int64:
		return float64(v) >= min
	case uint64:
		return float64(v) >= min
	case string:
		f, err := strconv.ParseFloat(v, 64)
		return err == nil && f >= min
	}
	return false
}
