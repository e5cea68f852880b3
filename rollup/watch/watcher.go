package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/rollup"
)

// ClientOpts are the options a Watcher's client needs besides its seeds:
// it reads committed records only, and keeps control records because they
// tell ReadOnce that a partition ending with a transaction marker was
// read to its end.
func ClientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}
}

// Config is what a Watcher reads and how it draws.
type Config struct {
	// Run is the run watched; Resolution the rollup topic read.
	Run        string
	Resolution rollup.Resolution
	// SummaryTopic is the rollup worker's summary topic.
	SummaryTopic string
	// Since reads the windows that started this long ago or later (0:
	// the whole topic).
	Since time.Duration
	// Interval is how often Follow draws.
	Interval time.Duration
	// ExitOnEnd makes Follow return once the run's summary arrived.
	ExitOnEnd bool
	// Width is the windows in a sparkline (0: fit the terminal, 40 when
	// not one).
	Width int
	// TTY draws each snapshot over the previous one.
	TTY bool
	// Source names where the topics are read from (the brokers), for
	// errors.
	Source string
}

// Watcher reads the rollup topic of one resolution and the run's
// partition of the summary topic with one direct consumer, adding each
// topic's partitions once it exists, into its View.
type Watcher struct {
	cfg     Config
	cl      *kgo.Client
	adm     *kadm.Client
	out     io.Writer
	view    *View
	dec     lineproto.Decoder
	rollups bool // the rollup topic's partitions are consumed
	summary bool // the summary partition is consumed
	// once is set by ReadOnce: attaching a topic notes where it ends.
	once bool
	// pending (ReadOnce) is, per topic and partition, the offset to read
	// up to: the partition's last stable offset when it was attached.
	pending map[string]map[int32]int64
}

// New returns a Watcher reading with cl (made with ClientOpts) into view
// and drawing to out.
func New(cl *kgo.Client, view *View, cfg Config, out io.Writer) *Watcher {
	return &Watcher{cfg: cfg, cl: cl, adm: kadm.NewClient(cl), out: out, view: view, pending: map[string]map[int32]int64{}}
}

// attach starts consuming the topics that exist and are not consumed yet.
func (w *Watcher) attach(ctx context.Context) error {
	if !w.rollups {
		topic := w.cfg.Resolution.Topic()
		ok, err := w.attachTopic(ctx, topic, func(parts []int32) (map[int32]kgo.Offset, error) {
			offsets := map[int32]kgo.Offset{}
			if w.cfg.Since <= 0 {
				for _, p := range parts {
					offsets[p] = kgo.NewOffset().AtStart()
				}
				return offsets, nil
			}
			// The windows' record timestamps are their starts.
			listed, err := w.adm.ListOffsetsAfterMilli(ctx, time.Now().Add(-w.cfg.Since).UnixMilli(), topic)
			if err == nil {
				err = listed.Error()
			}
			if err != nil {
				return nil, fmt.Errorf("cannot find the offsets of %v ago in %s: %w", w.cfg.Since, topic, err)
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
		ok, err := w.attachTopic(ctx, w.cfg.SummaryTopic, func(parts []int32) (map[int32]kgo.Offset, error) {
			return map[int32]kgo.Offset{rollup.SummaryPartition(w.cfg.Run, len(parts)): kgo.NewOffset().AtStart()}, nil
		})
		if err != nil {
			return err
		}
		w.summary = ok
	}
	return nil
}

// attachTopic consumes topic from the offsets start chooses, if the topic
// exists; for ReadOnce it notes where each partition ends now.
func (w *Watcher) attachTopic(ctx context.Context, topic string, start func([]int32) (map[int32]kgo.Offset, error)) (bool, error) {
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
	if w.once {
		if err := w.notePending(ctx, topic, offsets); err != nil {
			return false, err
		}
	}
	w.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	return true, nil
}

// notePending records, for the partitions of topic read from offsets,
// the offset ReadOnce reads up to.
func (w *Watcher) notePending(ctx context.Context, topic string, offsets map[int32]kgo.Offset) error {
	starts, err := w.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("cannot list the start offsets of %s: %w", topic, err)
	}
	ends, err := w.adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("cannot list the end offsets of %s: %w", topic, err)
	}
	// A partition whose first offset to read (its start, or the offset
	// of Since) is its end has nothing to read; otherwise it is done once
	// a record at end−1 arrives.
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
	return nil
}

// ReadOnce reads every partition up to where it ended when attached.
func (w *Watcher) ReadOnce(ctx context.Context) error {
	w.once = true
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

func (w *Watcher) left() int {
	n := 0
	for _, ps := range w.pending {
		n += len(ps)
	}
	return n
}

// poll adds one poll's records to the view.
func (w *Watcher) poll(ctx context.Context) error {
	fs := w.cl.PollFetches(ctx)
	if err := rollup.PollError(ctx, fs); err != nil {
		return err
	}
	fs.EachRecord(func(r *kgo.Record) {
		if end, ok := w.pending[r.Topic][r.Partition]; ok && r.Offset+1 >= end {
			delete(w.pending[r.Topic], r.Partition)
		}
		if r.Attrs.IsControl() {
			return
		}
		if r.Topic == w.cfg.SummaryTopic {
			w.view.AddSummary(r.Key, r.Value)
			return
		}
		if r.Value == nil {
			return
		}
		if l, err := rollup.ParseWindowLine(&w.dec, r.Value); err == nil {
			w.view.Add(l)
		}
	})
	return nil
}

// Follow polls and draws every Interval until ctx ends or, with
// ExitOnEnd, the run's summary arrives.
func (w *Watcher) Follow(ctx context.Context) error {
	// The first snapshot after one interval of reading, not an empty one.
	next := time.Now().Add(w.cfg.Interval)
	for {
		if !w.rollups || !w.summary {
			if err := w.attach(ctx); err != nil && ctx.Err() == nil {
				return fmt.Errorf("cannot follow the rollups of run %q on %s: %w", w.cfg.Run, w.cfg.Source, err)
			}
		}
		if !time.Now().Before(next) {
			if err := w.Draw(); err != nil {
				return err
			}
			if w.cfg.ExitOnEnd && w.view.Ended() {
				return nil
			}
			next = time.Now().Add(w.cfg.Interval)
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

// Draw prints a snapshot: in a terminal over the previous one.
func (w *Watcher) Draw() error {
	width := w.cfg.Width
	if width == 0 {
		width = 40
		if f, ok := w.out.(*os.File); ok && w.cfg.TTY {
			if cols, _, err := term.GetSize(int(f.Fd())); err == nil {
				// Room for the other columns (about 70 characters).
				width = min(max(cols-70, 10), 240)
			}
		}
	}
	var b strings.Builder
	if w.cfg.TTY {
		b.WriteString("\x1b[H\x1b[2J")
	}
	if err := w.view.Print(&b, width, time.Now()); err != nil {
		return err
	}
	if !w.cfg.TTY {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w.out, b.String())
	return err
}
