package rollup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/fetchpool"
	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/internal/metricsrv"
)

// worker is one Run: the transactional session and the state of its
// partitions. Only the loop goroutine touches it, except mu's fields,
// which kgo's group callbacks set.
type worker struct {
	cfg  Config
	log  *slog.Logger
	m    *metrics
	sess *kgo.GroupTransactSession
	sk   *sketches
	dec  lineproto.Decoder
	// pools recycle the fetched records of the telemetry topic.
	pools fetchpool.Pools
	// lines writes the output lines.
	lines lineWriter
	// slab holds the keys and values of produced records, cut from one
	// allocation; slabs lists the slabs cut from since the last End (slab
	// last), and freeSlabs those whose records are done with, for reuse.
	slab             []byte
	slabs, freeSlabs [][]byte
	// recs are the records themselves, taken the same way from blocks:
	// recs is the block being taken from, recBlocks the blocks taken from
	// since the last End, freeRecBlocks those whose records are done with.
	recs                     []kgo.Record
	recBlocks, freeRecBlocks [][]kgo.Record
	// counts are the per-sample metrics not added to m yet (flushCounts):
	// a counter's atomic add per sample costs as much as a field's
	// aggregate.
	counts struct{ samples, nonfinite int64 }
	// send produces a record in the open transaction.
	send func(ctx context.Context, r *kgo.Record)

	parts    map[int32]*partition // loaded partitions
	series   int                  // series held over all partitions
	inTxn    bool
	txnStart time.Time
	// overflowLogged is when the series cap was last logged.
	overflowLogged time.Time
	overflowSince  int64

	// runs follows the run registry: which runs ended.
	runs *runsFollower
	// merged holds, per loaded partition of PartialTopic, the summary of
	// each run whose partials it received (stage 2, summary.go).
	merged map[int32]map[string]*runAgg
	// summarize lists the runs of merged whose summary changed since the
	// last commit.
	summarize []*runAgg

	mu struct {
		sync.Mutex
		assigned       map[int32]bool // partitions the group gave this worker
		revoked        []int32        // partitions to drop at the next safe point
		partials       map[int32]bool // partitions of PartialTopic the group gave this worker
		revokedPartial []int32
	}
}

// Run consumes cfg.Topic in cfg.Group and produces the rollups of its
// samples to the topics rollup_10s, rollup_1m and rollup_1h, exactly once,
// until ctx ends. It returns nil after a clean shutdown (the open
// transaction committed), or the error that stopped it.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	reg := cfg.Registry
	if reg == nil {
		reg = newRegistry()
	}
	w := &worker{cfg: cfg, log: cfg.Logger, m: newMetrics(reg), sk: newSketches(), parts: map[int32]*partition{}, merged: map[int32]map[string]*runAgg{}}
	w.mu.assigned = map[int32]bool{}
	w.mu.partials = map[int32]bool{}
	if cfg.HTTPListen != "" {
		stop, err := metricsrv.Start(cfg.HTTPListen, reg, w.log, nil)
		if err != nil {
			return fmt.Errorf("rollup: cannot listen on %s for metrics: %w", cfg.HTTPListen, err)
		}
		defer stop()
	}
	if err := w.createTopics(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped while waiting for the input topic: nothing was
			// consumed, so the shutdown is clean.
			return nil
		}
		return err
	}
	runs, err := newRunsFollower(cfg)
	if err != nil {
		return fmt.Errorf("rollup: cannot follow the run registry %s on %v: %w", cfg.RunsTopic, cfg.Brokers, err)
	}
	w.runs = runs
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		runs.follow(fctx)
	}()
	defer func() {
		stopFollow()
		<-followed
	}()
	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.TransactionTimeout(cfg.TxnTimeout),
		kgo.ConsumerGroup(cfg.Group),
		kgo.InstanceID(cfg.TransactionalID),
		kgo.SessionTimeout(15 * time.Second),
		kgo.ConsumeTopics(cfg.Topic, cfg.PartialTopic, cfg.RunsTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(w.onAssigned),
		kgo.OnPartitionsRevoked(w.onRevoked),
		kgo.OnPartitionsLost(w.onRevoked),
		kgo.RecordPartitioner(kgo.BasicConsistentPartitioner(w.partitioner)),
		kgo.WithPools(&w.pools),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.MaxBufferedRecords(1 << 20),
	}, cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("rollup: cannot create the transactional session %s: %w", cfg.TransactionalID, err)
	}
	// InitProducerID now fences a crashed predecessor with the same
	// transactional id: the broker aborts its open transaction at once,
	// instead of after its timeout, so the committed offsets and the
	// state topic's last stable offset are readable right away.
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		sess.Close()
		return fmt.Errorf("rollup: cannot initialize the transactional producer %s on %v: %w", cfg.TransactionalID, cfg.Brokers, err)
	}
	w.sess = sess
	w.send = func(ctx context.Context, r *kgo.Record) { sess.Produce(ctx, r, w.produced) }
	err = w.loop(ctx)
	// The loop may hold a poll's rebalance block (BlockRebalanceOnPoll).
	sess.CloseAllowingRebalance()
	return err
}

