package bench

import (
	"fmt"
	"io"
	"strings"
)

// The report of bench/fanout.sh: `simtel bench fanout-report add` appends
// each step's `simtel bench fanout --json` output to a run file, and
// `publish` writes it to results/fanout/<id>.json and rewrites the fan-out
// results of docs/fanout.md. A run normally has a node-mode step and a
// direct-mode step; the egress target compares the two.

// The fan-out results lie between these markers in docs/fanout.md (the
// README of PublishConfig), whose prose is written by hand.
const (
	FanoutMarkerStart = "<!-- fanout-results:start -->"
	FanoutMarkerEnd   = "<!-- fanout-results:end -->"
)

// PrintFanout writes a result for people.
func PrintFanout(w io.Writer, r *FanoutResult) {
	s := r.Settings
	fmt.Fprintf(w, "fanout %s: %d nodes × %d workers (%d fetching from the broker), %s", s.Mode, s.Nodes, s.WorkersPerNode, s.Fetchers, fmtBytes(float64(s.Size)))
	if r.Version > 0 {
		fmt.Fprintf(w, " as version %d (%d chunks), published in %.2f s", r.Version, r.Chunks, r.PublishS)
	}
	fmt.Fprintln(w)
	if n := r.NodeInstall; n != nil && n.Count > 0 {
		fmt.Fprintf(w, "  nodes installed it, from the publish start: %s (%d nodes)\n", fmtSummary(*n), n.Count)
	}
	if r.FromStart.Count > 0 {
		fmt.Fprintf(w, "  workers hold it, from the publish start:  %s\n", fmtSummary(r.FromStart))
		fmt.Fprintf(w, "  workers hold it, from the publish return: %s\n", fmtSummary(r.FromReturn))
	}
	fmt.Fprintf(w, "  %d of %d workers hold it", r.Held, s.Workers)
	if r.Failures > 0 {
		fmt.Fprintf(w, "; %d failed, the first: %s", r.Failures, r.FirstErr)
	}
	fmt.Fprintln(w)
	if r.Verified != "" {
		fmt.Fprintf(w, "  checked: %s\n", r.Verified)
	}
	if r.Polls > 0 {
		fmt.Fprintf(w, "  %s Latest polls (%d failed)\n", groupDigits(r.Polls), r.PollErrors)
	}
	if d := r.Delta; d != nil && s.Size > 0 {
		fmt.Fprintf(w, "  delta against version %d with %.1f%% of the bytes changed: %d of %d chunks sent (%s, %.1f%% of the version); each node received %s on average (%.1f%%), at most %s (%.1f%%)\n",
			d.Base, 100*s.Delta, d.Sent, d.Chunks, fmtBytes(float64(d.SentBytes)), 100*float64(d.SentBytes)/float64(s.Size),
			fmtBytes(d.NodeReceivedMean), 100*d.NodeReceivedMean/float64(s.Size), fmtBytes(float64(d.NodeReceivedMax)), 100*float64(d.NodeReceivedMax)/float64(s.Size))
	}
	if e := r.Egress; e != nil {
		fmt.Fprintf(w, "  broker egress %s (fetch responses %s, record batches %s)", fmtBytes(float64(e.ResponseBytes)),
			fmtBytes(float64(e.FetchResponseBytes)), fmtBytes(float64(e.FetchedBytes)))
		if t := r.Targets; t != nil {
			fmt.Fprintf(w, ": %s per worker, %.3f × size per fetcher", fmtBytes(t.EgressPerWorker), t.EgressPerFetcherOverSize)
		}
		fmt.Fprintln(w)
	}
	printFanoutAgents(w, r)
	if lb := r.Loopback; lb != nil {
		fmt.Fprintf(w, "  loopback %s/s (one TCP stream, %d B writes, %.1f s)\n", fmtBytes(lb.BytesPerS), lb.WriteSize, lb.Seconds)
	}
	if t := r.Targets; t != nil && t.LimitS > 0 {
		fmt.Fprintf(w, "  egress / loopback = %.2f s; last worker %.2f s = %.2f× that (target ≤ %.0f×: %s)",
			t.LimitS, r.FromStart.MaxS, t.LastOverLimit, TargetTimeFactor, metOrMissed(t.TimeMet))
		if t.NodesOverLimit > 0 {
			fmt.Fprintf(w, "; last node install %.2f×", t.NodesOverLimit)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  CPU over the measurement: this process %.1f s", r.BenchCPUS)
	if r.BrokerCPUS > 0 {
		fmt.Fprintf(w, ", broker %.1f s", r.BrokerCPUS)
	}
	fmt.Fprintf(w, "; machine %.0f%% busy (%d CPUs)", r.MachineBusyPct, s.CPUs)
	if t := r.Targets; t != nil && t.CPUFloorS > 0 {
		fmt.Fprintf(w, "; with every CPU on it that work takes %.2f s, the last worker came at %.2f× that", t.CPUFloorS, t.LastOverCPUFloor)
	}
	if l := r.Links; l != nil {
		fmt.Fprintf(w, "; agents %.1f s", l.AgentsCPUS)
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if r.Aborted != "" {
		fmt.Fprintf(w, "  aborted: %s\n", r.Aborted)
	}
}

func fmtSummary(s DurationSummary) string {
	return fmt.Sprintf("p50 %.3f s, p99 %.3f s, max %.3f s", s.P50S, s.P99S, s.MaxS)
}

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// fmtBytes is a byte count in decimal units: "67.1 MB", "3.36 GB".
func fmtBytes(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2f GB", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1f MB", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f kB", v/1e3)
	}
	return fmt.Sprintf("%.0f B", v)
}

// FanoutRun is one run of bench/fanout.sh.
type FanoutRun struct {
	ID      string       `json:"id"`
	Date    string       `json:"date"`
	Host    string       `json:"host"`
	Command string       `json:"command"`
	Steps   []FanoutStep `json:"steps"`
	// Comparison is the node step against the direct step, filled by
	// PublishFanout.
	Comparison *FanoutComparison `json:"comparison,omitempty"`
}

// FanoutStep is one mode. A step whose command failed has Error, and a
// result if the command still printed one.
type FanoutStep struct {
	Label   string        `json:"label"`
	Command string        `json:"command"`
	Error   string        `json:"error,omitempty"`
	Result  *FanoutResult `json:"result,omitempty"`
}

// FanoutComparison is the egress target: node-level fan-out
// beats direct per-worker subscription in broker egress by at least the
// number of workers per node. Egress is compared per worker, so a direct
// step run at a smaller scale than the node step still compares like for
// like.
type FanoutComparison struct {
	Node   string `json:"node"`   // step label
	Direct string `json:"direct"` // step label
	// NodePerWorker and DirectPerWorker are egress bytes per worker.
	NodePerWorker   float64 `json:"node_egress_per_worker"`
	DirectPerWorker float64 `json:"direct_egress_per_worker"`
	Ratio           float64 `json:"ratio"`
	// RatioFloor uses the least a direct subscriber can cost, the
	// version's size, instead of the measured direct egress (which
	// includes the polls of Latest).
	RatioFloor     float64 `json:"ratio_floor"`
	WorkersPerNode int     `json:"workers_per_node"`
	Met            bool    `json:"met"`
}

// compareFanout compares the first successful node step with the first
// successful direct step; nil if either is missing or has no egress.
func compareFanout(steps []FanoutStep) *FanoutComparison {
	var node, direct *FanoutStep
	for i := range steps {
		st := &steps[i]
		r := st.Result
		if r == nil || st.Error != "" || r.Targets == nil || r.Held == 0 {
			continue
		}
		switch {
		case r.Settings.Mode == FanoutNode && node == nil:
			node = st
		case r.Settings.Mode == FanoutDirect && direct == nil:
			direct = st
		}
	}
	if node == nil || direct == nil {
		return nil
	}
	nr, dr := node.Result, direct.Result
	c := &FanoutComparison{
		Node: node.Label, Direct: direct.Label,
		NodePerWorker: nr.Targets.EgressPerWorker, DirectPerWorker: dr.Targets.EgressPerWorker,
		WorkersPerNode: nr.Settings.WorkersPerNode,
	}
	if c.NodePerWorker > 0 {
		c.Ratio = c.DirectPerWorker / c.NodePerWorker
		c.RatioFloor = float64(nr.Settings.Size) / c.NodePerWorker
	}
	c.Met = c.Ratio >= float64(c.WorkersPerNode) && nr.Settings.Size == dr.Settings.Size
	return c
}

func readFanoutRun(path string) (*FanoutRun, error) { return readJSON[FanoutRun](path, "fan-out run") }

// AddFanoutStep appends a step, the output of `simtel bench fanout
// --json`, to the run in path, creating the file if it does not exist.
// failure, if not empty, says how the step's command failed: the step is
// recorded with it and with whatever result the output holds.
func AddFanoutStep(path, label, command, failure string, output []byte) error {
	return addStep(path, "fan-out run", "fanout", "fan-out", label, failure, output,
		func(res *FanoutResult) string { return res.Kind }, func(r *FanoutRun, res *FanoutResult) {
			r.Steps = append(r.Steps, FanoutStep{Label: label, Command: command, Error: failure, Result: res})
		})
}

// PublishFanout writes the run in cfg.RunPath, with its comparison, to
// cfg.ResultsDir/<id>.json and, if cfg.README is set, replaces its fan-out
// results with the run's tables and the list of every run in the
// directory. It returns the path of the results file.
func PublishFanout(cfg PublishConfig) (string, error) {
	return publishRun(cfg, "fan-out run", FanoutMarkerStart, FanoutMarkerEnd,
		func(r *FanoutRun) { r.ID, r.Date, r.Host, r.Command = cfg.ID, cfg.Date, cfg.Host, cfg.Command },
		func(r *FanoutRun) { r.Comparison = compareFanout(r.Steps) },
		func(r *FanoutRun) string { return r.ID }, RenderFanoutResults)
}

// RenderFanoutResults renders the page's fan-out results: a table with a
// column per step, the two targets, notes, the commands, and how many
// earlier runs resultsDir (relative to the page) holds.
func RenderFanoutResults(latest *FanoutRun, resultsDir string, history []*FanoutRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Latest run: `%s` (%s), %s, by `%s`.\n\n", latest.ID, latest.Date, latest.Host, latest.Command)
	b.WriteString("| measure |")
	for _, st := range latest.Steps {
		b.WriteString(" " + st.Label + " |")
	}
	b.WriteString("\n|---|")
	for range latest.Steps {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	row := func(name string, cell func(r *FanoutResult) string) {
		b.WriteString("| " + name + " |")
		for _, st := range latest.Steps {
			v := "–"
			if st.Result != nil {
				v = cell(st.Result)
			}
			b.WriteString(" " + v + " |")
		}
		b.WriteString("\n")
	}
	secs := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	triple := func(s DurationSummary) string {
		if s.Count == 0 {
			return "–"
		}
		return fmt.Sprintf("%s / %s / %s", secs(s.P50S), secs(s.P99S), secs(s.MaxS))
	}
	row("workers (nodes × workers per node)", func(r *FanoutResult) string {
		s := r.Settings
		return fmt.Sprintf("%s (%d × %d)", groupDigits(int64(s.Workers)), s.Nodes, s.WorkersPerNode)
	})
	row("fetching from the broker", func(r *FanoutResult) string {
		if r.Settings.Mode == FanoutNode {
			return fmt.Sprintf("%d subscribers (one per node)", r.Settings.Fetchers)
		}
		return fmt.Sprintf("%d direct subscribers (Latest every %s, then Fetch)", r.Settings.Fetchers, r.Settings.PollInterval)
	})
	row("version size", func(r *FanoutResult) string { return fmtMiB(r.Settings.Size) })
	row("workers holding it", func(r *FanoutResult) string {
		return fmt.Sprintf("%s / %s", groupDigits(int64(r.Held)), groupDigits(int64(r.Settings.Workers)))
	})
	row("Publish call, s", func(r *FanoutResult) string { return secs(r.PublishS) })
	row("node installed, from publish start, p50 / p99 / max s", func(r *FanoutResult) string {
		if r.NodeInstall == nil {
			return "–"
		}
		return triple(*r.NodeInstall)
	})
	row("**worker holds it, from publish start, p50 / p99 / max s**", func(r *FanoutResult) string { return "**" + triple(r.FromStart) + "**" })
	row("worker holds it, from publish return, p50 / p99 / max s", func(r *FanoutResult) string { return triple(r.FromReturn) })
	row("broker egress (all responses)", func(r *FanoutResult) string {
		if r.Egress == nil {
			return "–"
		}
		return fmtBytes(float64(r.Egress.ResponseBytes))
	})
	row("of which fetch record batches", func(r *FanoutResult) string {
		if r.Egress == nil {
			return "–"
		}
		return fmtBytes(float64(r.Egress.FetchedBytes))
	})
	row("egress per fetcher ÷ version size", func(r *FanoutResult) string {
		if r.Targets == nil {
			return "–"
		}
		return fmt.Sprintf("%.3f", r.Targets.EgressPerFetcherOverSize)
	})
	row("**egress per worker**", func(r *FanoutResult) string {
		if r.Targets == nil {
			return "–"
		}
		return "**" + fmtBytes(r.Targets.EgressPerWorker) + "**"
	})
	row("Latest polls", func(r *FanoutResult) string {
		if r.Settings.Mode != FanoutDirect {
			return "–"
		}
		return groupDigits(r.Polls)
	})
	row("loopback bandwidth (one TCP stream)", func(r *FanoutResult) string {
		if r.Loopback == nil {
			return "–"
		}
		return fmtBytes(r.Loopback.BytesPerS) + "/s"
	})
	row("egress ÷ loopback bandwidth, s", func(r *FanoutResult) string {
		if r.Targets == nil || r.Targets.LimitS == 0 {
			return "–"
		}
		return secs(r.Targets.LimitS)
	})
	row("**last worker ÷ (egress ÷ loopback)**", func(r *FanoutResult) string {
		if r.Targets == nil || r.Targets.LimitS == 0 {
			return "–"
		}
		return fmt.Sprintf("**%.2f×** %s", r.Targets.LastOverLimit, check(r.Targets.TimeMet))
	})
	row("last node install ÷ (egress ÷ loopback)", func(r *FanoutResult) string {
		if r.Targets == nil || r.Targets.NodesOverLimit == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", r.Targets.NodesOverLimit)
	})
	row("CPU s: bench process / broker; machine busy", func(r *FanoutResult) string {
		return fmt.Sprintf("%.1f / %.1f; %.0f%%", r.BenchCPUS, r.BrokerCPUS, r.MachineBusyPct)
	})
	row("CPU floor: (bench + broker CPU s) ÷ CPUs, s", func(r *FanoutResult) string {
		if r.Targets == nil || r.Targets.CPUFloorS == 0 {
			return "–"
		}
		return secs(r.Targets.CPUFloorS)
	})
	row("last worker ÷ CPU floor", func(r *FanoutResult) string {
		if r.Targets == nil || r.Targets.LastOverCPUFloor == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", r.Targets.LastOverCPUFloor)
	})

	b.WriteString("\nTargets (the issue's):\n\n")
	if c := latest.Comparison; c != nil {
		fmt.Fprintf(&b, "- **Egress**: node-level fan-out sends %s per worker, direct subscription %s per worker: "+
			"**%.1f×** less, target ≥ %d× (the workers per node): %s. Against direct subscribers that would cost only the version's size "+
			"(no polls, no framing) the ratio would be %.2f×\n",
			fmtBytes(c.NodePerWorker), fmtBytes(c.DirectPerWorker), c.Ratio, c.WorkersPerNode, check(c.Met), c.RatioFloor)
	} else {
		b.WriteString("- **Egress**: not judged (this run lacks a successful node step or direct step with the broker's metrics)\n")
	}
	for _, st := range latest.Steps {
		r := st.Result
		if r == nil || r.Targets == nil || r.Targets.LimitS == 0 {
			continue
		}
		fmt.Fprintf(&b, "- **Time, %s**: the last worker held the version %.2f s after the publish started; egress ÷ loopback bandwidth is %.2f s, so **%.2f×**, target ≤ %.0f×: %s\n",
			st.Label, r.FromStart.MaxS, r.Targets.LimitS, r.Targets.LastOverLimit, TargetTimeFactor, check(r.Targets.TimeMet))
	}
	var notes []string
	for _, st := range latest.Steps {
		if st.Error != "" {
			notes = append(notes, fmt.Sprintf("**%s failed**: `%s`", st.Label, strings.TrimSpace(st.Error)))
		}
		r := st.Result
		if r == nil {
			continue
		}
		if r.Failures > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d workers failed, the first: `%s`", st.Label, r.Failures, r.FirstErr))
		}
		if r.Aborted != "" {
			notes = append(notes, fmt.Sprintf("%s: aborted: %s", st.Label, r.Aborted))
		}
		if r.Verified != "" {
			notes = append(notes, fmt.Sprintf("%s, checked: %s", st.Label, r.Verified))
		}
		for _, n := range r.Notes {
			notes = append(notes, st.Label+": "+n)
		}
	}
	writeNotes(&b, notes)
	writeCommands(&b, latest.Steps, func(st FanoutStep) (string, string) { return st.Label, st.Command })
	// Earlier runs stay in their JSON files; the page shows today's.
	if len(history) > 1 {
		fmt.Fprintf(&b, "\nEarlier runs: %d more in `%s/`, each with its figures and commands.\n", len(history)-1, resultsDir)
	}
	return b.String()
}

func check(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

// fmtMiB is a size in binary units when it is a whole number of them.
func fmtMiB(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return groupDigits(n) + " B"
}
