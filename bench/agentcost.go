package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The agent side of `simtel bench agent`: what the agent's /metrics and the
// broker say happened to the lines the generator sent. A step compares
// snapshots taken before its first line and after the agent has shipped
// what it accepted:
//
//	sent (generator) → received (agent, by listener) → accepted (spooled)
//	                 → shipped (acknowledged by the broker) → delivered (end offsets)
//
// Every record the agent produces is one line and one offset (no
// transactions, so no control records), so the growth of the topic's end
// offsets counts what reached the broker independently of the agent's own
// bookkeeping.

// The agent's metrics (agent/metrics.go) read here.
const (
	metricReceived    = "simtel_agent_samples_received_total" // by listener
	metricParseErrors = "simtel_agent_parse_errors_total"     // by listener
	metricSpooled     = "simtel_agent_samples_spooled_total"
	metricSpoolErrors = "simtel_agent_spool_errors_total"
	metricSent        = "simtel_agent_samples_sent_total"
	metricDropped     = "simtel_agent_samples_dropped_total" // by reason
	metricPending     = "simtel_agent_spool_pending_samples"
)

// agentCounters is one reading of the agent's counters. Counters of a
// listener or reason the agent has not seen yet are absent, which reads as 0.
type agentCounters struct {
	Received    map[string]int64 // by listener
	ParseErrors map[string]int64 // by listener
	Spooled     int64
	SpoolErrors int64 // appends that failed (each may hold many samples)
	Sent        int64 // acknowledged by the broker
	Dropped     int64 // all reasons
	Pending     int64 // spooled, not yet acknowledged
}

// parseAgentMetrics reads the counters from a Prometheus text exposition.
// A counter that is missing altogether is an error: it means the exposition
// is not an agent's (or the agent's metric names changed).
func parseAgentMetrics(r io.Reader) (agentCounters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return agentCounters{}, fmt.Errorf("cannot parse metrics: %w", err)
	}
	c := agentCounters{Received: map[string]int64{}, ParseErrors: map[string]int64{}}
	value := func(name string, dst *int64) error {
		f, ok := fams[name]
		if !ok {
			return fmt.Errorf("metric %s is missing", name)
		}
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				*dst += int64(m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				*dst += int64(m.GetGauge().GetValue())
			case m.GetUntyped() != nil:
				*dst += int64(m.GetUntyped().GetValue())
			}
		}
		return nil
	}
	byLabel := func(name, label string, dst map[string]int64) {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					dst[l.GetValue()] += int64(m.GetCounter().GetValue())
				}
			}
		}
	}
	for _, v := range []struct {
		name string
		dst  *int64
	}{{metricSpooled, &c.Spooled}, {metricSent, &c.Sent}, {metricPending, &c.Pending}} {
		if err := value(v.name, v.dst); err != nil {
			return agentCounters{}, err
		}
	}
	// Vectors without any child yet are not exposed at all.
	_ = value(metricSpoolErrors, &c.SpoolErrors)
	_ = value(metricDropped, &c.Dropped)
	byLabel(metricReceived, "listener", c.Received)
	byLabel(metricParseErrors, "listener", c.ParseErrors)
	return c, nil
}

// agentProbe reads the agent's metrics over HTTP and the topic's end
// offsets from the broker.
type agentProbe struct {
	metricsURL string
	http       *http.Client
	topic      string
	cl         *kgo.Client // nil: no broker to ask
	adm        *kadm.Client
}

func newAgentProbe(agentHTTP string, brokers []string, sec []kgo.Opt, topic string, log *slog.Logger) (*agentProbe, error) {
	p := &agentProbe{
		metricsURL: "http://" + agentHTTP + "/metrics",
		http:       &http.Client{Timeout: 10 * time.Second},
		topic:      topic,
	}
	if len(brokers) > 0 {
		// kadm answers from kgo's metadata cache for MetadataMinAge (5 s
		// by default): the topic the agent creates with its first record
		// would stay unknown, and its offsets 0, that long.
		cl, err := kgo.NewClient(append(clientOpts(brokers, sec, log, "simtel-bench-agent"), kgo.MetadataMinAge(50*time.Millisecond))...)
		if err != nil {
			return nil, fmt.Errorf("cannot create admin client for %v: %w", brokers, err)
		}
		p.cl, p.adm = cl, kadm.NewClient(cl)
	}
	return p, nil
}