// partitioner sends a state record to the state partition of its input
// partition (set on the record), a partial or summary record to a
// partition by its run, so one worker merges a run's partials and one
// partition holds its summary, and an output record to a partition by a
// hash of its key, so a window's amendments replace it under compaction.
func (w *worker) partitioner(topic string) func(*kgo.Record, int) int {
	switch topic {
	case w.cfg.StateTopic:
		return func(r *kgo.Record, _ int) int { return int(r.Partition) }
	case w.cfg.PartialTopic, w.cfg.SummaryTopic:
		return func(r *kgo.Record, n int) int { return runPartition(runOfKey(r.Key), n) }
	}
	return func(r *kgo.Record, n int) int {
		h := fnv.New32a()
		_, _ = h.Write(r.Key)
		return int(h.Sum32() % uint32(n)) //nolint:gosec // n is a partition count
	}
}

func (w *worker) onAssigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range m[w.cfg.Topic] {
		w.mu.assigned[p] = true
	}
	for _, p := range m[w.cfg.PartialTopic] {
		w.mu.partials[p] = true
	}
}

func (w *worker) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range m[w.cfg.Topic] {
		delete(w.mu.assigned, p)
		w.mu.revoked = append(w.mu.revoked, p)
	}
	for _, p := range m[w.cfg.PartialTopic] {
		delete(w.mu.partials, p)
		w.mu.revokedPartial = append(w.mu.revokedPartial, p)
	}
}

// createTopics waits for the input topic and creates the state and output
// topics (compacted) if missing.
func (w *worker) createTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.cfg.Brokers...)}, w.cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("rollup: cannot connect to %v: %w", w.cfg.Brokers, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var n int32
	for waited := false; ; waited = true {
		td, err := adm.ListTopics(ctx, w.cfg.Topic)
		if err == nil {
			if d, ok := td[w.cfg.Topic]; ok && d.Err == nil && len(d.Partitions) > 0 {
				n = int32(len(d.Partitions)) //nolint:gosec // a partition count
				break
			}
		}
		if !waited {
			w.log.Info("waiting for the input topic", "topic", w.cfg.Topic, "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	compact := map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	outParts := n
	if w.cfg.Partitions > 0 {
		outParts = w.cfg.Partitions
	}
	topics := map[string]int32{w.cfg.StateTopic: n, w.cfg.PartialTopic: outParts, w.cfg.SummaryTopic: outParts}
	for _, r := range Resolutions {
		topics[r.Topic()] = outParts
	}
	for _, t := range slices.Sorted(maps.Keys(topics)) {
		resp, err := adm.CreateTopic(ctx, topics[t], -1, compact, t)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("rollup: cannot create topic %s: %w", t, err)
		}
	}
	td, err := adm.ListTopics(ctx, w.cfg.StateTopic)
	if err != nil {
		return fmt.Errorf("rollup: cannot describe the state topic %s: %w", w.cfg.StateTopic, err)
	}
	if got := len(td[w.cfg.StateTopic].Partitions); got < int(n) {
		return fmt.Errorf("rollup: the state topic %s has %d partitions, fewer than the %d of %s: add partitions to it", w.cfg.StateTopic, got, n, w.cfg.Topic)
	}
	return nil
}

// loop is the read-process-write loop. Each transaction holds the output
// windows emitted, the checkpoint of the windows changed and the input
// offsets consumed since the last one: after a crash, or an aborted
// transaction, the state topic and the group's offsets agree, and the
// worker resumes from them.
func (w *worker) loop(ctx context.Context) error {
	for {
		w.dropRevoked()
		if err := w.loadAssigned(ctx); err != nil {
			if ctx.Err() != nil {
				return w.finish()
			}
			return err
		}
		wait := w.cfg.CommitInterval
		if w.inTxn {
			wait = max(time.Millisecond, w.cfg.CommitInterval-time.Since(w.txnStart))
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fs := w.sess.PollRecords(pctx, 10000)
		cancel()
		if ctx.Err() != nil {
			// The session commits the offsets of every polled record,
			// so what this poll returned is processed before the last
			// commit.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.TxnTimeout)
			err := w.process(sctx, fs)
			cancel()
			if err != nil {
				return err
			}
			return w.finish()
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				w.log.Warn("fetch failed", "topic", t, "partition", p, "err", err)
			}
		})
		if err := w.process(ctx, fs); err != nil {
			return err
		}
		w.idle(ctx)
		if w.inTxn && time.Since(w.txnStart) >= w.cfg.CommitInterval {
			// A shutdown that arrives while the transaction ends must not
			// cut the End short: it would leave the transaction neither
			// committed nor aborted and make Run fail; the next loop turn
			// sees the cancel and returns.
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.TxnTimeout)
			err := w.end(ectx)
			cancel()
			if err != nil {
				return err
			}
		}
		if !w.inTxn {
			w.sess.AllowRebalance()
		}
	}
}

