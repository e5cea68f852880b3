package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/simtel/simtel/internal/metricsrv"
	"github.com/simtel/simtel/lake/replay"
)

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// serveLakeMetrics serves the process's metrics and those of stats and out
// (either may be nil) on http://addr/metrics until stop is called; an
// empty addr serves nothing. When it fails, it finishes out.
func serveLakeMetrics(ctx context.Context, addr string, stats *replay.Stats, out replay.Output) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := replay.RegisterMetrics(reg, stats, out); err != nil {
		finishOutput(ctx, out)
		return nil, err
	}
	if addr == "" {
		return func() {}, nil
	}
	stop, err = metricsrv.Start(addr, reg, slog.Default(), nil)
	if err != nil {
		finishOutput(ctx, out)
		return nil, fmt.Errorf("cannot listen on --metrics-listen %s: %w", addr, err)
	}
	return stop, nil
}

// finishOutput finishes out, if any, after a failure that is reported
// instead of its error.
func finishOutput(ctx context.Context, out replay.Output) {
	if out != nil {
		_, _ = replay.Finish(ctx, out)
	}
}

// lakeProgress counts the records of a replay or backfill on a progress
// bar on stderr when stderr is a terminal.
type lakeProgress struct {
	n   int64
	bar *progressbar.ProgressBar
}

// start shows the bar of total records, when stderr is a terminal.
func (p *lakeProgress) start(total int64, desc string) {
	if !isTerminal(os.Stderr) {
		return
	}
	p.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("samples"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionFullWidth(),
		progressbar.OptionClearOnFinish(),
	)
}

func (p *lakeProgress) tick() {
	p.n++
	if p.bar != nil && p.n%256 == 0 {
		p.bar.Set64(p.n)
	}
}

func (p *lakeProgress) finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}
