package bench

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// The report of bench/agent-cost.sh: `simtel bench agent-report add`
// appends each step's `simtel bench agent --json` output to a run file,
// and `publish` writes it to results/agent-cost/<id>.json and rewrites the
// agent results of docs/agent.md. The runs live in a directory of their own:
// ReadRuns takes every *.json in results/ for a compare.sh run.

// The agent cost targets (the issue's): CPU per 10,000 lines per second,
// and resident memory.
const (
	TargetCPUPctPer10k = 1.0
	TargetRSSMiB       = 64.0
)

// The agent results lie between these markers in docs/agent.md (the
// README of PublishConfig), whose prose is written by hand.
const (
	AgentMarkerStart = "<!-- agent-results:start -->"
	AgentMarkerEnd   = "<!-- agent-results:end -->"
)

// AgentRun is one run of bench/agent-cost.sh.
type AgentRun struct {
	ID      string      `json:"id"`
	Date    string      `json:"date"`
	Host    string      `json:"host"`
	Command string      `json:"command"`
	Steps   []AgentStep `json:"steps"`
}

// AgentStep is one transport and rate. A step whose command failed has
// Error, and a result if the command still printed one.
type AgentStep struct {
	Label   string           `json:"label"`
	Command string           `json:"command"`
	Error   string           `json:"error,omitempty"`
	Result  *AgentLoadResult `json:"result,omitempty"`
}

func readAgentRun(path string) (*AgentRun, error) { return readJSON[AgentRun](path, "agent run") }

// AddAgentStep appends a step, the output of `simtel bench agent --json`,
// to the run in path, creating the file if it does not exist. failure, if
// not empty, says how the step's command failed: the step is recorded with
// it and with whatever result the output holds, and no parse error is
// returned.
func AddAgentStep(path, label, command, failure string, output []byte) error {
	return addStep(path, "agent run", "agent", "agent", label, failure, output,
		func(res *AgentLoadResult) string { return res.Kind }, func(r *AgentRun, res *AgentLoadResult) {
			r.Steps = append(r.Steps, AgentStep{Label: label, Command: command, Error: failure, Result: res})
		})
}

// PublishAgent writes the run in cfg.RunPath to cfg.ResultsDir/<id>.json
// and, if cfg.README is set, replaces its agent results with the run's
// table and the list of every run in the directory. It returns the path of
// the results file.
func PublishAgent(cfg PublishConfig) (string, error) {
	return publishRun(cfg, "agent run", AgentMarkerStart, AgentMarkerEnd,
		func(r *AgentRun) { r.ID, r.Date, r.Host, r.Command = cfg.ID, cfg.Date, cfg.Host, cfg.Command },
		nil, func(r *AgentRun) string { return r.ID }, RenderAgentResults)
}

// agentVerdict says which targets a step missed: "✓", or "✗" and what.
func agentVerdict(res *AgentLoadResult) string {
	var miss []string
	if a := res.Agent; a != nil {
		if a.CPUPctPer10k > TargetCPUPctPer10k {
			miss = append(miss, "CPU")
		}
		if max(a.PeakMiB, a.RSSMaxMiB) >= TargetRSSMiB {
			miss = append(miss, "RSS")
		}
	}
	if d := res.Delivery; d != nil {
		if d.Delivered >= 0 && d.Delivered != d.Accepted || d.Shipped != d.Accepted || !d.Idle {
			miss = append(miss, "delivery")
		}
		if d.Received < d.Sent {
			miss = append(miss, "lines lost before the agent")
		}
	}
	if res.Settings.Rate > 0 && res.LinesPerS < 0.95*res.Settings.Rate {
		miss = append(miss, "rate")
	}
	if len(miss) == 0 {
		return "✓"
	}
	return "✗ " + strings.Join(miss, ", ")
}

