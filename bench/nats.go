package bench

import (
	"bufio"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// JetStreamResult is one `nats bench js pub …` run as parsed from natscli's
// (v0.5.0) text output. MBPerS is recomputed from msgs/s and the message
// size, in 10^6 bytes, to compare with simtel's figures; natscli's own
// binary-unit figure is kept in ReportedMiBPerS.
type JetStreamResult struct {
	Kind            string            `json:"kind"` // "jetstream"
	Label           string            `json:"label,omitempty"`
	ServerSync      string            `json:"server_sync,omitempty"` // the server's jetstream sync_interval
	Command         string            `json:"command,omitempty"`
	Benchmark       string            `json:"benchmark"` // e.g. "JetStream asynchronous publisher"
	Params          map[string]string `json:"params"`
	Clients         int               `json:"clients"`
	Msgs            int64             `json:"msgs"`
	MsgSize         int64             `json:"msg_size"`
	MsgsPerS        float64           `json:"msgs_per_s"`
	MBPerS          float64           `json:"mb_per_s"`
	ReportedMiBPerS float64           `json:"reported_mib_per_s"`
	// Latency is natscli's "per operation" latency in microseconds; for
	// asynchronous publishing an operation is a batch of publishes
	// (Params["batch"]) up to its last acknowledgement, so it is not a
	// per-message latency.
	Latency JetStreamLatency `json:"latency"`
}

// JetStreamLatency holds natscli's latency figures in microseconds.
type JetStreamLatency struct {
	MinUS  float64 `json:"min_us"`
	AvgUS  float64 `json:"avg_us"`
	P50US  float64 `json:"p50_us"`
	P90US  float64 `json:"p90_us"`
	P99US  float64 `json:"p99_us"`
	P999US float64 `json:"p999_us"`
	MaxUS  float64 `json:"max_us"`
}

var (
	natsHeaderRe  = regexp.MustCompile(`Starting (.+?) benchmark \[(.*)\]`)
	natsRateRe    = regexp.MustCompile(`stats: ([\d,.]+) msgs/sec ~ ([\d,.]+) ([KMGT]?i?B)/sec`)
	natsLatencyRe = regexp.MustCompile(`\b(min|avg|max|P50|P90|P99|P99\.9):? ([\d,.]+) ?(ns|us|µs|ms|s)\b`)
	natsSizeRe    = regexp.MustCompile(`^([\d.]+) ?([KMGT]?i?B)$`)
)

// ParseJetStreamBench parses the output of `nats bench js pub sync|async`.
// With several clients the aggregated figures are taken, otherwise the
// single publisher's.
func ParseJetStreamBench(out string) (*JetStreamResult, error) {
	res := &JetStreamResult{Kind: "jetstream", Params: map[string]string{}}
	var statsLine, latencyLine string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case res.Benchmark == "" && natsHeaderRe.MatchString(line):
			m := natsHeaderRe.FindStringSubmatch(line)
			res.Benchmark = m[1]
			for _, kv := range strings.Split(m[2], ", ") {
				k, v, ok := strings.Cut(kv, "=")
				if ok {
					res.Params[k] = v
				}
			}
		case strings.Contains(line, "aggregated stats:"):
			statsLine, latencyLine = line, ""
		case strings.Contains(line, "latencies per operation"):
			latencyLine = line
		case strings.Contains(line, " stats: ") && !strings.HasPrefix(strings.TrimSpace(line), "[") && statsLine == "":
			statsLine, latencyLine = line, line
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read nats bench output: %w", err)
	}
	if res.Benchmark == "" {
		return nil, errors.New("no benchmark header (Starting … benchmark [...]) in nats bench output")
	}
	if statsLine == "" {
		return nil, errors.New("no stats line in nats bench output")
	}
	m := natsRateRe.FindStringSubmatch(statsLine)
	if m == nil {
		return nil, fmt.Errorf("cannot parse nats bench stats line %q", statsLine)
	}
	var err error
	if res.MsgsPerS, err = parseGrouped(m[1]); err != nil {
		return nil, fmt.Errorf("msgs/sec in %q: %w", statsLine, err)
	}
	rate, err := parseGrouped(m[2])
	if err != nil {
		return nil, fmt.Errorf("throughput in %q: %w", statsLine, err)
	}
	res.ReportedMiBPerS = rate * float64(byteUnit(m[3])) / (1 << 20)

	if v, ok := res.Params["clients"]; ok {
		if res.Clients, err = strconv.Atoi(v); err != nil {
			return nil, fmt.Errorf("clients=%q: %w", v, err)
		}
	}
	if v, ok := res.Params["msgs"]; ok {
		n, err := parseGrouped(v)
		if err != nil {
			return nil, fmt.Errorf("msgs=%q: %w", v, err)
		}
		res.Msgs = int64(n)
	}
	if v, ok := res.Params["msg-size"]; ok {
		if res.MsgSize, err = parseSize(v); err != nil {
			return nil, fmt.Errorf("msg-size=%q: %w", v, err)
		}
	}
	res.MBPerS = res.MsgsPerS * float64(res.MsgSize) / 1e6

	l := &res.Latency
	latencyOf := map[string]*float64{"min": &l.MinUS, "avg": &l.AvgUS, "max": &l.MaxUS,
		"P50": &l.P50US, "P90": &l.P90US, "P99": &l.P99US, "P99.9": &l.P999US}
	for _, m := range natsLatencyRe.FindAllStringSubmatch(latencyLine, -1) {
		v, err := parseGrouped(m[2])
		if err != nil {
			return nil, fmt.Errorf("latency %s in %q: %w", m[1], latencyLine, err)
		}
		if p := latencyOf[m[1]]; p != nil {
			*p = v * timeUnitMicros(m[3])
		}
	}
	return res, nil
}

// parseGrouped parses a number with thousands separators: "147,680.5".
func parseGrouped(s string) (float64, error) {
	return strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
}

// parseSize parses natscli's (go-humanize's) sizes: "1.0 KiB", "128 B",
// "1KB" (decimal units are read as natscli reads its --size flag:
// binary).
func parseSize(s string) (int64, error) {
	m := natsSizeRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	return int64(v*float64(byteUnit(m[2])) + 0.5), nil
}

func byteUnit(u string) int64 {
	switch strings.TrimSuffix(strings.TrimSuffix(u, "B"), "i") {
	case "K":
		return 1 << 10
	case "M":
		return 1 << 20
	case "G":
		return 1 << 30
	case "T":
		return 1 << 40
	}
	return 1
}

func timeUnitMicros(u string) float64 {
	switch u {
	case "ns":
		return 1e-3
	case "ms":
		return 1e3
	case "s":
		return 1e6
	}
	return 1 // us, µs
}
