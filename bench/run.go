package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Run is one side-by-side comparison: the results of its steps and the
// exact commands that produced them, as bench/compare.sh records them in
// bench/results/<id>.json.
type Run struct {
	ID      string  `json:"id"`      // file name stem, e.g. 2025-11-29-134501
	Date    string  `json:"date"`    // RFC 3339, UTC
	Host    string  `json:"host"`    // a description of the machine
	Command string  `json:"command"` // how the whole run was started
	Steps   []Step  `json:"steps"`
	Summary Summary `json:"summary"` // derived from Steps by Summarize
}

// Step is one measurement of a run. At most one result is set; a step
// whose command failed has Error, and a result only if the command still
// printed one (a failed run reports what it measured before it failed).
type Step struct {
	Label     string           `json:"label"`
	Command   string           `json:"command"`
	Error     string           `json:"error,omitempty"`
	Disk      *DiskResult      `json:"disk,omitempty"`
	Produce   *ProduceResult   `json:"produce,omitempty"`
	Consume   *ConsumeResult   `json:"consume,omitempty"`
	JetStream *JetStreamResult `json:"jetstream,omitempty"`
}

// Summary holds the figures the README table shows. Zero means the run had
// no such step. Latencies are in milliseconds, MB is 10^6 bytes.
type Summary struct {
	ProduceMsgsPerS float64 `json:"produce_msgs_per_s"`
	ProduceMBPerS   float64 `json:"produce_mb_per_s"`
	ProduceP50MS    float64 `json:"produce_p50_ms"`
	ProduceP99MS    float64 `json:"produce_p99_ms"`
	ProduceP999MS   float64 `json:"produce_p999_ms"`
	// The last three seconds of the full-speed run: on a disk that takes a
	// burst faster than it sustains, this is the sustained rate.
	ProduceTailMsgsPS float64 `json:"produce_last3s_msgs_per_s"`
	ProduceTailMBPerS float64 `json:"produce_last3s_mb_per_s"`
	ProduceAcks       string  `json:"produce_acks,omitempty"`
	RecordSize        int     `json:"record_size,omitempty"`

	// Paced: a produce run held to a fixed rate below saturation, whose
	// latency is the broker's rather than the client buffer's.
	PacedRate   float64 `json:"paced_rate,omitempty"` // the requested records/s
	PacedMsgsPS float64 `json:"paced_msgs_per_s,omitempty"`
	PacedP50MS  float64 `json:"paced_p50_ms,omitempty"`
	PacedP99MS  float64 `json:"paced_p99_ms,omitempty"`
	PacedP999MS float64 `json:"paced_p999_ms,omitempty"`

	// JetStream: the fastest publish run against a server with its default
	// sync_interval (data is written to the OS and fsynced every two
	// minutes) and the fastest with sync_interval always (fsync before
	// every acknowledgement, the durability of acks=all here).
	JSMsgsPerS       float64 `json:"jetstream_msgs_per_s"`
	JSMBPerS         float64 `json:"jetstream_mb_per_s"`
	JSLabel          string  `json:"jetstream_label,omitempty"`
	Ratio            float64 `json:"ratio_msgs"` // simtel produce msgs/s ÷ JSMsgsPerS
	JSAlwaysMsgsPerS float64 `json:"jetstream_sync_always_msgs_per_s"`
	JSAlwaysMBPerS   float64 `json:"jetstream_sync_always_mb_per_s"`
	JSAlwaysLabel    string  `json:"jetstream_sync_always_label,omitempty"`
	RatioAlways      float64 `json:"ratio_msgs_sync_always"`

	DiskSeqMBPerS float64 `json:"disk_seq_fdatasync_mb_per_s"` // the best disk step's
	DiskAppendsPS float64 `json:"disk_4k_fdatasync_appends_per_s"`
	DiskAppendP50 float64 `json:"disk_4k_fdatasync_p50_ms"`
	DiskFraction  float64 `json:"produce_fraction_of_disk"` // ProduceMBPerS ÷ DiskSeqMBPerS
	// The disk's sustained fdatasync bandwidth (the best disk step's), and
	// ProduceTailMBPerS as a fraction of it.
	DiskSustainMBPerS     float64 `json:"disk_sustained_fdatasync_mb_per_s,omitempty"`
	DiskSustainedFraction float64 `json:"produce_last3s_fraction_of_sustained_disk,omitempty"`
	ConsumeRawMBPS        float64 `json:"consume_raw_mb_per_s"`
	ConsumeMBPS           float64 `json:"consume_poll_mb_per_s"`
}

// SyncAlways is the JetStreamResult.ServerSync value of a server that
// fsyncs before acknowledging.
const SyncAlways = "always"

