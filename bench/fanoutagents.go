package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Agents mode of `simtel bench fanout`: the nodes are real `simtel agent`
// processes started by someone else (bench/fanout-netns.sh starts one per
// network namespace, each behind a rate-limited link), following the
// policy. For each agent the run long-polls GET /v1/policy/<name>?after=V
// (what a worker on that node does) and records when the agent answers
// with the new version; it reads the agents' /metrics before and after
// (bytes received from the brokers and from peers, CPU) and, when given
// the links, the byte counters of the interfaces in /sys/class/net.
//
// The links are the root-namespace ends of veth pairs: what the broker
// sends on its link arrives as bytes received on BrokerLink, what a node
// receives leaves its link's root end as bytes transmitted.

// FanoutAgents is the mode whose nodes are agent processes.
const FanoutAgents = "agents"

// Issue targets of agents mode: broker egress per version at most
// TargetEgressVersions × the version's size (with relay), the last node
// within TargetLinkFactor × (size ÷ link rate) of the publish, a delta
// moving at most TargetDeltaFraction of the version's bytes to each node.
const (
	TargetEgressVersions = 4.0
	TargetLinkFactor     = 3.0
	TargetDeltaFraction  = 0.10
)

// agentPolicyPrefix names the agent's per-policy metrics; every
// simtel_agent_policy_*_bytes_total counter with the policy's label is
// read, so the counters of the relay are reported whatever they are called.
const (
	agentPolicyPrefix = "simtel_agent_policy_"
	agentCPUMetric    = "process_cpu_seconds_total"
	agentReceived     = "simtel_agent_policy_received_bytes_total"
)

// FanoutAgent is one agent of an agents-mode run.
type FanoutAgent struct {
	URL  string `json:"url"`
	Link string `json:"link,omitempty"`
	// HeldS is the time from the Publish call until the agent answered
	// the long poll with the new version (0: it did not).
	HeldS float64 `json:"held_s"`
	Err   string  `json:"error,omitempty"`
	// LinkInBytes and LinkOutBytes are the bytes its link carried to and
	// from the node over the measurement (from the link's counters).
	LinkInBytes  int64 `json:"link_in_bytes,omitempty"`
	LinkOutBytes int64 `json:"link_out_bytes,omitempty"`
	// Counters is the growth of the agent's simtel_agent_policy_*_bytes_total
	// counters for the policy, by metric name without the prefix and suffix
	// ("received", "reused", ...).
	Counters map[string]int64 `json:"counters,omitempty"`
	CPUS     float64          `json:"cpu_s"`
}

// FanoutLinks sums an agents-mode run's per-node figures.
type FanoutLinks struct {
	// BrokerOutBytes is what the broker's link carried out of the broker
	// (the broker's egress at the link layer: Ethernet and IP headers,
	// TCP, every protocol); 0 without BrokerLink.
	BrokerOutBytes int64 `json:"broker_out_bytes,omitempty"`
	BrokerInBytes  int64 `json:"broker_in_bytes,omitempty"`
	// NodeIn* are the bytes each node's link carried to it, NodeOut*
	// what the nodes sent (to peers, when they relay).
	NodeInMean   float64 `json:"node_in_bytes_mean,omitempty"`
	NodeInMax    int64   `json:"node_in_bytes_max,omitempty"`
	NodeOutTotal int64   `json:"node_out_bytes_total,omitempty"`
	NodeOutMax   int64   `json:"node_out_bytes_max,omitempty"`
	// NodeReceived* are the agents' simtel_agent_policy_received_bytes_total
	// growth: policy bytes each took from the brokers.
	NodeReceivedMean float64 `json:"node_received_bytes_mean"`
	NodeReceivedMax  int64   `json:"node_received_bytes_max"`
	// AgentsCPUS is the CPU time all agents used (process_cpu_seconds_total).
	AgentsCPUS float64 `json:"agents_cpu_s"`
}