// finish commits the open transaction at shutdown.
func (w *worker) finish() error {
	if !w.inTxn {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TxnTimeout)
	defer cancel()
	return w.end(ctx)
}

func (w *worker) begin() error {
	if w.inTxn {
		return nil
	}
	if err := w.sess.Begin(); err != nil {
		return fmt.Errorf("rollup: cannot begin a transaction: %w", err)
	}
	w.inTxn, w.txnStart = true, time.Now()
	return nil
}

// end checkpoints the changed windows and commits the transaction. If the
// transaction aborts (a rebalance, a fenced or failed produce), every
// partition's state is dropped and read back from the state topic, and
// the session rewinds to the committed offsets.
func (w *worker) end(ctx context.Context) error {
	for _, p := range w.parts {
		w.flushRuns(ctx, p)
		w.checkpoint(ctx, p)
	}
	w.emitSummaries(ctx)
	committed, err := w.sess.End(ctx, kgo.TryCommit)
	w.inTxn = false
	w.recordsDone(err == nil)
	if err != nil {
		w.m.txns.WithLabelValues("aborted").Inc()
		return fmt.Errorf("rollup: cannot end the transaction of %s: %w", w.cfg.TransactionalID, err)
	}
	if !committed {
		w.m.txns.WithLabelValues("aborted").Inc()
		w.log.Info("transaction aborted; reading the state back", "transactional_id", w.cfg.TransactionalID)
		w.reset()
		return nil
	}
	w.m.txns.WithLabelValues("committed").Inc()
	return nil
}

// reset forgets every partition's state; loadAssigned reads it back.
func (w *worker) reset() {
	for _, p := range w.parts {
		for _, a := range p.runs {
			a.release(w.sk)
		}
	}
	w.parts = map[int32]*partition{}
	w.merged = map[int32]map[string]*runAgg{}
	w.summarize = nil
	w.series = 0
	w.m.series.Set(0)
}

func (w *worker) dropRevoked() {
	w.mu.Lock()
	revoked, revokedPartial := w.mu.revoked, w.mu.revokedPartial
	w.mu.revoked, w.mu.revokedPartial = nil, nil
	w.mu.Unlock()
	for _, id := range revoked {
		if p, ok := w.parts[id]; ok {
			w.series -= len(p.series)
			for _, a := range p.runs {
				a.release(w.sk)
			}
			delete(w.parts, id)
		}
	}
	for _, id := range revokedPartial {
		delete(w.merged, id)
	}
	w.m.series.Set(float64(w.series))
}