// Summarize derives the summary from the steps that did not fail: the
// first produce step without a rate limit and the first with one (paced),
// the best of the disk steps, the first raw and poll consume steps, and
// the JetStream steps described in Summary.
func (r *Run) Summarize() {
	s := Summary{}
	var produce, paced *ProduceResult
	for _, st := range r.Steps {
		if st.Error != "" {
			continue // a failed step's figures are not the system's
		}
		switch {
		case st.Produce != nil && st.Produce.Settings.Rate == 0 && produce == nil:
			produce = st.Produce
		case st.Produce != nil && st.Produce.Settings.Rate > 0 && paced == nil:
			paced = st.Produce
		case st.Disk != nil:
			// A shared disk's speed moves within a run: the best of the
			// disk steps is taken, which makes DiskFraction conservative.
			s.DiskSeqMBPerS = max(s.DiskSeqMBPerS, st.Disk.SeqMBPerS)
			s.DiskSustainMBPerS = max(s.DiskSustainMBPerS, st.Disk.SustainMBPerS)
			if st.Disk.AppendsPS > s.DiskAppendsPS {
				s.DiskAppendsPS = st.Disk.AppendsPS
				s.DiskAppendP50 = float64(st.Disk.AppendLat.P50US) / 1e3
			}
		case st.Consume != nil && st.Consume.Settings.Mode == "raw" && s.ConsumeRawMBPS == 0:
			s.ConsumeRawMBPS = st.Consume.MBPerS
		case st.Consume != nil && st.Consume.Settings.Mode == "poll" && s.ConsumeMBPS == 0:
			s.ConsumeMBPS = st.Consume.MBPerS
		case st.JetStream != nil && st.JetStream.ServerSync == SyncAlways:
			if st.JetStream.MsgsPerS > s.JSAlwaysMsgsPerS {
				s.JSAlwaysMsgsPerS, s.JSAlwaysMBPerS, s.JSAlwaysLabel = st.JetStream.MsgsPerS, st.JetStream.MBPerS, st.Label
			}
		case st.JetStream != nil:
			if st.JetStream.MsgsPerS > s.JSMsgsPerS {
				s.JSMsgsPerS, s.JSMBPerS, s.JSLabel = st.JetStream.MsgsPerS, st.JetStream.MBPerS, st.Label
			}
		}
	}
	if produce != nil {
		s.ProduceMsgsPerS = produce.RecPerS
		s.ProduceMBPerS = produce.MBPerS
		s.ProduceP50MS = float64(produce.Latency.P50US) / 1e3
		s.ProduceP99MS = float64(produce.Latency.P99US) / 1e3
		s.ProduceP999MS = float64(produce.Latency.P999US) / 1e3
		s.ProduceAcks = produce.Settings.Acks
		s.RecordSize = produce.Settings.RecordSize
		if tl := produce.Timeline; len(tl) > 0 {
			tail := tl[max(0, len(tl)-3):]
			for _, v := range tail {
				s.ProduceTailMsgsPS += v / float64(len(tail))
			}
			s.ProduceTailMBPerS = s.ProduceTailMsgsPS * float64(produce.Settings.RecordSize) / 1e6
		}
	}
	if paced != nil {
		s.PacedRate = paced.Settings.Rate
		s.PacedMsgsPS = paced.RecPerS
		s.PacedP50MS = float64(paced.Latency.P50US) / 1e3
		s.PacedP99MS = float64(paced.Latency.P99US) / 1e3
		s.PacedP999MS = float64(paced.Latency.P999US) / 1e3
	}
	s.Ratio = ratio(s.ProduceMsgsPerS, s.JSMsgsPerS)
	s.RatioAlways = ratio(s.ProduceMsgsPerS, s.JSAlwaysMsgsPerS)
	s.DiskFraction = ratio(s.ProduceMBPerS, s.DiskSeqMBPerS)
	s.DiskSustainedFraction = ratio(s.ProduceTailMBPerS, s.DiskSustainMBPerS)
	r.Summary = s
}

func ratio(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

// ReadRun reads a run file.
func ReadRun(path string) (*Run, error) { return readJSON[Run](path, "run") }

// WriteRun writes r to path, indented, through a temporary file.
func WriteRun(path string, r *Run) error { return writeJSON(path, "run", r) }

// AddStep parses a step's output and appends it to the run in path,
// creating the run file if it does not exist. kind is disk, produce,
// consume (output of the matching simtel bench command with --json) or
// jetstream (the text output of nats bench js pub); serverSync is the
// JetStream server's sync_interval ("" for its default). failure, if not
// empty, says how the step's command failed: the step is recorded with it,
// with whatever result the output still holds, and no parse error is
// returned.
func AddStep(path, kind, label, command, serverSync, failure string, output []byte) error {
	r, err := readOrNew[Run](path, "run")
	if err != nil {
		return err
	}
	st := Step{Label: label, Command: command, Error: failure}
	var target any
	switch kind {
	case "disk":
		st.Disk = &DiskResult{}
		target = st.Disk
	case "produce":
		st.Produce = &ProduceResult{}
		target = st.Produce
	case "consume":
		st.Consume = &ConsumeResult{}
		target = st.Consume
	case "jetstream":
		js, err := ParseJetStreamBench(string(output))
		switch {
		case err == nil:
			js.Label, js.Command, js.ServerSync = label, command, serverSync
			st.JetStream = js
		case failure == "":
			return fmt.Errorf("step %q: %w", label, err)
		}
	default:
		return fmt.Errorf("step kind %q is not disk, produce, consume or jetstream", kind)
	}
	if target != nil {
		if err := json.Unmarshal(output, target); err != nil {
			if failure == "" {
				return fmt.Errorf("step %q: cannot decode %s result: %w", label, kind, err)
			}
			st.Disk, st.Produce, st.Consume = nil, nil, nil
		}
	}
	r.Steps = append(r.Steps, st)
	return WriteRun(path, r)
}

// ReadRuns reads every *.json run in dir, oldest first by ID.
func ReadRuns(dir string) ([]*Run, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var runs []*Run
	for _, p := range paths {
		r, err := ReadRun(p)
		if err != nil {
			return nil, err
		}
		if r.ID == "" {
			r.ID = strings.TrimSuffix(filepath.Base(p), ".json")
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].ID < runs[j].ID })
	return runs, nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("cannot write %q: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write %q: %w", path, err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write %q: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cannot write %q: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cannot write %q: %w", path, err)
	}
	return nil
}
