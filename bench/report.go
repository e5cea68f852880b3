package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The README's results section lies between these markers; everything
// else in the file is left alone.
const (
	MarkerStart = "<!-- results:start -->"
	MarkerEnd   = "<!-- results:end -->"
)

// ErrNoMarkers is returned by ReplaceResults when the document lacks the
// start and end markers, in that order.
var ErrNoMarkers = errors.New("results markers not found")

// ReplaceResults returns doc with the text between MarkerStart and
// MarkerEnd replaced by section.
func ReplaceResults(doc, section string) (string, error) {
	return replaceBetween(doc, MarkerStart, MarkerEnd, section)
}

// RenderResults renders the README section: the latest run's figures, its
// chart (chartPath, relative to the README), the commands that made them,
// and how many earlier runs history holds (latest included).
func RenderResults(latest *Run, chartPath string, history []*Run) string {
	s := latest.Summary
	var b strings.Builder
	fmt.Fprintf(&b, "Latest run: `%s` (%s), %s, by `%s`.\n\n", latest.ID, latest.Date, latest.Host, latest.Command)
	size := "1 KiB"
	if s.RecordSize != 0 && s.RecordSize != 1024 {
		size = fmt.Sprintf("%d B", s.RecordSize)
	}
	b.WriteString("| measure | result |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	if s.ProduceMsgsPerS > 0 {
		row(fmt.Sprintf("simtel produce, %s records, acks=%s", size, s.ProduceAcks),
			fmt.Sprintf("**%s msgs/s**, **%s MB/s**", fmtCount(s.ProduceMsgsPerS), fmtMB(s.ProduceMBPerS)))
		if s.ProduceTailMsgsPS > 0 {
			row("simtel produce, last 3 s of the run", fmt.Sprintf("%s msgs/s, %s MB/s", fmtCount(s.ProduceTailMsgsPS), fmtMB(s.ProduceTailMBPerS)))
		}
		row("simtel produce latency p50 / p99 / p999 at full speed (Produce call → ack, includes client queueing)",
			fmt.Sprintf("%s / %s / %s ms", fmtMS(s.ProduceP50MS), fmtMS(s.ProduceP99MS), fmtMS(s.ProduceP999MS)))
	}
	if s.PacedMsgsPS > 0 {
		row(fmt.Sprintf("simtel produce latency p50 / p99 / p999 paced at %s msgs/s", fmtCount(s.PacedRate)),
			fmt.Sprintf("%s / %s / %s ms", fmtMS(s.PacedP50MS), fmtMS(s.PacedP99MS), fmtMS(s.PacedP999MS)))
	}
	if s.JSMsgsPerS > 0 {
		row(fmt.Sprintf("NATS JetStream `%s`, file storage, default sync_interval (fsync every 2 min)", s.JSLabel),
			fmt.Sprintf("%s msgs/s, %s MB/s", fmtCount(s.JSMsgsPerS), fmtMB(s.JSMBPerS)))
		row("ratio simtel / JetStream (default sync)", fmtRatio(s.Ratio))
	}
	if s.JSAlwaysMsgsPerS > 0 {
		row(fmt.Sprintf("NATS JetStream `%s`, file storage, sync_interval always (fsync before ack, as acks=all)", s.JSAlwaysLabel),
			fmt.Sprintf("%s msgs/s, %s MB/s", fmtCount(s.JSAlwaysMsgsPerS), fmtMB(s.JSAlwaysMBPerS)))
		row("ratio simtel / JetStream (same durability)", fmtRatio(s.RatioAlways))
	}
	if s.DiskSeqMBPerS > 0 {
		row("disk: sequential 1 MiB writes, fdatasync each, first 512 MiB (as dd)", fmt.Sprintf("%s MB/s", fmtMB(s.DiskSeqMBPerS)))
		if s.DiskSustainMBPerS > 0 {
			row("disk: the same, sustained (last 3 s of a longer run)", fmt.Sprintf("%s MB/s", fmtMB(s.DiskSustainMBPerS)))
		}
		row("disk: 4 KiB appends, fdatasync each", fmt.Sprintf("%s /s (p50 %s ms)", fmtCount(s.DiskAppendsPS), fmtMS(s.DiskAppendP50)))
		if s.DiskFraction > 0 {
			row("simtel produce MB/s ÷ disk fdatasync bandwidth (first 512 MiB)", fmt.Sprintf("%.2f", s.DiskFraction))
		}
		if s.DiskSustainedFraction > 0 {
			row("simtel produce MB/s, last 3 s ÷ sustained disk fdatasync bandwidth", fmt.Sprintf("%.2f", s.DiskSustainedFraction))
		}
	}
	if s.ConsumeRawMBPS > 0 {
		row("simtel consume, raw FetchRequests (page cache, batch bytes)", fmt.Sprintf("%s MB/s", fmtMB(s.ConsumeRawMBPS)))
	}
	if s.ConsumeMBPS > 0 {
		row("simtel consume, kgo PollFetches (page cache, value bytes)", fmt.Sprintf("%s MB/s", fmtMB(s.ConsumeMBPS)))
	}
	for _, st := range latest.Steps {
		if st.Error != "" {
			fmt.Fprintf(&b, "\n**Step %q failed** (its figures are left out): `%s`\n", st.Label, strings.TrimSpace(st.Error))
		}
	}
	if chartPath != "" {
		fmt.Fprintf(&b, "\n![throughput and latency of run %s](%s)\n", latest.ID, chartPath)
	}
	writeCommands(&b, latest.Steps, func(st Step) (string, string) { return st.Label, st.Command })

	// Earlier runs stay in their JSON files; the README shows today's.
	if len(history) > 1 {
		fmt.Fprintf(&b, "\nEarlier runs: %d more in `bench/results/`, each with its figures and commands.\n", len(history)-1)
	}
	return b.String()
}