// FanoutNetTargets judges an agents-mode run against the targets.
type FanoutNetTargets struct {
	// LinkRate is the links' rate in bits per second; LinkLimitS is the
	// version's size over it, the time one node's link needs.
	LinkRate   float64 `json:"link_rate_bps"`
	LinkLimitS float64 `json:"link_limit_s"`
	// LastOverLinkLimit is the last node's time over LinkLimitS (target
	// ≤ TargetLinkFactor).
	LastOverLinkLimit float64 `json:"last_over_link_limit"`
	TimeMet           bool    `json:"time_met"`
	// EgressOverSize is the broker's egress (its link's bytes out, else
	// its response bytes) over the version's size (target ≤
	// TargetEgressVersions).
	EgressOverSize float64 `json:"egress_over_size"`
	EgressMet      bool    `json:"egress_met"`
	// NodeInMaxOverSize is, for a delta, the most bytes a node's link
	// carried to it (else the most it received from the brokers) over the
	// version's size (target ≤ TargetDeltaFraction).
	NodeInMaxOverSize float64 `json:"node_in_max_over_size,omitempty"`
	DeltaMet          bool    `json:"delta_met,omitempty"`
	// CPUFloorS is the CPU the broker, the agents and this process used
	// over the machine's CPUs: how long that work takes with every CPU
	// on it. LinksFloorS is how long the links need at least: the
	// busiest link's bytes (the broker's egress, the most a node received
	// or the most a node sent to its peers) at the link rate.
	// Bound is the larger of the two floors ("cpu" or "links"), the
	// limit the run was up against.
	CPUFloorS   float64 `json:"cpu_floor_s"`
	LinksFloorS float64 `json:"links_floor_s,omitempty"`
	Bound       string  `json:"bound"`
}

// agentPolicyCounters is one reading of an agent's /metrics for the policy.
type agentPolicyCounters struct {
	bytes map[string]int64 // by short name
	cpu   float64
}

func parseAgentCounters(policy string) func(io.Reader) (agentPolicyCounters, error) {
	return func(r io.Reader) (agentPolicyCounters, error) {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(r)
		if err != nil {
			return agentPolicyCounters{}, fmt.Errorf("cannot parse metrics: %w", err)
		}
		if _, ok := fams[agentReceived]; !ok {
			return agentPolicyCounters{}, fmt.Errorf("metric %s is missing: not an agent following policies", agentReceived)
		}
		c := agentPolicyCounters{bytes: map[string]int64{}}
		for name, f := range fams {
			if !strings.HasPrefix(name, agentPolicyPrefix) || !strings.HasSuffix(name, "_bytes_total") {
				continue
			}
			short := strings.TrimSuffix(strings.TrimPrefix(name, agentPolicyPrefix), "_bytes_total")
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "policy" && l.GetValue() == policy {
						c.bytes[short] += int64(counterValue(m.GetCounter().GetValue(), m.GetUntyped().GetValue()))
					}
				}
			}
		}
		for _, m := range fams[agentCPUMetric].GetMetric() {
			c.cpu += counterValue(m.GetCounter().GetValue(), m.GetUntyped().GetValue())
		}
		return c, nil
	}
}

// linkCounters reads an interface's byte counters.
func linkCounters(iface string) (rx, tx int64, err error) {
	read := func(name string) (int64, error) {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", iface, "statistics", name))
		if err != nil {
			return 0, fmt.Errorf("link %s: %w", iface, err)
		}
		return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	if rx, err = read("rx_bytes"); err != nil {
		return 0, 0, err
	}
	tx, err = read("tx_bytes")
	return rx, tx, err
}

// Reading the agents' /metrics: agentScrapes at a time, each within
// agentScrapeTimeout, up to agentScrapeTries times. On a machine the run
// keeps busy (every agent, the broker and the bench sharing a few cores)
// an agent's answer can take longer than any bound a person would wait
// for one, and a reading missed after the version moved loses the run's
// figures; the reading is of counters, so a late one is as good.
const (
	agentScrapes       = 8
	agentScrapeTimeout = time.Minute
	agentScrapeTries   = 4
)

// scrapeAgent reads one agent's counters, trying again when the request
// fails (no answer in time, a connection refused or reset).
func scrapeAgent(ctx context.Context, cl *http.Client, url string, parse func(io.Reader) (agentPolicyCounters, error)) (agentPolicyCounters, error) {
	var err error
	for try := range agentScrapeTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return agentPolicyCounters{}, ctx.Err()
			case <-time.After(time.Duration(try) * time.Second):
			}
		}
		var c agentPolicyCounters
		if c, err = scrapeMetrics(ctx, cl, url, "agent", parse); err == nil {
			return c, nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || ctx.Err() != nil {
			return c, err // an answer, not the counters: asking again gives the same
		}
	}
	return agentPolicyCounters{}, fmt.Errorf("%w (%d tries, each within %s)", err, agentScrapeTries, agentScrapeTimeout)
}

