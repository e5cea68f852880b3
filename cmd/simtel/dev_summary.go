package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/term"
)

// devSummary prints one line every two seconds until done: samples the
// agent received and their rate, the sink's lag and the lake's rows. On a
// terminal the line is rewritten in place.
func devSummary(done <-chan struct{}, w io.Writer, agentM, sinkM prometheus.Gatherer) {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	const every = 2 * time.Second
	t := time.NewTicker(every)
	defer t.Stop()
	var last float64
	var lastLine string
	quietFor := 0
	for {
		select {
		case <-done:
			if tty && lastLine != "" {
				fmt.Fprintln(w)
			}
			return
		case <-t.C:
		}
		in := metricSum(agentM, "simtel_agent_samples_received_total")
		lag := metricSum(sinkM, "simtel_sink_lag_records")
		rows := metricSum(sinkM, "simtel_sink_rows_written_total")
		objects := metricSum(sinkM, "simtel_sink_objects_written_total")
		line := fmt.Sprintf("samples in %.0f (%.0f/s) · sink lag %.0f · lake %.0f rows in %.0f objects",
			in, (in-last)/every.Seconds(), lag, rows, objects)
		last = in
		switch {
		case tty:
			fmt.Fprintf(w, "\r%-100s", line)
			lastLine = line
		case line != lastLine || quietFor >= 15:
			// Not a terminal (a log file): print changes, and a
			// heartbeat every 30 s.
			if line == lastLine {
				quietFor = 0
			}
			fmt.Fprintln(w, line)
			lastLine = line
		default:
			quietFor++
		}
	}
}

// metricSum adds up every series of a counter or gauge family.
func metricSum(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}
