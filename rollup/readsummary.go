package rollup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/lineproto"
)

// Summary is a run's summary as the summary topic holds it.
type Summary struct {
	Run      string    `json:"run"`
	JobID    string    `json:"job_id,omitempty"`
	User     string    `json:"user,omitempty"`
	Name     string    `json:"name,omitempty"`
	State    string    `json:"state"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
	// WallTime is Ended−Started in seconds (0 while either is unknown).
	WallTime float64 `json:"wall_time_s,omitempty"`
	// Nodes are the job's nodes, or the hosts of its samples when the
	// registry names none; Hosts the hosts of its samples.
	Nodes []string `json:"nodes"`
	Hosts []string `json:"hosts"`
	// PolicyVersions are the distinct values of the field policy_version
	// in the run's samples (PolicyVersionField).
	PolicyVersions []int64 `json:"policy_versions"`
	// DroppedSamples counts field values of metrics over the worker's
	// --max-run-metrics.
	DroppedSamples int64 `json:"dropped_samples"`
	// Updated is when the worker produced this version of the summary.
	Updated time.Time       `json:"updated"`
	Metrics []MetricSummary `json:"metrics"`
}

// MetricSummary is one metric (measurement.field) of a run over all its
// series and nodes. The statistics are nil when the metric had no finite
// numeric value; Last is a number, a string or a boolean.
type MetricSummary struct {
	Metric    string   `json:"metric"`
	Count     int64    `json:"count"`
	Nonfinite int64    `json:"nonfinite,omitempty"`
	Min       *float64 `json:"min,omitempty"`
	Mean      *float64 `json:"mean,omitempty"`
	Max       *float64 `json:"max,omitempty"`
	Sum       *float64 `json:"sum,omitempty"`
	P50       *float64 `json:"p50,omitempty"`
	P95       *float64 `json:"p95,omitempty"`
	P99       *float64 `json:"p99,omitempty"`
	Last      any      `json:"last,omitempty"`
}

// ReadSummary reads the summary of run from the summary topic (cfg's
// Brokers, ClientOpts and SummaryTopic; the other fields are not used).
// It reports false when the topic holds none (yet).
func ReadSummary(ctx context.Context, cfg Config, run string) (Summary, bool, error) {
	topic := cfg.SummaryTopic
	if topic == "" {
		topic = DefaultSummaryTopic
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.ClientOpts...)...)
	if err != nil {
		return Summary{}, false, fmt.Errorf("cannot connect to %v: %w", cfg.Brokers, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return Summary{}, false, fmt.Errorf("cannot describe the summary topic %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return Summary{}, false, nil
	}
	if d.Err != nil || len(d.Partitions) == 0 {
		return Summary{}, false, fmt.Errorf("cannot describe the summary topic %s: %v", topic, d.Err)
	}
	p := SummaryPartition(run, len(d.Partitions))
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return Summary{}, false, fmt.Errorf("cannot list the start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return Summary{}, false, fmt.Errorf("cannot list the end offsets of %s: %w", topic, err)
	}
	start, _ := starts.Lookup(topic, p)
	end, _ := ends.Lookup(topic, p)
	if end.Offset <= start.Offset {
		return Summary{}, false, nil
	}
	rd, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, cfg.ClientOpts...)...)
	if err != nil {
		return Summary{}, false, fmt.Errorf("cannot read %s: %w", topic, err)
	}
	defer rd.Close()
	lines := NewSummaryLines(run)
	for done := false; !done; {
		fs := rd.PollFetches(ctx)
		if err := PollError(ctx, fs); err != nil {
			return Summary{}, false, err
		}
		for _, r := range fs.Records() {
			if r.Offset+1 >= end.Offset {
				done = true
			}
			if !r.Attrs.IsControl() && r.Offset < end.Offset {
				lines.Add(r.Key, r.Value)
			}
		}
	}
	return lines.Summary()
}

// SummaryPartition is the partition, of a summary topic with n partitions,
// that holds the summary lines of run.
func SummaryPartition(run string, n int) int32 {
	return int32(runPartition([]byte(run), n)) //nolint:gosec // a partition index
}

// SummaryLines collects the summary of one run from the records of its
// partition of the summary topic (SummaryPartition), read in order: a
// reader that follows the topic calls Summary whenever it wants the run's
// latest figures.
type SummaryLines struct {
	run   string
	lines map[string][]byte // metric → its latest line
}

// NewSummaryLines collects the summary of run.
func NewSummaryLines(run string) *SummaryLines {
	return &SummaryLines{run: run, lines: map[string][]byte{}}
}

// Add takes one record of the summary topic; records of other runs are
// ignored, a tombstone forgets its metric.
func (s *SummaryLines) Add(key, value []byte) {
	if string(runOfKey(key)) != s.run || len(key) == len(s.run) {
		return
	}
	metric := string(key[len(s.run)+1:])
	if value == nil {
		delete(s.lines, metric)
	} else {
		s.lines[metric] = value
	}
}

// Summary returns the run's summary as the records added so far make it;
// false while they hold none.
func (s *SummaryLines) Summary() (Summary, bool, error) {
	if len(s.lines) == 0 {
		return Summary{}, false, nil
	}
	return parseSummary(s.run, s.lines)
}

// parseSummary builds a Summary from its lines; the run's figures come
// from the newest line.
func parseSummary(run string, lines map[string][]byte) (Summary, bool, error) {
	s := Summary{Run: run, PolicyVersions: []int64{}}
	var dec lineproto.Decoder
	var newest int64 = -1
	for _, metric := range slices.Sorted(maps.Keys(lines)) {
		if err := dec.Decode(bytes.TrimSuffix(lines[metric], []byte{'\n'})); err != nil {
			return Summary{}, false, fmt.Errorf("summary of run %q, metric %q: %w", run, metric, err)
		}
		m := MetricSummary{Metric: metric}
		var updated int64
		info := Summary{Run: run, PolicyVersions: []int64{}}
		stats := map[string]**float64{"min": &m.Min, "mean": &m.Mean, "max": &m.Max, "sum": &m.Sum, "p50": &m.P50, "p95": &m.P95, "p99": &m.P99}
		strs := map[string]*string{"state": &info.State, "job_id": &info.JobID, "user": &info.User, "name": &info.Name, "reason": &info.Reason}
		for i := range dec.Fields {
			f := &dec.Fields[i]
			k := string(f.Key)
			if p := stats[k]; p != nil {
				v := f.Float()
				*p = &v
				continue
			}
			if p := strs[k]; p != nil {
				*p = string(f.Str)
				continue
			}
			switch k {
			case "count":
				m.Count = f.Int()
			case "nonfinite":
				m.Nonfinite = f.Int()
			case "last", "last_string", "last_bool":
				m.Last = f.Interface()
			case "updated":
				updated = f.Int()
			case "exit_code":
				c := int(f.Int())
				info.ExitCode = &c
			case "started":
				info.Started = time.Unix(0, f.Int()).UTC()
			case "ended":
				info.Ended = time.Unix(0, f.Int()).UTC()
			case "wall_time_s":
				info.WallTime = f.Float()
			case "nodes":
				info.Nodes = splitNonEmpty(string(f.Str))
			case "hosts":
				info.Hosts = splitNonEmpty(string(f.Str))
			case "policy_versions":
				for _, v := range splitNonEmpty(string(f.Str)) {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						info.PolicyVersions = append(info.PolicyVersions, n)
					}
				}
			case "dropped_samples":
				info.DroppedSamples = f.Int()
			}
		}
		if updated > newest {
			newest = updated
			info.Updated = time.Unix(0, updated).UTC()
			info.Metrics = s.Metrics
			s = info
		}
		if metric != "" { // "": the line of a run without metrics
			s.Metrics = append(s.Metrics, m)
		}
	}
	if s.Metrics == nil {
		s.Metrics = []MetricSummary{}
	}
	return s, true, nil
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// PollError is why the records of a poll cannot be read: ctx's error once
// it is done, else the fetch error of a partition (the last fs holds),
// else nil.
func PollError(ctx context.Context, fs kgo.Fetches) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		ferr = fmt.Errorf("cannot read partition %d of %s: %w", p, t, err)
	})
	return ferr
}
