package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/metricsrv"
)

// Watcher is the scheduler loop (`simtel scheduler`): it folds every event
// on JobsTopic, from the beginning, reads RunsTopic alongside, and writes
// a run to RunsTopic whenever the newest record there is not the fold. The
// hooks refresh the cache themselves; the watcher repairs what they could
// not (a hook that timed out, a broker that was away) and keeps the cache
// complete under any interleaving. A cache record only ever holds the fold
// of real events, so the watcher merges each one it reads into its own
// fold (Merge is a join): it never writes a run back to an older state,
// even while it lags behind a hook.
//
// One goroutine runs the loop (Run); the HTTP server, when configured, has
// its own, owned and waited for by Run.
type Watcher struct {
	cfg WatchConfig
	reg *Registry
	m   *watchMetrics

	mu struct {
		sync.Mutex
		runs  map[string]Run
		dirty map[string]bool
	}
}

// WatchConfig configures a Watcher.
type WatchConfig struct {
	Config
	// WriteInterval is how often changed runs are written. Default 1s.
	WriteInterval time.Duration
	// HTTPListen serves /metrics, /healthz and /readyz ("" = off).
	HTTPListen string
}

// NewWatcher validates cfg and prepares a Watcher; nothing is contacted
// until Run.
func NewWatcher(cfg WatchConfig) (*Watcher, error) {
	if err := cfg.Config.Validate(); err != nil {
		return nil, err
	}
	if cfg.WriteInterval <= 0 {
		cfg.WriteInterval = time.Second
	}
	reg, err := Open(cfg.Config)
	if err != nil {
		return nil, err
	}
	w := &Watcher{cfg: cfg, reg: reg}
	w.mu.runs = map[string]Run{}
	w.mu.dirty = map[string]bool{}
	w.m = newWatchMetrics(w)
	return w, nil
}