// checkpoint produces the state records of p's windows changed since the
// last checkpoint, the tombstones of its saved windows that closed, and
// its event time.
func (w *worker) checkpoint(ctx context.Context, p *partition) {
	w.flushCounts()
	produce := func(key, value []byte) {
		r := w.record()
		r.Topic, r.Partition, r.Key, r.Value = w.cfg.StateTopic, p.id, key, value
		w.send(ctx, r)
	}
	for _, d := range p.dirty {
		if d.w.closed {
			continue
		}
		win := d.w
		win.dirty = false
		whole := win.parts == 0 || win.parts >= maxParts || int(win.ckptFields) != len(win.fields) || win.ckptInRun != win.inRun
		for i := 0; i < len(win.fields) && !whole; i++ {
			whole = win.fields[i].rebase
		}
		// Keys and values are encoded in the slab, where the record keeps
		// them.
		if whole {
			v := w.cut(appendWindow(w.tail(), d.s, d.res, win))
			produce(w.cut(appendStateKey(w.tail(), d.s.key, d.res, win.start)), v)
			for part := int32(1); part < win.parts; part++ {
				produce(w.cut(appendPartKey(w.tail(), d.s.key, d.res, win.start, part)), nil)
			}
			win.parts = 1
		} else {
			v := w.cut(appendDelta(w.tail(), win))
			produce(w.cut(appendPartKey(w.tail(), d.s.key, d.res, win.start, win.parts)), v)
			win.parts++
		}
		win.ckptFields, win.ckptInRun = int32(len(win.fields)), win.inRun
		for i := range win.fields {
			f := &win.fields[i]
			f.rebase, f.ckpt = false, int32(len(f.pend))
		}
	}
	clear(p.dirty)
	p.dirty = p.dirty[:0]
	for _, k := range p.tombstones {
		produce(k, nil)
	}
	p.tombstones = nil
	for _, c := range p.closedWindows {
		for part := range c.parts {
			produce(w.cut(appendPartKey(w.tail(), c.seriesKey, c.res, c.start, part)), nil)
		}
	}
	clear(p.closedWindows)
	p.closedWindows = p.closedWindows[:0]
	for _, a := range p.runs {
		if a.dirty {
			a.dirty = false
			produce(runStateKey(a.run, ""), appendRunHeader(nil, a))
		}
		for m := range a.dirtyMeas {
			produce(runStateKey(a.run, m), appendRunMeasurement(nil, a, m))
		}
		a.cleanDirty()
	}
	if p.metaDirty {
		produce(metaKey, appendMeta(nil, p))
		p.metaDirty = false
	}
}

// produced logs a failed produce; the session then aborts the transaction
// at End.
func (w *worker) produced(r *kgo.Record, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		w.log.Warn("produce failed; the transaction will abort", "topic", r.Topic, "err", err)
	}
}

