package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// aborter ends a run at its first failure: abort keeps the first reason
// and cancels the context the run's work waits on.
type aborter struct {
	once   sync.Once
	msg    atomic.Pointer[string]
	cancel context.CancelFunc
}

func (a *aborter) abort(msg string) {
	a.once.Do(func() {
		a.msg.Store(&msg)
		a.cancel()
	})
}

// aborted is what a result's Aborted says: the cancellation of caller
// first (the failures it causes are its consequence, not the reason),
// else the first reason given to abort, else nothing.
func (a *aborter) aborted(caller context.Context) string {
	if err := caller.Err(); err != nil {
		return "interrupted: " + err.Error()
	}
	if m := a.msg.Load(); m != nil {
		return *m
	}
	return ""
}

// meter counts what a run has done; the hot paths only add to it.
type meter struct {
	records atomic.Int64
	bytes   atomic.Int64
}

// watch is the once-per-tick observer of a run: it prints a progress line
// to out (nil: quiet) and reports a stall, when stalled says the run has
// made no progress for too long, by calling abort. It returns when ctx is
// done. Run it on its own goroutine; its owner cancels ctx and waits.
type watch struct {
	label    string
	out      io.Writer
	interval time.Duration
	m        *meter
	// start is time zero of the progress lines; zero: when run begins.
	start time.Time
	// line, if not nil, prints the progress line in place of the default
	// one; it gets the tick's time, the seconds since the previous tick
	// and the records counted then and at the previous tick.
	line func(now time.Time, dt float64, records, lastRecords int64)
	// stalled, if not nil, is called every tick with the time since the
	// records count last moved; a non-nil error aborts the run.
	stalled func(idle time.Duration) error
	abort   func(error)
	// series, if not nil, gets the records per second of every tick.
	series *[]float64
}

func (w *watch) run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	start := w.start
	if start.IsZero() {
		start = time.Now()
	}
	lastT, lastR, lastB := start, int64(0), int64(0)
	lastMove := start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r, b := w.m.records.Load(), w.m.bytes.Load()
			if r != lastR {
				lastMove = now
			}
			dt := now.Sub(lastT).Seconds()
			switch {
			case w.line != nil:
				w.line(now, dt, r, lastR)
			case w.out != nil:
				fmt.Fprintf(w.out, "%s %6.1fs %12s rec/s %9.1f MB/s %14s records\n",
					w.label, now.Sub(start).Seconds(),
					groupDigits(int64(float64(r-lastR)/dt)),
					float64(b-lastB)/dt/1e6, groupDigits(r))
			}
			if w.series != nil {
				*w.series = append(*w.series, float64(r-lastR)/dt)
			}
			lastT, lastR, lastB = now, r, b
			if w.stalled != nil {
				if err := w.stalled(now.Sub(lastMove)); err != nil {
					w.abort(err)
					return
				}
			}
		}
	}
}

// groupDigits formats n with thousands separators: 1234567 → "1,234,567".
func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