// fmtCount rounds to a whole number with thousands separators; 0 is "–".
func fmtCount(v float64) string {
	if v == 0 {
		return "–"
	}
	return groupDigits(int64(math.Round(v)))
}

func fmtMB(v float64) string {
	if v == 0 {
		return "–"
	}
	if v >= 100 {
		return groupDigits(int64(math.Round(v)))
	}
	return fmt.Sprintf("%.1f", v)
}

func fmtMS(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	case v < 100:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtRatio(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v < 10:
		return fmt.Sprintf("%.2f×", v)
	}
	return fmt.Sprintf("%.0f×", v)
}

// PublishConfig says where Publish puts a finished run.
type PublishConfig struct {
	RunPath    string // the run file the steps were added to
	ResultsDir string // gets <id>.json and <id>.svg
	README     string // the file whose results section is replaced
	ID         string // required: file name stem of the results
	Date       string // RFC 3339
	Host       string // a description of the machine
	Command    string // how the run was started
}

// WithDefaults fills Date with the current time when it is empty.
func (c PublishConfig) WithDefaults() PublishConfig {
	if c.Date == "" {
		c.Date = time.Now().UTC().Format(time.RFC3339)
	}
	return c
}

// Publish summarizes the run in RunPath, writes it and its chart to the
// results directory, and rewrites the README's results section from every
// run in that directory. It returns the path of the results file.
func Publish(cfg PublishConfig) (string, error) {
	if err := checkRunID(cfg.ID); err != nil {
		return "", err
	}
	r, err := ReadRun(cfg.RunPath)
	if err != nil {
		return "", err
	}
	r.ID, r.Date, r.Host, r.Command = cfg.ID, cfg.Date, cfg.Host, cfg.Command
	r.Summarize()
	if err := os.MkdirAll(cfg.ResultsDir, 0o755); err != nil {
		return "", fmt.Errorf("cannot create %q: %w", cfg.ResultsDir, err)
	}
	jsonPath := filepath.Join(cfg.ResultsDir, cfg.ID+".json")
	svgPath := filepath.Join(cfg.ResultsDir, cfg.ID+".svg")
	if err := WriteRun(jsonPath, r); err != nil {
		return "", err
	}
	if err := writeFileAtomic(svgPath, []byte(ChartSVG(r))); err != nil {
		return "", err
	}
	if cfg.README == "" {
		return jsonPath, nil
	}
	history, err := ReadRuns(cfg.ResultsDir)
	if err != nil {
		return "", err
	}
	if err := updateREADME(cfg.README, MarkerStart, MarkerEnd, RenderResults(r, relTo(cfg.README, svgPath), history)); err != nil {
		return "", err
	}
	return jsonPath, nil
}
