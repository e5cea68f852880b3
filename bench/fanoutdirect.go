package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/learner"
)

// Direct mode of `simtel bench fanout`: every worker subscribes itself, the
// design node-level fan-out replaces. Each of Nodes × WorkersPerNode
// direct subscribers has its own kgo client, polls learner.Latest every
// PollInterval until a version newer than the warm-up appears, and reads
// it with learner.Fetch (which verifies count, size and SHA-256) into a
// writer that counts the bytes (and, with VerifyReads, compares them).
//
// Goroutines: one per subscriber, started before the publish and released
// by closing start right after the Publish call begins; each ends when its
// Fetch returned or pollCtx ended, and all are waited for before runDirect
// returns. The progress watch as in node mode.

func (r *fanoutRun) runDirect(ctx context.Context, p *fanoutPublish) error {
	cfg := r.cfg
	n := cfg.Nodes * cfg.WorkersPerNode
	clients := make([]*kgo.Client, n)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	for i := range clients {
		cl, err := kgo.NewClient(clientOpts(cfg.Brokers, cfg.ClientOpts, r.log, fmt.Sprintf("simtel-bench-fanout-direct-%d", i))...)
		if err != nil {
			return fmt.Errorf("cannot create the client of direct subscriber %d: %w", i, err)
		}
		clients[i] = cl
	}

	// Each client reads Latest once before the measurement: connections
	// and metadata are warm, and everyone sees the warm-up version.
	r.progressf("%d direct subscribers reading the warm-up version", n)
	setup, cancel := context.WithTimeout(ctx, cfg.SetupTimeout)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			m, ok, err := learner.Latest(setup, cl, p.policy)
			switch {
			case err != nil:
				errs[i] = err
			case !ok || m.Version != p.base.Version:
				errs[i] = fmt.Errorf("Latest found version %d (found: %v), want warm-up version %d", m.Version, ok, p.base.Version)
			}
		}()
	}
	wg.Wait()
	cancel()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("direct subscriber %d: %w", i, err)
		}
	}

	outs := make([]workerOutcome, n)
	pollCtx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	start := make(chan struct{})
	var pollWG sync.WaitGroup
	for i, cl := range clients {
		pollWG.Add(1)
		go func() {
			defer pollWG.Done()
			var want []byte
			if cfg.VerifyReads {
				want = p.blob
			}
			outs[i] = r.directSubscriber(pollCtx, start, cl, p, want)
			if outs[i].err == nil {
				r.held.Add(1)
			}
		}()
	}

	// The pollers start with the Publish call (t0).
	m, t0, t1, cerr, err := r.measurePublish(ctx, p, "direct subscriber",
		fmt.Sprintf("%d direct subscribers polling every %s; publishing %d bytes as version %d", n, cfg.PollInterval, cfg.Size, p.base.Version+1),
		func() { close(start) }, stopPolls, &pollWG)
	if err != nil {
		return err
	}
	r.res.Polls, r.res.PollErrors = r.polls.Load(), r.pollErrs.Load()
	r.collect(outs, m, t0, t1)
	if cfg.VerifyReads {
		r.res.Verified = "every subscriber compared each byte Fetch wrote with the published version; Fetch verified the SHA-256"
	} else {
		r.res.Verified = fmt.Sprintf("every subscriber's Fetch wrote %d bytes and verified the SHA-256 against the manifest, whose SHA-256 is the published one", m.Size)
	}
	return cerr
}

// directSubscriber waits for start, then polls Latest until a version
// newer than the warm-up appears and fetches it.
func (r *fanoutRun) directSubscriber(ctx context.Context, start <-chan struct{}, cl *kgo.Client, p *fanoutPublish, want []byte) workerOutcome {
	select {
	case <-start:
	case <-ctx.Done():
		return workerOutcome{err: ctx.Err()}
	}
	// A random phase, so that the subscribers' polls spread over the
	// interval as independent workers' would.
	wait := rand.N(r.cfg.PollInterval)
	var lastErr error
	for {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			if lastErr != nil {
				return workerOutcome{err: fmt.Errorf("%w (last Latest error: %v)", ctx.Err(), lastErr)}
			}
			return workerOutcome{err: ctx.Err()}
		}
		wait = r.cfg.PollInterval
		m, ok, err := learner.Latest(ctx, cl, p.policy)
		r.polls.Add(1)
		if err != nil {
			r.pollErrs.Add(1)
			lastErr = err
			continue
		}
		if !ok || m.Version <= p.base.Version {
			continue
		}
		w := &checkWriter{want: want}
		if err := learner.Fetch(ctx, cl, m, w); err != nil {
			return workerOutcome{version: m.Version, bytes: w.n, err: fmt.Errorf("cannot fetch version %d: %w", m.Version, err)}
		}
		if w.err != nil {
			return workerOutcome{version: m.Version, bytes: w.n, err: w.err}
		}
		return workerOutcome{done: time.Now(), version: m.Version, bytes: w.n}
	}
}

// checkWriter counts what is written and, with want, compares it with
// want; a mismatch is remembered in err (Fetch's own error wins).
type checkWriter struct {
	want []byte
	n    int64
	err  error
}

func (w *checkWriter) Write(b []byte) (int, error) {
	if w.want != nil && w.err == nil {
		if w.n+int64(len(b)) > int64(len(w.want)) || !bytes.Equal(b, w.want[w.n:w.n+int64(len(b))]) {
			w.err = fmt.Errorf("fetched bytes differ from the published ones in [%d, %d)", w.n, w.n+int64(len(b)))
		}
	}
	w.n += int64(len(b))
	return len(b), nil
}