// RenderAgentResults renders the README's agent results: the latest run's
// table, notes on what went wrong, the commands, and how many earlier runs
// resultsDir (relative to the README) holds.
func RenderAgentResults(latest *AgentRun, resultsDir string, history []*AgentRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Latest run: `%s` (%s), %s, by `%s`.\n\n", latest.ID, latest.Date, latest.Host, latest.Command)
	b.WriteString("| transport | target lines/s | achieved lines/s | agent CPU, % of one core | CPU % per 10k lines/s | µs CPU per line | RSS MiB (anonymous, PSS) | peak RSS MiB | delivered / accepted | received / sent | machine busy (generator CPU) | targets |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var notes []string
	for _, st := range latest.Steps {
		r := st.Result
		if r == nil {
			fmt.Fprintf(&b, "| %s | | | | | | | | | | | ✗ failed |\n", st.Label)
			notes = append(notes, fmt.Sprintf("**%s failed**: `%s`", st.Label, strings.TrimSpace(st.Error)))
			continue
		}
		cpu, per10k, us, rss, peak := "–", "–", "–", "–", "–"
		if a := r.Agent; a != nil {
			cpu, per10k, us = fmt.Sprintf("%.1f", a.CPUPct), fmtPct(a.CPUPctPer10k), fmtPct(a.MicrosPerLine)
			rss, peak = fmt.Sprintf("%.1f", a.RSSMiB), fmt.Sprintf("%.1f", max(a.PeakMiB, a.RSSMaxMiB))
			switch {
			case a.AnonMiB > 0 && a.PSSMiB > 0:
				// The rest of RSS is file-backed: pages of the binary.
				rss += fmt.Sprintf(" (%.1f, %.1f)", a.AnonMiB, a.PSSMiB)
			case a.AnonMiB > 0:
				rss += fmt.Sprintf(" (%.1f)", a.AnonMiB)
			}
		}
		delivered, received := "–", "–"
		if d := r.Delivery; d != nil {
			if d.Delivered >= 0 {
				delivered = fmt.Sprintf("%s / %s", groupDigits(d.Delivered), groupDigits(d.Accepted))
			} else {
				delivered = fmt.Sprintf("shipped %s / %s", groupDigits(d.Shipped), groupDigits(d.Accepted))
			}
			received = fmtShare(d.Received, d.Sent)
		}
		verdict := agentVerdict(r)
		if st.Error != "" {
			verdict = "✗ failed"
		}
		busy := fmt.Sprintf("%.0f%%", r.MachineBusyPct)
		if r.GeneratorCPUPct > 0 {
			busy += fmt.Sprintf(" (%.1f%%)", r.GeneratorCPUPct)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Settings.Transport, fmtCount(r.Settings.Rate), fmtCount(r.LinesPerS), cpu, per10k, us, rss, peak,
			delivered, received, busy, verdict)
		notes = append(notes, agentNotes(st)...)
	}
	fmt.Fprintf(&b, "\nTargets: at most %.0f%% of one core per 10,000 lines/s (= %.0f µs of CPU per line) and under %.0f MiB RSS. "+
		"In brackets: the anonymous part of RSS (heap, stacks; the rest is pages of the simtel binary mapped from the page cache), "+
		"and PSS (RSS with pages shared with other processes divided among them). "+
		"Machine busy is all CPUs; in brackets the generator's own CPU, %% of one core: it does the same work in every run, "+
		"so when it is higher than usual the machine was slower for the agent too.\n",
		TargetCPUPctPer10k, TargetCPUPctPer10k, TargetRSSMiB)
	writeNotes(&b, notes)
	writeCommands(&b, latest.Steps, func(st AgentStep) (string, string) { return st.Label, st.Command })
	// Earlier runs stay in their JSON files; the README shows today's.
	if len(history) > 1 {
		fmt.Fprintf(&b, "\nEarlier runs: %d more in `%s/`, each with its figures and commands.\n", len(history)-1, resultsDir)
	}
	return b.String()
}

// agentNotes explains a step's losses and shortfalls.
func agentNotes(st AgentStep) []string {
	r := st.Result
	var notes []string
	label := st.Label
	if st.Error != "" {
		notes = append(notes, fmt.Sprintf("**%s failed**: `%s`", label, strings.TrimSpace(st.Error)))
	}
	if d := r.Delivery; d != nil {
		if lost := d.Sent - d.Received; lost > 0 {
			n := fmt.Sprintf("%s: the agent received %s of %s lines sent (%s lost)", label,
				groupDigits(d.Received), groupDigits(d.Sent), fmtShare(lost, d.Sent))
			if d.UDPSocketDrops > 0 {
				n += fmt.Sprintf("; the kernel dropped %s datagrams on its socket (receive buffer full)", groupDigits(d.UDPSocketDrops))
			}
			notes = append(notes, n)
		}
		if d.ParseErrors > 0 || d.Dropped > 0 || d.SpoolErrors > 0 {
			notes = append(notes, fmt.Sprintf("%s: %s parse errors, %s samples dropped, %s failed spool appends", label,
				groupDigits(d.ParseErrors), groupDigits(d.Dropped), groupDigits(d.SpoolErrors)))
		}
		if !d.Idle {
			notes = append(notes, fmt.Sprintf("%s: the agent had not shipped everything %.0f s after the last line (shipped %s of %s)",
				label, d.DrainS, groupDigits(d.Shipped), groupDigits(d.Accepted)))
		} else if d.DrainS >= 2 {
			notes = append(notes, fmt.Sprintf("%s: the agent needed %.1f s after the last line to ship its backlog", label, d.DrainS))
		}
		if d.Delivered >= 0 && d.Delivered != d.Accepted && d.Idle {
			notes = append(notes, fmt.Sprintf("%s: the topic grew by %s records for %s samples accepted", label,
				groupDigits(d.Delivered), groupDigits(d.Accepted)))
		}
	}
	codes := make([]string, 0, len(r.HTTPStatus))
	for code := range r.HTTPStatus {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	for _, code := range codes {
		if !strings.HasPrefix(code, "2") {
			notes = append(notes, fmt.Sprintf("%s: %s requests answered %s (the first refusal: `%s`)", label, groupDigits(r.HTTPStatus[code]), code, r.FirstErr))
		}
	}
	if r.Errors > 0 {
		notes = append(notes, fmt.Sprintf("%s: %s failed writes or requests, the first: `%s`", label, groupDigits(r.Errors), r.FirstErr))
	}
	if r.Settings.Rate > 0 && r.LinesPerS < 0.95*r.Settings.Rate {
		notes = append(notes, fmt.Sprintf("%s: the generator reached %s of the %s lines/s asked (%s lines behind schedule)",
			label, fmtShare(int64(r.LinesPerS), int64(r.Settings.Rate)), fmtCount(r.Settings.Rate), groupDigits(r.Behind)))
	}
	for _, n := range r.Notes {
		notes = append(notes, label+": "+n)
	}
	if r.Aborted != "" && st.Error == "" {
		notes = append(notes, fmt.Sprintf("%s: aborted: `%s`", label, r.Aborted))
	}
	return notes
}

func fmtPct(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// fmtShare is part/whole in percent: "100%", "99.7%", "41%".
func fmtShare(part, whole int64) string {
	if whole == 0 {
		return "–"
	}
	p := float64(part) / float64(whole) * 100
	switch {
	case part == whole:
		return "100%"
	case p >= 99.95 && p < 100:
		return "99.9%+"
	case p >= 10:
		return fmt.Sprintf("%.1f%%", math.Floor(p*10)/10)
	}
	return fmt.Sprintf("%.2f%%", p)
}