func (p *agentProbe) close() {
	if p.cl != nil {
		p.cl.Close()
	}
}

func (p *agentProbe) counters(ctx context.Context) (agentCounters, error) {
	return scrapeMetrics(ctx, p.http, p.metricsURL, "agent", parseAgentMetrics)
}

// scrapeMetrics reads the /metrics page at url, of the agent or the broker
// as what says, and parses it.
func scrapeMetrics[T any](ctx context.Context, cl *http.Client, url, what string, parse func(io.Reader) (T, error)) (T, error) {
	var zero T
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return zero, fmt.Errorf("cannot read %s metrics %s: %w", what, url, err)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return zero, fmt.Errorf("cannot read %s metrics: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return zero, fmt.Errorf("cannot read %s metrics: %s answered %s", what, url, resp.Status)
	}
	c, err := parse(resp.Body)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", url, err)
	}
	return c, nil
}

// endOffsets is the sum of the topic's end offsets; a topic that does not
// exist yet (the agent creates it with its first record) has 0.
func (p *agentProbe) endOffsets(ctx context.Context) (int64, error) {
	listed, err := p.adm.ListEndOffsets(ctx, p.topic)
	if err != nil {
		return 0, fmt.Errorf("cannot list end offsets of topic %q: %w", p.topic, err)
	}
	var sum int64
	var firstErr error
	listed.Each(func(o kadm.ListedOffset) {
		switch {
		case o.Err == nil:
			sum += o.Offset
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition) && o.Partition == -1:
		case firstErr == nil:
			firstErr = fmt.Errorf("cannot list end offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
		}
	})
	return sum, firstErr
}

// agentSnapshot is what a step compares: the agent's counters, the topic's
// end offsets and the kernel's drop count of the agent's UDP socket.
type agentSnapshot struct {
	At       time.Time
	Counters agentCounters
	Offsets  int64
	UDP      udpSocket
}

// snapshot reads everything the probe and proc can read; udpPort 0 skips
// the socket.
func (p *agentProbe) snapshot(ctx context.Context, proc *procReader, udpPort int) (agentSnapshot, error) {
	s := agentSnapshot{At: time.Now()}
	var err error
	if s.Counters, err = p.counters(ctx); err != nil {
		return s, err
	}
	if p.adm != nil {
		if s.Offsets, err = p.endOffsets(ctx); err != nil {
			return s, err
		}
	}
	if proc != nil && udpPort > 0 {
		if s.UDP, err = proc.udp(udpPort); err != nil {
			return s, err
		}
	}
	return s, nil
}