// agentsReading is what is read before and after the measurement.
type agentsReading struct {
	agents         []agentPolicyCounters
	links          [][2]int64 // rx, tx of each node's link
	brokerRx       int64
	brokerTx       int64
	brokerLinkRead bool
}

func (r *fanoutRun) readAgents(ctx context.Context, cl *http.Client) (agentsReading, error) {
	cfg := r.cfg
	var a agentsReading
	a.agents = make([]agentPolicyCounters, len(cfg.Agents))
	errs := make([]error, len(cfg.Agents))
	var wg sync.WaitGroup
	sem := make(chan struct{}, agentScrapes)
	for i, u := range cfg.Agents {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			a.agents[i], errs[i] = scrapeAgent(ctx, cl, u+"/metrics", parseAgentCounters(cfg.Policy))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return a, err
	}
	if len(cfg.AgentLinks) > 0 {
		a.links = make([][2]int64, len(cfg.AgentLinks))
		for i, l := range cfg.AgentLinks {
			rx, tx, err := linkCounters(l)
			if err != nil {
				return a, err
			}
			a.links[i] = [2]int64{rx, tx}
		}
	}
	if cfg.BrokerLink != "" {
		rx, tx, err := linkCounters(cfg.BrokerLink)
		if err != nil {
			return a, err
		}
		a.brokerRx, a.brokerTx, a.brokerLinkRead = rx, tx, true
	}
	return a, nil
}