// loadAssigned reads back the state of assigned partitions not loaded yet.
func (w *worker) loadAssigned(ctx context.Context) error {
	w.mu.Lock()
	var ids, partials []int32
	for id := range w.mu.assigned {
		if w.parts[id] == nil {
			ids = append(ids, id)
		}
	}
	for id := range w.mu.partials {
		if w.merged[id] == nil {
			partials = append(partials, id)
		}
	}
	w.mu.Unlock()
	if len(partials) > 0 {
		if err := w.loadPartials(ctx, partials); err != nil {
			return err
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return w.load(ctx, ids)
}

// load reads the state partitions ids up to their last stable offset and
// rebuilds their open windows. Called when no transaction of this worker
// wrote to them, so what it reads matches the group's committed offsets.
func (w *worker) load(ctx context.Context, ids []int32) error {
	offsets := map[int32]kgo.Offset{}
	for _, id := range ids {
		offsets[id] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(w.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.cfg.StateTopic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records are how a reader sees that it reached the end
		// when a partition ends with a transaction marker.
		kgo.KeepControlRecords(),
	}, w.cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("rollup: cannot read the state topic %s: %w", w.cfg.StateTopic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, w.cfg.StateTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("rollup: cannot list the end offsets of the state topic %s: %w", w.cfg.StateTopic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, w.cfg.StateTopic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("rollup: cannot list the start offsets of the state topic %s: %w", w.cfg.StateTopic, err)
	}
	now := time.Now().UnixNano()
	pending := map[int32]int64{}
	loaded := map[int32]*partition{}
	for _, id := range ids {
		loaded[id] = newPartition(id, now)
		end, _ := ends.Lookup(w.cfg.StateTopic, id)
		start, _ := starts.Lookup(w.cfg.StateTopic, id)
		if end.Offset > start.Offset {
			pending[id] = end.Offset
		}
	}
	err = readToEnd(ctx, cl, "the state topic "+w.cfg.StateTopic, pending, func(r *kgo.Record) error {
		if err := w.apply(loaded[r.Partition], r); err != nil {
			return fmt.Errorf("rollup: partition %d of the state topic %s at offset %d: %w", r.Partition, r.Topic, r.Offset, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for id, p := range loaded {
		for _, s := range p.series {
			for res := range levels {
				for _, win := range s.open[res] {
					win.dirty = false
				}
			}
		}
		p.metaDirty = false
		for _, a := range p.runs {
			a.dirty = false
			a.cleanDirty()
		}
		w.parts[id] = p
		w.series += len(p.series)
		w.m.loads.Inc()
		w.log.Info("partition state loaded", "partition", id, "series", len(p.series), "runs", len(p.runs), "max_event", p.maxEvent, "closed", p.closed)
	}
	w.m.series.Set(float64(w.series))
	return nil
}

// apply applies one state record to p.
func (w *worker) apply(p *partition, r *kgo.Record) error {
	switch {
	case bytes.Equal(r.Key, metaKey):
		return decodeMeta(r.Value, p)
	case bytes.HasPrefix(r.Key, runKeyPrefix):
		return w.applyRun(p, r)
	case r.Value == nil:
		dropWindow(r.Key, p, w.sk)
		return nil
	case len(r.Value) > 0 && (r.Value[0] == deltaVersion || r.Value[0] == deltaVersionLog):
		return decodeDelta(r.Key, r.Value, p, w.sk)
	}
	_, err := decodeWindow(r.Value, p, w.sk)
	return err
}

// process adds the polled records to their windows.
func (w *worker) process(ctx context.Context, fs kgo.Fetches) error {
	if fs.NumRecords() == 0 {
		return nil
	}
	if err := w.begin(); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	var err error
	fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
		if err != nil || len(ftp.Records) == 0 {
			return
		}
		switch ftp.Topic {
		case w.cfg.PartialTopic:
			err = w.addPartials(ctx, ftp)
			return
		case w.cfg.RunsTopic:
			w.addEndedRuns(ctx, ftp)
			return
		}
		p := w.parts[ftp.Partition]
		if p == nil {
			// Fetched before the assignment callback was seen.
			if err = w.load(ctx, []int32{ftp.Partition}); err != nil {
				return
			}
			p = w.parts[ftp.Partition]
		}
		p.lastArrival = now
		for _, r := range ftp.Records {
			w.add(ctx, p, r)
			// add keeps nothing of the record: its memory goes back to
			// the client for the next fetch (fetchpool).
			r.Recycle()
		}
	})
	w.flushCounts()
	return err
}

// add adds one sample to its 10 s window and closes the windows its time
// makes due.
func (w *worker) add(ctx context.Context, p *partition, r *kgo.Record) {
	// The series key is found before the line's end is read: a record's
	// value is not in the cache yet, and is read from its start. A
	// trailing newline does not move the key's end.
	k := lineproto.SeriesEnd(r.Value)
	var s *series
	if k > 0 {
		s = p.series[string(r.Value[:k])]
	}
	line := r.Value
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	var err error
	if s != nil {
		err = w.dec.DecodeFields(line, k)
	} else {
		err = w.dec.Decode(line)
	}
	if err != nil || k <= 0 {
		w.m.decodeErrors.Inc()
		return
	}
	t := r.Timestamp.UnixNano()
	if w.dec.HasTime {
		t = w.dec.Time
	}
	if t > p.maxEvent {
		p.maxEvent, p.metaDirty = t, true
	}
	tenSec := int64(Resolutions[0].Length)
	start := floorTo(t, tenSec)
	late := start+tenSec <= p.closed
	if s == nil && !late && w.series < w.cfg.MaxSeries {
		s = newSeries(line[:k], &w.dec)
		p.series[s.key] = s
		w.series++
		w.m.series.Set(float64(w.series))
	}
	if late || s == nil {
		// No window takes the sample; its run's aggregate still does.
		w.addToRun(p, s, r.Offset, t)
		if late {
			w.m.late.Inc()
		} else {
			w.overflow()
		}
		return
	}
	win, prev := s.cur, (*window)(nil)
	if win == nil || win.start != start || win.closed {
		prev = win
		// The run's aggregate is made with the first sample of a window
		// not in it yet: a run's aggregate only goes (flushRuns) once its
		// series' open windows are in it, so while the sample's window is
		// not, the aggregate it has is current.
		w.seriesAgg(p, s, r.Offset)
		win = p.windowFor(s, 0, start, len(w.dec.Fields))
		s.cur = win
	} else if !win.dirty {
		p.markDirty(s, 0, win)
	}
	for i := range w.dec.Fields {
		fv := &w.dec.Fields[i]
		f := win.field(fv.Key, i, w.sk)
		if prev != nil && f.pend == nil && f.count == 0 && i < len(prev.fields) && prev.fields[i].name == f.name {
			// A new window of the series: as many values as its last.
			if n := prev.fields[i].count; n > minPending {
				f.pend = w.sk.valsFor(int(min(n, maxPending)))
			}
		}
		if !f.add(fv, t, w.sk) {
			w.counts.nonfinite++
		}
		if !win.inRun && len(fv.Key) == len(PolicyVersionField) && string(fv.Key) == PolicyVersionField {
			if a := w.seriesAgg(p, s, r.Offset); a != nil {
				addPolicyValue(a, fv)
			}
		}
	}
	if win.inRun {
		w.addToSeriesRun(p, s, r.Offset, t)
	}
	w.counts.samples++
	if wm := p.watermark(int64(w.cfg.AllowedLateness), 0, 0); wm > p.closed {
		w.close(ctx, p, wm)
	}
}

// flushCounts adds the counts of the samples processed since the last
// call to the metrics.
func (w *worker) flushCounts() {
	if w.counts.samples > 0 {
		w.m.samples.Add(float64(w.counts.samples))
	}
	if w.counts.nonfinite > 0 {
		w.m.nonfinite.Add(float64(w.counts.nonfinite))
	}
	w.counts.samples, w.counts.nonfinite = 0, 0
}

// slabSize is the allocation the values of produced records are cut from;
// a record's value is encoded in the slab's free space (tail), which a
// slab with less than slabRoom free is replaced for.
const (
	slabSize = 64 << 10
	slabRoom = slabSize / 16
)

// tail returns the slab's free space, empty, for a record's key or value
// to be appended to and then cut: values are cut from a shared slab, so
// producing many small records costs few allocations and no copy; a slab
// is freed once the producer let go of every record cut from it.
func (w *worker) tail() []byte {
	if cap(w.slab)-len(w.slab) < slabRoom {
		if n := len(w.freeSlabs); n > 0 {
			w.slab = w.freeSlabs[n-1]
			w.freeSlabs = w.freeSlabs[:n-1]
		} else {
			w.slab = make([]byte, 0, slabSize)
		}
		w.slabs = append(w.slabs, w.slab)
	}
	return w.slab[len(w.slab):len(w.slab)]
}

// maxFreeSlabs bounds the slabs kept for reuse: a commit interval's
// records at 100,000 samples a second fit.
const maxFreeSlabs = 256

// recBlock is how many records a block holds.
const recBlock = 1024

// record returns a zero record to produce, from a block (tail's way for
// the records themselves): a checkpoint produces a record per changed
// window, and blocks reused after End spare the GC a small object each.
func (w *worker) record() *kgo.Record {
	if len(w.recs) == cap(w.recs) {
		if n := len(w.freeRecBlocks); n > 0 {
			w.recs = w.freeRecBlocks[n-1]
			w.freeRecBlocks = w.freeRecBlocks[:n-1]
		} else {
			w.recs = make([]kgo.Record, 0, recBlock)
		}
		w.recBlocks = append(w.recBlocks, w.recs)
	}
	w.recs = w.recs[:len(w.recs)+1]
	return &w.recs[len(w.recs)-1]
}

// recordsDone is called once no record produced so far is held by the
// client any more: End returned, having flushed or aborted every buffered
// record (done), or failed (not done: records may still be in flight).
// A slab whose records are done is written over by later records, instead
// of the next being new memory the GC must then free.
func (w *worker) recordsDone(done bool) {
	if done {
		for _, b := range w.slabs {
			if len(w.freeSlabs) < maxFreeSlabs {
				w.freeSlabs = append(w.freeSlabs, b[:0])
			}
		}
	}
	clear(w.slabs)
	w.slabs, w.slab = w.slabs[:0], nil
	for _, b := range w.recBlocks {
		if done && len(w.freeRecBlocks) < maxFreeSlabs {
			// Zeroed: a free block holds no pointer to a slab or key.
			clear(b[:cap(b)])
			w.freeRecBlocks = append(w.freeRecBlocks, b[:0])
		}
	}
	clear(w.recBlocks)
	w.recBlocks, w.recs = w.recBlocks[:0], nil
}

// cut takes b, appended to what tail returned, from the slab. One that
// outgrew the slab's free space is an allocation of its own (append moved
// it), and the free space stays for the next.
func (w *worker) cut(b []byte) []byte {
	n := len(w.slab)
	if free := w.slab[n:cap(w.slab)]; len(b) <= len(free) && len(b) > 0 && unsafe.SliceData(b) == unsafe.SliceData(free) {
		w.slab = w.slab[:n+len(b)]
		return b[:len(b):len(b)]
	}
	return b
}

// overflow counts a sample of a series over the cap, and logs at most
// once a minute.
func (w *worker) overflow() {
	w.m.overflow.Inc()
	w.overflowSince++
	if time.Since(w.overflowLogged) >= time.Minute {
		w.log.Warn("series cap reached: samples of new series are dropped", "max_series", w.cfg.MaxSeries, "dropped_since_last_log", w.overflowSince)
		w.overflowLogged, w.overflowSince = time.Now(), 0
	}
}

// idle closes the windows of partitions whose event time advances with
// the wall clock (IdleTimeout).
func (w *worker) idle(ctx context.Context) {
	for _, p := range w.parts {
		if !w.inTxn && w.anyRunEnded(p) {
			// A transaction to produce the partials in (end).
			if err := w.begin(); err != nil {
				w.log.Warn("cannot produce the partials of ended runs", "partition", p.id, "err", err)
				return
			}
		}
	}
	if w.cfg.IdleTimeout < 0 {
		return
	}
	now := time.Now().UnixNano()
	for _, p := range w.parts {
		wm := p.watermark(int64(w.cfg.AllowedLateness), int64(w.cfg.IdleTimeout), now)
		if wm > p.closed && wm >= p.nextEnd {
			if err := w.begin(); err != nil {
				w.log.Warn("cannot close idle windows", "partition", p.id, "err", err)
				return
			}
			w.close(ctx, p, wm)
		}
	}
}

func (w *worker) close(ctx context.Context, p *partition, wm int64) {
	forgotten := p.closeThrough(wm, w.sk, func(res int, s *series, win *window) {
		if res == 0 && !win.inRun {
			w.foldIntoRun(p, s, win)
		}
		line, err := w.lines.append(w.tail(), res, s, win)
		if err != nil {
			w.log.Warn("window cannot be written as line protocol", "series", s.key, "resolution", Resolutions[res].Name, "start", win.start, "err", err)
			return
		}
		line = w.cut(line)
		rec := w.record()
		rec.Topic, rec.Key, rec.Value, rec.Timestamp = topics[res], w.cut(appendOutputKey(w.tail(), s, win)), line, time.Unix(0, win.start)
		w.send(ctx, rec)
		w.m.windowsAt[res].Inc()
	})
	if forgotten > 0 {
		w.series -= forgotten
		w.m.series.Set(float64(w.series))
	}
}