// waitIdle polls the agent until nothing it accepted waits to be shipped
// (its spool has nothing pending, and it has shipped or dropped at least
// what it spooled since since), its received count stopped moving and, if
// socketEmpty is not nil, nothing waits in its UDP socket; or until
// timeout. It returns the last reading and whether the agent was idle.
//
// The socket matters: the agent lets datagrams gather in it for up to its
// --packet-gather (1 s), longer than the received count stands still
// between two polls.
//
// want is how many lines the agent should have received since since (-1:
// unknown). Until they all have, counts that stand still for one poll may
// be an agent descheduled between reading lines and counting them (a slow
// spool write on a busy disk), so idle then needs them still for
// idleShort; lines really lost (UDP drops) end the wait after it.
func (p *agentProbe) waitIdle(ctx context.Context, since agentCounters, want int64, timeout time.Duration, socketEmpty func() bool) (agentCounters, bool, error) {
	deadline := time.Now().Add(timeout)
	var last agentCounters
	var still time.Time // since when the counts stand still; zero while they move
	for first := true; ; first = false {
		c, err := p.counters(ctx)
		if err != nil {
			return c, false, err
		}
		accepted := c.Spooled - since.Spooled
		done := c.Sent - since.Sent + c.Dropped - since.Dropped
		if !first && c.Pending == 0 && done >= accepted && sumCounts(c.Received) == sumCounts(last.Received) &&
			(socketEmpty == nil || socketEmpty()) {
			if still.IsZero() {
				still = time.Now()
			}
			if want < 0 || sumCounts(c.Received)-sumCounts(since.Received) >= want || time.Since(still) >= idleShort {
				return c, true, nil
			}
		} else {
			still = time.Time{}
		}
		last = c
		if time.Now().After(deadline) {
			return c, false, nil
		}
		select {
		case <-ctx.Done():
			return c, false, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// idleShort is how long the counts must stand still before waitIdle calls
// an agent that received fewer lines than were sent idle.
const idleShort = 2 * time.Second

func sumCounts(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// AgentDelivery accounts for every line of a step, warmup included, from the
// generator to the broker. Counts are the growth over the step.
type AgentDelivery struct {
	Sent        int64 `json:"sent"`         // lines the generator wrote (UDP, TCP) or POSTed (HTTP)
	HTTPOK      int64 `json:"http_ok"`      // HTTP: lines of requests answered 2xx
	Received    int64 `json:"received"`     // simtel_agent_samples_received_total of the listener
	ParseErrors int64 `json:"parse_errors"` // simtel_agent_parse_errors_total of the listener
	Accepted    int64 `json:"accepted"`     // simtel_agent_samples_spooled_total
	SpoolErrors int64 `json:"spool_errors"` // simtel_agent_spool_errors_total (failed appends)
	Shipped     int64 `json:"shipped"`      // simtel_agent_samples_sent_total: acknowledged by the broker
	Dropped     int64 `json:"dropped"`      // simtel_agent_samples_dropped_total, all reasons
	// Delivered is the growth of the topic's end offsets, summed over its
	// partitions; -1 when no broker was given.
	Delivered int64 `json:"delivered"`
	// UDP: datagrams the kernel dropped on the agent's socket (its receive
	// buffer was full), from the drops column of /proc/<pid>/net/udp; -1
	// when the socket was not found.
	UDPSocketDrops int64 `json:"udp_socket_drops,omitempty"`
	// DrainS is how long after the last line the agent took to ship
	// everything it accepted.
	DrainS float64 `json:"drain_s"`
	// Idle is false when the agent still had samples to ship when the
	// drain timeout ran out; the counts are then a lower bound.
	Idle bool `json:"idle"`
	// Complete: every line sent was received, accepted, shipped and is in
	// the topic (for UDP, a line the kernel dropped is not complete).
	Complete bool `json:"complete"`
}

func newAgentDelivery(before, after agentSnapshot, listener string, sent, httpOK int64, udp bool, withOffsets bool) *AgentDelivery {
	b, a := before.Counters, after.Counters
	d := &AgentDelivery{
		Sent:        sent,
		HTTPOK:      httpOK,
		Received:    a.Received[listener] - b.Received[listener],
		ParseErrors: a.ParseErrors[listener] - b.ParseErrors[listener],
		Accepted:    a.Spooled - b.Spooled,
		SpoolErrors: a.SpoolErrors - b.SpoolErrors,
		Shipped:     a.Sent - b.Sent,
		Dropped:     a.Dropped - b.Dropped,
		Delivered:   -1,
	}
	if withOffsets {
		d.Delivered = after.Offsets - before.Offsets
	}
	if udp {
		d.UDPSocketDrops = -1
		if after.UDP.Found {
			d.UDPSocketDrops = after.UDP.Drops - before.UDP.Drops
		}
	}
	d.Complete = d.Received == d.Sent && d.Accepted == d.Received && d.Shipped == d.Accepted &&
		(d.Delivered < 0 || d.Delivered == d.Accepted)
	return d
}

// writeAgentProfile fetches a CPU profile of the agent from its pprof
// handler for the given whole seconds and writes it to path.
func writeAgentProfile(ctx context.Context, agentHTTP string, seconds int, path string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", agentHTTP, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot profile the agent: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("cannot profile the agent: %s answered %s: %s", url, resp.Status, msg)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cannot write agent profile: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("cannot write agent profile %q: %w", path, err)
	}
	return f.Close()
}