// agentPolicy is the part of GET /v1/policy/<name> the run checks.
type agentPolicy struct {
	Version int64  `json:"version"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
}

// pollAgent long-polls an agent for a version above after until ctx ends.
// A 304 (the agent's wait ran out) polls again.
func pollAgent(ctx context.Context, cl *http.Client, base, policy string, after int64) (agentPolicy, error) {
	u := fmt.Sprintf("%s/v1/policy/%s?after=%d&wait=30s", base, url.PathEscape(policy), after)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return agentPolicy{}, err
		}
		resp, err := cl.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return agentPolicy{}, ctx.Err()
			}
			// An agent still starting refuses connections: try again.
			select {
			case <-ctx.Done():
				return agentPolicy{}, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		switch {
		case err != nil:
			return agentPolicy{}, fmt.Errorf("GET %s: %w", u, err)
		case resp.StatusCode == http.StatusNotModified:
			continue
		case resp.StatusCode != http.StatusOK:
			return agentPolicy{}, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
		}
		var p agentPolicy
		if err := json.Unmarshal(body, &p); err != nil {
			return agentPolicy{}, fmt.Errorf("GET %s: %w", u, err)
		}
		return p, nil
	}
}

func (r *fanoutRun) runAgents(ctx context.Context, p *fanoutPublish) error {
	cfg := r.cfg
	// No client timeout: the long polls last up to the run's Timeout.
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer cl.CloseIdleConnections()
	metrics := &http.Client{Timeout: agentScrapeTimeout}

	r.progressf("waiting for %d agents to hold warm-up version %d", len(cfg.Agents), p.base.Version)
	setup, cancel := context.WithTimeout(ctx, cfg.SetupTimeout)
	defer cancel()
	setupErrs := make([]error, len(cfg.Agents))
	var wg sync.WaitGroup
	for i, u := range cfg.Agents {
		wg.Go(func() {
			if _, err := pollAgent(setup, cl, u, cfg.Policy, p.base.Version-1); err != nil {
				setupErrs[i] = fmt.Errorf("agent %s did not get warm-up version %d within %s: %w", u, p.base.Version, cfg.SetupTimeout, err)
			}
		})
	}
	wg.Wait()
	cancel()
	if err := errors.Join(setupErrs...); err != nil {
		return err
	}
	before, err := r.readAgents(ctx, metrics)
	if err != nil {
		return err
	}

	outs := make([]workerOutcome, len(cfg.Agents))
	pollCtx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	var polls sync.WaitGroup
	for i, u := range cfg.Agents {
		polls.Go(func() {
			got, err := pollAgent(pollCtx, cl, u, cfg.Policy, p.base.Version)
			o := workerOutcome{done: time.Now(), version: got.Version, bytes: got.Size, err: err}
			if err == nil && got.SHA256 != p.sha {
				o.err = fmt.Errorf("agent %s holds version %d with sha256 %s, published %s", u, got.Version, got.SHA256, p.sha)
			}
			if err != nil {
				o.done = time.Time{}
			}
			outs[i] = o
			if o.err == nil {
				r.installed.Add(1)
				r.held.Add(1)
			}
		})
	}

	m, t0, t1, cerr, err := r.measurePublish(ctx, p, "agent",
		fmt.Sprintf("%d agents waiting; publishing %d bytes as version %d", len(cfg.Agents), cfg.Size, p.base.Version+1),
		func() {}, stopPolls, &polls)
	if err != nil {
		return err
	}
	r.collect(outs, m, t0, t1)
	if r.res.Held == len(outs) {
		r.res.Verified = "every agent answered GET /v1/policy with the published SHA-256"
	}
	after, aerr := r.readAgents(ctx, metrics)
	if aerr == nil {
		r.agentFigures(outs, before, after, t0)
	}
	if r.cfg.Delta > 0 {
		r.res.Delta = deltaOf(m)
		if l := r.res.Links; l != nil {
			r.res.Delta.NodeReceivedMean, r.res.Delta.NodeReceivedMax = l.NodeReceivedMean, l.NodeReceivedMax
		}
	}
	return errors.Join(cerr, aerr)
}

// agentFigures fills the per-node figures and their sums.
func (r *fanoutRun) agentFigures(outs []workerOutcome, before, after agentsReading, t0 time.Time) {
	cfg := r.cfg
	l := &FanoutLinks{}
	nodes := make([]FanoutAgent, len(cfg.Agents))
	for i, u := range cfg.Agents {
		n := FanoutAgent{URL: u, Counters: map[string]int64{}}
		if o := outs[i]; o.err != nil {
			n.Err = o.err.Error()
		} else if !o.done.IsZero() {
			n.HeldS = o.done.Sub(t0).Seconds()
		}
		for k, v := range after.agents[i].bytes {
			n.Counters[k] = v - before.agents[i].bytes[k]
		}
		n.CPUS = after.agents[i].cpu - before.agents[i].cpu
		l.AgentsCPUS += n.CPUS
		got := n.Counters["received"]
		l.NodeReceivedMean += float64(got) / float64(len(nodes))
		l.NodeReceivedMax = max(l.NodeReceivedMax, got)
		if after.links != nil {
			n.Link = cfg.AgentLinks[i]
			// The link's root end transmits what reaches the node.
			n.LinkInBytes = after.links[i][1] - before.links[i][1]
			n.LinkOutBytes = after.links[i][0] - before.links[i][0]
			l.NodeInMean += float64(n.LinkInBytes) / float64(len(nodes))
			l.NodeInMax = max(l.NodeInMax, n.LinkInBytes)
			l.NodeOutTotal += n.LinkOutBytes
			l.NodeOutMax = max(l.NodeOutMax, n.LinkOutBytes)
		}
		nodes[i] = n
	}
	if after.brokerLinkRead {
		// The broker's link's root end receives what the broker sends.
		l.BrokerOutBytes = after.brokerRx - before.brokerRx
		l.BrokerInBytes = after.brokerTx - before.brokerTx
	}
	r.res.Nodes, r.res.Links = nodes, l
}

// judgeAgents judges an agents-mode result against the targets.
func (res *FanoutResult) judgeAgents(linkRate float64) {
	l := res.Links
	if l == nil {
		return
	}
	size := float64(res.Settings.Size)
	t := &FanoutNetTargets{LinkRate: linkRate}
	egress := float64(l.BrokerOutBytes)
	if egress == 0 && res.Egress != nil {
		egress = float64(res.Egress.ResponseBytes)
	}
	t.EgressOverSize = egress / size
	t.EgressMet = egress > 0 && t.EgressOverSize <= TargetEgressVersions
	all := res.Held == res.Settings.Nodes && res.Held > 0
	if linkRate > 0 {
		t.LinkLimitS = size * 8 / linkRate
		t.LastOverLinkLimit = res.FromStart.MaxS / t.LinkLimitS
		t.TimeMet = all && t.LastOverLinkLimit <= TargetLinkFactor
		t.LinksFloorS = max(egress, float64(l.NodeInMax), float64(l.NodeOutMax)) * 8 / linkRate
	}
	if res.Settings.Delta > 0 {
		in := float64(l.NodeInMax)
		if in == 0 {
			in = float64(l.NodeReceivedMax)
		}
		t.NodeInMaxOverSize = in / size
		t.DeltaMet = all && t.NodeInMaxOverSize <= TargetDeltaFraction
	}
	if res.Settings.CPUs > 0 {
		t.CPUFloorS = (res.BenchCPUS + res.BrokerCPUS + l.AgentsCPUS) / float64(res.Settings.CPUs)
	}
	t.Bound = "cpu"
	if t.LinksFloorS > t.CPUFloorS {
		t.Bound = "links"
	}
	res.NetTargets = t
}

// printFanoutAgents writes agents mode's figures for people.
func printFanoutAgents(w io.Writer, r *FanoutResult) {
	l, size := r.Links, float64(r.Settings.Size)
	if l == nil || size == 0 {
		return
	}
	if l.BrokerOutBytes > 0 {
		fmt.Fprintf(w, "  broker link: %s out (%.2f × the version), %s in\n", fmtBytes(float64(l.BrokerOutBytes)), float64(l.BrokerOutBytes)/size, fmtBytes(float64(l.BrokerInBytes)))
	}
	if l.NodeInMax > 0 {
		fmt.Fprintf(w, "  node links: %s to each node on average (%.1f%% of the version), at most %s (%.1f%%); nodes sent %s in all, one at most %s\n",
			fmtBytes(l.NodeInMean), 100*l.NodeInMean/size, fmtBytes(float64(l.NodeInMax)), 100*float64(l.NodeInMax)/size,
			fmtBytes(float64(l.NodeOutTotal)), fmtBytes(float64(l.NodeOutMax)))
	}
	fmt.Fprintf(w, "  agents received from the brokers %s on average (%.1f%%), at most %s (%.1f%%)\n",
		fmtBytes(l.NodeReceivedMean), 100*l.NodeReceivedMean/size, fmtBytes(float64(l.NodeReceivedMax)), 100*float64(l.NodeReceivedMax)/size)
	t := r.NetTargets
	if t == nil {
		return
	}
	fmt.Fprintf(w, "  broker egress %.2f × the version (target ≤ %.0f×: %s)", t.EgressOverSize, TargetEgressVersions, metOrMissed(t.EgressMet))
	if t.LinkLimitS > 0 {
		fmt.Fprintf(w, "; version ÷ link rate %.3f s, last node %.3f s = %.2f× that (target ≤ %.0f×: %s)",
			t.LinkLimitS, r.FromStart.MaxS, t.LastOverLinkLimit, TargetLinkFactor, metOrMissed(t.TimeMet))
	}
	fmt.Fprintln(w)
	if r.Settings.Delta > 0 {
		fmt.Fprintf(w, "  delta: the most a node took is %.1f%% of the version (target ≤ %.0f%%: %s)\n", 100*t.NodeInMaxOverSize, 100*TargetDeltaFraction, metOrMissed(t.DeltaMet))
	}
	fmt.Fprintf(w, "  floors: CPU %.2f s (broker, agents and this process over %d CPUs), links %.2f s: bound by %s\n", t.CPUFloorS, r.Settings.CPUs, t.LinksFloorS, t.Bound)
}