// Run folds and writes until ctx ends, then writes what is pending (within
// 5 s) and returns. It returns an error only when it cannot start.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.reg.Close()
	log := w.cfg.Logger
	var wg sync.WaitGroup
	defer wg.Wait()
	if w.cfg.HTTPListen != "" {
		stop, err := metricsrv.Start(w.cfg.HTTPListen, w.m.reg, log, func(mux *http.ServeMux) {
			mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ready\n")) })
		})
		if err != nil {
			return fmt.Errorf("cannot listen on %s for /metrics: %w", w.cfg.HTTPListen, err)
		}
		defer stop()
	}

	// Topics first, retrying while the broker is away.
	for {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := EnsureTopics(tctx, w.reg.Client())
		cancel()
		if err == nil {
			break
		}
		log.Warn("scheduler cannot create its topics yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(w.cfg.Brokers...),
		kgo.ConsumeTopics(JobsTopic, RunsTopic),
		kgo.FetchMaxWait(time.Second), // bounds how late a repair can be
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, w.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("cannot create the jobs topic reader: %w", err)
	}
	defer cl.Close()
	log.Info("scheduler started", "brokers", w.cfg.Brokers, "topic", JobsTopic, "cache", RunsTopic)

	next := time.Now().Add(w.cfg.WriteInterval)
	for ctx.Err() == nil {
		pctx, cancel := context.WithDeadline(ctx, next)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				log.Warn("jobs topic fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		fs.EachRecord(w.apply)
		if !time.Now().Before(next) {
			w.writeDirty(ctx)
			next = time.Now().Add(w.cfg.WriteInterval)
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.writeDirty(fctx)
	log.Info("scheduler stopped")
	return nil
}

func (w *Watcher) apply(rec *kgo.Record) {
	if rec.Topic == RunsTopic {
		w.applyCached(rec)
		return
	}
	e, err := DecodeEvent(rec.Value)
	if err != nil {
		w.m.invalid.Inc()
		w.cfg.Logger.Warn("skipping undecodable job event", "partition", rec.Partition, "offset", rec.Offset, "err", err)
		return
	}
	w.m.events.WithLabelValues(e.Type).Inc()
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := runIn(w.mu.runs, e.Run)
	n := Apply(old, e)
	if !ok || !runEqual(old, n) {
		w.mu.runs[e.Run] = n
		w.mu.dirty[e.Run] = true
	}
}

// applyCached takes in a record of the cache: what it knows that the fold
// lacks is merged in; if the fold knows more, the run is written again.
func (w *Watcher) applyCached(rec *kgo.Record) {
	if rec.Value == nil {
		return // tombstone
	}
	r, err := DecodeRun(rec.Value)
	if err != nil {
		w.m.invalid.Inc()
		w.cfg.Logger.Warn("skipping undecodable run record", "partition", rec.Partition, "offset", rec.Offset, "err", err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	cur, _ := runIn(w.mu.runs, r.Run)
	n := Merge(cur, r)
	w.mu.runs[r.Run] = n
	if runEqual(n, r) {
		delete(w.mu.dirty, r.Run) // the newest record is the fold
	} else {
		w.mu.dirty[r.Run] = true
	}
}

// writeDirty writes every changed run; a failed write stays dirty.
func (w *Watcher) writeDirty(ctx context.Context) {
	w.mu.Lock()
	var todo []Run
	for id := range w.mu.dirty {
		todo = append(todo, w.mu.runs[id])
	}
	w.mu.Unlock()
	for _, r := range todo {
		if err := writeRun(ctx, w.reg.Client(), r); err != nil {
			w.m.writeErrors.Inc()
			w.cfg.Logger.Warn("cannot write run to the registry; will retry", "run", r.Run, "err", err)
			continue
		}
		w.m.writes.Inc()
		w.mu.Lock()
		if cur := w.mu.runs[r.Run]; runEqual(cur, r) {
			delete(w.mu.dirty, r.Run)
		}
		w.mu.Unlock()
	}
}

// Runs returns the watcher's current fold, sorted by run.
func (w *Watcher) Runs() []Run {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[string]Run, len(w.mu.runs))
	for k, v := range w.mu.runs {
		m[k] = v
	}
	return sortedRuns(m)
}

func runEqual(a, b Run) bool {
	return a.Run == b.Run && a.JobID == b.JobID && a.User == b.User && a.Name == b.Name &&
		slices.Equal(a.Nodes, b.Nodes) && slices.Equal(a.NodesUp, b.NodesUp) && slices.Equal(a.NodesDown, b.NodesDown) &&
		a.Submitted.Equal(b.Submitted) && a.Started.Equal(b.Started) && a.Ended.Equal(b.Ended) &&
		a.State == b.State && ExitStatus(a.ExitCode) == ExitStatus(b.ExitCode) && a.Reason == b.Reason && a.Source == b.Source
}

type watchMetrics struct {
	reg         *prometheus.Registry
	events      *prometheus.CounterVec
	invalid     prometheus.Counter
	writes      prometheus.Counter
	writeErrors prometheus.Counter
}

var descRuns = prometheus.NewDesc("simtel_scheduler_runs", "Runs known to the scheduler, by state.", []string{"state"}, nil)
var descDirty = prometheus.NewDesc("simtel_scheduler_runs_unwritten", "Runs whose newest fold is not yet on the runs topic.", nil, nil)

type runsCollector struct{ w *Watcher }

func (c runsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descRuns; ch <- descDirty }

func (c runsCollector) Collect(ch chan<- prometheus.Metric) {
	c.w.mu.Lock()
	by := map[string]int{StatePending: 0, StateRunning: 0, StateCompleted: 0, StateFailed: 0, StateCancelled: 0}
	for _, r := range c.w.mu.runs {
		by[r.State]++
	}
	dirty := len(c.w.mu.dirty)
	c.w.mu.Unlock()
	for s, n := range by {
		ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(n), s)
	}
	ch <- prometheus.MustNewConstMetric(descDirty, prometheus.GaugeValue, float64(dirty))
}

func newWatchMetrics(w *Watcher) *watchMetrics {
	m := &watchMetrics{reg: prometheus.NewRegistry()}
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_scheduler_events_total", Help: "Job events folded, by type."}, []string{"type"})
	m.invalid = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_scheduler_invalid_events_total", Help: "Records on the jobs topic that are not valid job events (skipped)."})
	m.writes = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_scheduler_run_writes_total", Help: "Runs written to the runs topic."})
	m.writeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_scheduler_run_write_errors_total", Help: "Failed writes to the runs topic (retried)."})
	m.reg.MustRegister(m.events, m.invalid, m.writes, m.writeErrors, runsCollector{w},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
