package bench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/learner"
	"github.com/simtel/simtel/learner/learnertest"
)

// `simtel bench fanout`: one learner publishes a policy version; many
// workers get it, either through one learner.Subscriber per emulated node
// (node mode, what the agent does) or each through its own Latest + Fetch
// (direct mode, the design the agent replaces). The run measures, for every
// worker, the time from the start of the Publish call (and from its return)
// until the worker holds the version, the broker's egress over that time
// from its /metrics, and the loopback bandwidth of this machine in the same
// run, the limit the egress cannot beat.
//
// The sequence of a run:
//
//  1. loopback: a TCP stream over 127.0.0.1 for LoopbackTime (nothing else
//     runs yet);
//  2. warm-up: a 1 KiB version is published, so the topic exists with the
//     publisher's configs and every subscriber starts from a held version,
//     as in steady state;
//  3. node mode: Nodes subscribers start (each its own kgo clients and
//     cache directory) and the run waits until each holds the warm-up
//     version; then WorkersPerNode workers per node block in
//     Subscriber.Wait. Direct mode: Nodes × WorkersPerNode clients each
//     read Latest once (connections and metadata are warm);
//  4. the broker's counters are read, Publish starts (t0); in direct mode
//     the pollers start with it;
//  5. each worker records when it holds the version: node mode after it
//     opened the installed file, checked its size against the manifest
//     and mapped it read-only (WorkerMap) or read it to the end
//     (WorkerRead), direct mode when Fetch returned (Fetch verified the
//     SHA-256);
//  6. when the last worker is done (or Timeout), the counters are read
//     again; then the run checks what was read (node mode: every node's
//     file hashes to the published SHA-256) and stops everything.

// Fanout modes.
const (
	FanoutNode   = "node"
	FanoutDirect = "direct"
	// FanoutAgents (fanoutagents.go): the nodes are agent processes.
)

// How node-mode workers hold the version (FanoutConfig.WorkerLoad).
const (
	WorkerMap  = "map"
	WorkerRead = "read"
)

// FanoutConfig configures Fanout. Zero values take the defaults noted.
type FanoutConfig struct {
	// Client reaches the brokers, which are required. Its Logger gets
	// the run's warnings and the learner's logs, its Progress one line a
	// second.
	Client
	// Mode is FanoutNode or FanoutDirect. Default FanoutNode.
	Mode string
	// Nodes is the number of emulated nodes, each one learner.Subscriber.
	// Default 50.
	Nodes int
	// WorkersPerNode is the number of workers per node; direct mode runs
	// Nodes × WorkersPerNode direct subscribers. Default 20.
	WorkersPerNode int
	// Size is the bytes of the version published (random). Default 64 MiB.
	Size int64
	// Policy is the policy name; its topic is policy.<Policy>. Default
	// "bench-fanout". A run publishes two versions (warm-up and measured).
	Policy string
	// BrokerMetrics is the URL of the broker's Prometheus /metrics
	// (simtel broker --http-listen). Empty: egress is not measured and
	// the targets are not judged.
	BrokerMetrics string
	// BrokerPID, if not 0, is the broker process, whose CPU time over the
	// measured part is reported.
	BrokerPID int
	// Dir is where node mode makes its temporary directory of node
	// caches. Default /dev/shm (tmpfs, as the agent's default policy
	// directory) if it exists, else the system's temporary directory.
	Dir string
	// PollInterval is how often a direct subscriber calls Latest until the
	// new version appears; the first call comes at a random point of the
	// first interval. Default 500 ms.
	PollInterval time.Duration
	// LoopbackTime is how long the loopback stream runs. Default 2 s;
	// negative skips the measurement.
	LoopbackTime time.Duration
	// WorkerLoad is how a node-mode worker holds the installed file:
	// WorkerMap (default) maps it read-only after checking its size, as a
	// worker on a real node shares the node's copy (the pages are the
	// node's page cache, read only when touched); WorkerRead reads it to
	// the end into a private buffer (ReadBuffer), a worker that copies the
	// weights.
	WorkerLoad string
	// ReadBuffer is the buffer a WorkerRead worker reads the file with
	// (reused: a worker does not keep the weights, else 1000 workers would
	// need 64 GB). Default 256 KiB.
	ReadBuffer int
	// VerifyReads makes every worker compare the bytes it read with the
	// published ones as it reads (costs CPU inside the measured time).
	// Without it, node mode hashes each node's installed file after the
	// measurement, and direct mode relies on Fetch's SHA-256 check.
	VerifyReads bool
	// SetupTimeout bounds the warm-up (subscribers getting the warm-up
	// version). Default 2 minutes.
	SetupTimeout time.Duration
	// Timeout bounds the measured part, from the Publish call to the last
	// worker. Default 10 minutes.
	Timeout time.Duration

	// Delta, if above 0 (node mode), measures a delta instead of a full
	// version: the warm-up version is a full format 2 version of Size
	// random bytes, and the measured one a copy with this fraction of
	// its bytes changed in four regions, published as a delta against
	// it. The result's Delta says what each node received.
	Delta float64
	// Format is the format of the versions published: 0 the publisher's
	// default, or learner.Format2 (chunks listed by hash, what relaying
	// agents share). A delta is always format 2.
	Format int

	// CPUProfile, if set, is a file that gets a CPU profile of this
	// process (nodes, workers, publisher) over the measured part.
	CPUProfile string

	// Agents (FanoutAgents mode, required there) are the base URLs of
	// the agents' HTTP listeners (http://host:port), one per node; Nodes
	// is their number and each has one worker, the run's long poll.
	Agents []string
	// AgentLinks, if set, are the interfaces whose counters say what
	// each agent's link carried, one per agent: the root-namespace end
	// of its veth pair (bytes it transmits reach the node).
	AgentLinks []string
	// BrokerLink, if set, is the root-namespace end of the broker's veth
	// pair: bytes it receives are the broker's egress.
	BrokerLink string
	// LinkRate is the rate of the links in bits per second, for the
	// time target (0: not judged).
	LinkRate float64
}

func (c FanoutConfig) withDefaults() FanoutConfig {
	c.Client = c.Client.withDefaults()
	c.Mode = cmp.Or(c.Mode, FanoutNode)
	if c.Mode == FanoutAgents {
		c.Nodes, c.WorkersPerNode = len(c.Agents), 1
	}
	c.Nodes = cmp.Or(c.Nodes, 50)
	c.WorkersPerNode = cmp.Or(c.WorkersPerNode, 20)
	c.Size = cmp.Or(c.Size, 64<<20)
	c.Policy = cmp.Or(c.Policy, "bench-fanout")
	if c.Dir == "" {
		c.Dir = os.TempDir()
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			c.Dir = "/dev/shm"
		}
	}
	c.PollInterval = cmp.Or(c.PollInterval, 500*time.Millisecond)
	c.LoopbackTime = cmp.Or(c.LoopbackTime, 2*time.Second)
	c.WorkerLoad = cmp.Or(c.WorkerLoad, WorkerMap)
	c.ReadBuffer = cmp.Or(c.ReadBuffer, 256<<10)
	c.SetupTimeout = cmp.Or(c.SetupTimeout, 2*time.Minute)
	c.Timeout = cmp.Or(c.Timeout, 10*time.Minute)
	return c
}

// Validate reports the first setting that cannot work, after defaults.
func (c FanoutConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case len(c.Brokers) == 0:
		return errors.New("no brokers: pass at least one host:port")
	case c.Mode != FanoutNode && c.Mode != FanoutDirect && c.Mode != FanoutAgents:
		return fmt.Errorf("mode %q is not %s, %s or %s", c.Mode, FanoutNode, FanoutDirect, FanoutAgents)
	case c.Mode == FanoutAgents && len(c.Agents) == 0:
		return fmt.Errorf("mode %s needs the agents' URLs", FanoutAgents)
	case c.Mode != FanoutAgents && (len(c.Agents) > 0 || len(c.AgentLinks) > 0 || c.BrokerLink != ""):
		return fmt.Errorf("agents and links are for mode %s", FanoutAgents)
	case len(c.AgentLinks) > 0 && len(c.AgentLinks) != len(c.Agents):
		return fmt.Errorf("%d agent links for %d agents: give one per agent", len(c.AgentLinks), len(c.Agents))
	case c.LinkRate < 0:
		return fmt.Errorf("link rate %g is negative", c.LinkRate)
	case c.WorkerLoad != WorkerMap && c.WorkerLoad != WorkerRead:
		return fmt.Errorf("worker load %q is not %s or %s", c.WorkerLoad, WorkerMap, WorkerRead)
	case c.Nodes < 1 || c.WorkersPerNode < 1:
		return fmt.Errorf("%d nodes × %d workers: both must be positive", c.Nodes, c.WorkersPerNode)
	case c.Nodes*c.WorkersPerNode > 100000:
		return fmt.Errorf("%d workers is more than this benchmark handles (100,000)", c.Nodes*c.WorkersPerNode)
	case c.Size < 1:
		return fmt.Errorf("size %d is not positive", c.Size)
	case c.PollInterval < time.Millisecond:
		return fmt.Errorf("poll interval %s is below 1ms", c.PollInterval)
	case c.ReadBuffer < 4096:
		return fmt.Errorf("read buffer %d is below 4096 bytes", c.ReadBuffer)
	case c.SetupTimeout < 0 || c.Timeout < 0:
		return errors.New("timeouts must not be negative")
	case c.BrokerPID < 0:
		return fmt.Errorf("broker pid %d is negative", c.BrokerPID)
	case c.Delta < 0 || c.Delta >= 1:
		return fmt.Errorf("delta %g is not a fraction in [0, 1)", c.Delta)
	case c.Format != 0 && c.Format != learner.Format2:
		return fmt.Errorf("format %d: give 0 (the default) or %d", c.Format, learner.Format2)
	case c.Delta > 0 && c.Mode == FanoutDirect:
		return fmt.Errorf("delta needs mode %s or %s", FanoutNode, FanoutAgents)
	}
	for _, a := range c.Agents {
		if !strings.HasPrefix(a, "http://") && !strings.HasPrefix(a, "https://") {
			return fmt.Errorf("agent %q is not an http:// URL", a)
		}
	}
	if err := learner.CheckPolicyName(c.Policy); err != nil {
		return err
	}
	if c.BrokerMetrics != "" && !strings.HasPrefix(c.BrokerMetrics, "http://") && !strings.HasPrefix(c.BrokerMetrics, "https://") {
		return fmt.Errorf("broker metrics %q is not an http:// URL", c.BrokerMetrics)
	}
	return nil
}

// FanoutSettings echoes the configuration a result was measured with.
type FanoutSettings struct {
	Mode           string `json:"mode"`
	Nodes          int    `json:"nodes"`
	WorkersPerNode int    `json:"workers_per_node"`
	// Workers is Nodes × WorkersPerNode: workers reading the node's copy
	// in node mode, direct subscribers in direct mode.
	Workers int `json:"workers"`
	// Fetchers are the parties that fetch the version from the broker:
	// Nodes in node mode, Workers in direct mode.
	Fetchers      int    `json:"fetchers"`
	Size          int64  `json:"size"`
	Policy        string `json:"policy"`
	Dir           string `json:"dir,omitempty"`
	PollInterval  string `json:"poll_interval,omitempty"`
	WorkerLoad    string `json:"worker_load,omitempty"`
	ReadBuffer    int    `json:"read_buffer,omitempty"`
	VerifyReads   bool   `json:"verify_reads"`
	BrokerMetrics string `json:"broker_metrics,omitempty"`
	CPUs          int    `json:"cpus"`
	// Delta is FanoutConfig.Delta: the fraction of the bytes changed.
	Delta float64 `json:"delta,omitempty"`
	// Format is FanoutConfig.Format.
	Format int `json:"format,omitempty"`
	// LinkRate is FanoutConfig.LinkRate (agents mode).
	LinkRate float64 `json:"link_rate_bps,omitempty"`
}

func (c FanoutConfig) settings() FanoutSettings {
	s := FanoutSettings{Mode: c.Mode, Nodes: c.Nodes, WorkersPerNode: c.WorkersPerNode,
		Workers: c.Nodes * c.WorkersPerNode, Size: c.Size, Policy: c.Policy, VerifyReads: c.VerifyReads,
		BrokerMetrics: c.BrokerMetrics, CPUs: runtime.NumCPU(), Delta: c.Delta, Format: c.Format}
	switch c.Mode {
	case FanoutAgents:
		s.Fetchers, s.LinkRate = c.Nodes, c.LinkRate
	case FanoutNode:
		s.Fetchers, s.Dir, s.WorkerLoad = c.Nodes, c.Dir, c.WorkerLoad
		if c.WorkerLoad == WorkerRead {
			s.ReadBuffer = c.ReadBuffer
		}
	default:
		s.Fetchers, s.PollInterval = s.Workers, c.PollInterval.String()
	}
	return s
}

// FanoutResult is the outcome of Fanout. Times are in seconds.
type FanoutResult struct {
	Kind     string         `json:"kind"` // "fanout"
	Settings FanoutSettings `json:"settings"`
	Started  time.Time      `json:"started"`
	// Version, SHA256 and Chunks describe the version published.
	Version int64  `json:"version"`
	SHA256  string `json:"sha256,omitempty"`
	Chunks  int    `json:"chunks,omitempty"`
	// PublishS is the duration of the Publish call (creating nothing: the
	// warm-up made the topic; producing every chunk with acks=all and the
	// manifest).
	PublishS float64 `json:"publish_s"`
	// FromStart is, over all workers, the time from the Publish call to
	// the worker holding the version; FromReturn the same from Publish's
	// return (negative if a worker had it before Publish returned).
	FromStart  DurationSummary `json:"from_publish_start"`
	FromReturn DurationSummary `json:"from_publish_return"`
	// NodeInstall is, in node mode, the time from the Publish call until
	// each node's subscriber had installed the version (before its
	// workers read it).
	NodeInstall *DurationSummary `json:"node_install,omitempty"`
	// Held is the number of workers that hold the version; the rest
	// failed (Failures) or ran out of time.
	Held     int       `json:"held"`
	Failures int       `json:"failures"`
	FirstErr string    `json:"first_error,omitempty"`
	Verified string    `json:"verified,omitempty"` // what was checked about the bytes read
	Egress   *Egress   `json:"egress,omitempty"`
	Loopback *Loopback `json:"loopback,omitempty"`
	// Targets are the time target judged on this run (the egress
	// target needs a node and a direct run: see FanoutReport).
	Targets *FanoutTargets `json:"targets,omitempty"`
	// Polls is the number of Latest calls direct subscribers made;
	// PollErrors those that failed.
	Polls      int64 `json:"latest_polls,omitempty"`
	PollErrors int64 `json:"latest_poll_errors,omitempty"`
	// Subscribers sums the node subscribers' counters.
	Subscribers *FanoutSubscribers `json:"subscribers,omitempty"`
	// Delta is what a delta run moved for the measured version.
	Delta *FanoutDelta `json:"delta,omitempty"`
	// Nodes, Links and NetTargets are agents mode's: each agent's
	// figures, their sums and the targets judged on them.
	Nodes      []FanoutAgent     `json:"nodes,omitempty"`
	Links      *FanoutLinks      `json:"links,omitempty"`
	NetTargets *FanoutNetTargets `json:"net_targets,omitempty"`
	// CPU over the measured part: this process (nodes, workers,
	// publisher), the broker (with BrokerPID) and the whole machine.
	BenchCPUS      float64  `json:"bench_cpu_s"`
	BrokerCPUS     float64  `json:"broker_cpu_s,omitempty"`
	MachineBusyPct float64  `json:"machine_busy_pct,omitempty"`
	Aborted        string   `json:"aborted,omitempty"`
	Notes          []string `json:"notes,omitempty"`
}

// FanoutSubscribers sums the node subscribers' counters (see
// learner.SubscriberStats) over the whole run, warm-up included.
type FanoutSubscribers struct {
	Fetched int64 `json:"fetched"` // versions installed
	Corrupt int64 `json:"corrupt"` // versions rejected
	Skipped int64 `json:"skipped"` // versions jumped over
}

// FanoutDelta is what the measured version of a delta run moved.
type FanoutDelta struct {
	Base      int64 `json:"base"`       // the version it is a delta against
	SentBytes int64 `json:"sent_bytes"` // chunk bytes the publisher wrote
	Chunks    int   `json:"chunks"`     // chunks of the version
	Sent      int   `json:"sent"`       // chunk records written
	// NodeReceived is, over the nodes, the bytes each received from the
	// broker for it (learner.SubscriberStats.Received).
	NodeReceivedMean float64 `json:"node_received_bytes_mean"`
	NodeReceivedMax  int64   `json:"node_received_bytes_max"`
}

// FanoutTargets judges one run against the time target: the last
// worker holds the version within TimeFactor × (egress bytes / loopback
// bandwidth).
type FanoutTargets struct {
	// LimitS is egress bytes / loopback bandwidth: how long the broker's
	// egress takes at the loopback's speed.
	LimitS float64 `json:"limit_s"`
	// LastOverLimit is the last worker's FromStart over LimitS.
	LastOverLimit float64 `json:"last_over_limit"`
	// NodesOverLimit is the last node install over LimitS (node mode).
	NodesOverLimit float64 `json:"nodes_over_limit,omitempty"`
	// EgressPerWorker is egress bytes / workers; EgressPerFetcherOverSize
	// is egress / fetchers / Size: 1 plus the protocol overhead (and, in
	// direct mode, the polls).
	EgressPerWorker          float64 `json:"egress_per_worker"`
	EgressPerFetcherOverSize float64 `json:"egress_per_fetcher_over_size"`
	TimeMet                  bool    `json:"time_met"`
	// CPUFloorS is the CPU time the bench process and the broker used
	// over the measured part divided by the machine's CPUs: how long the
	// work takes with every core busy on it. Not a target: it says
	// whether a run was bound by CPU rather than by the loopback. 0
	// without the broker's CPU time.
	CPUFloorS        float64 `json:"cpu_floor_s,omitempty"`
	LastOverCPUFloor float64 `json:"last_over_cpu_floor,omitempty"`
}

// TargetTimeFactor is the bound: the last worker holds the version
// within this factor of egress bytes / loopback bandwidth.
const TargetTimeFactor = 2.0

// DurationSummary summarizes durations in seconds: nearest-rank
// percentiles of the observations.
type DurationSummary struct {
	Count int     `json:"count"`
	MinS  float64 `json:"min_s"`
	MeanS float64 `json:"mean_s"`
	P50S  float64 `json:"p50_s"`
	P99S  float64 `json:"p99_s"`
	MaxS  float64 `json:"max_s"`
}

// summarize returns the summary of ds; ds is sorted in place.
func summarize(ds []time.Duration) DurationSummary {
	if len(ds) == 0 {
		return DurationSummary{}
	}
	slices.Sort(ds)
	var sum float64
	for _, d := range ds {
		sum += d.Seconds()
	}
	return DurationSummary{
		Count: len(ds),
		MinS:  ds[0].Seconds(),
		MeanS: sum / float64(len(ds)),
		P50S:  percentile(ds, 50).Seconds(),
		P99S:  percentile(ds, 99).Seconds(),
		MaxS:  ds[len(ds)-1].Seconds(),
	}
}

// percentile is the nearest-rank percentile p (0 < p ≤ 100) of sorted:
// the smallest value with at least p% of the observations at or below it.
// It returns 0 for no observations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The epsilon keeps float rounding (99.9% of 1000 is 999.0000000000001)
	// from moving the rank up by one.
	rank := int(math.Ceil(p*float64(n)/100 - 1e-9))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Fanout runs the benchmark. It returns a result whenever it measured
// something, also with an error (a worker that failed or timed out, the
// broker's metrics unreadable).
func Fanout(ctx context.Context, cfg FanoutConfig) (*FanoutResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	res := &FanoutResult{Kind: "fanout", Settings: cfg.settings(), Started: time.Now().UTC()}
	r := &fanoutRun{cfg: cfg, log: cfg.Logger, res: res}
	if cfg.BrokerMetrics != "" {
		r.probe = newEgressProbe(cfg.BrokerMetrics)
		// Fail early on a wrong URL rather than after the warm-up.
		if _, err := r.probe.read(ctx); err != nil {
			return nil, err
		}
	}
	// Agents mode is measured against its links, not the loopback.
	if cfg.LoopbackTime > 0 && cfg.Mode != FanoutAgents {
		r.progressf("measuring loopback bandwidth for %s", cfg.LoopbackTime)
		lb, err := MeasureLoopback(ctx, cfg.LoopbackTime)
		if err != nil {
			return nil, err
		}
		res.Loopback = &lb
	}
	if err := r.run(ctx); err != nil {
		if res.Version == 0 && res.Held == 0 {
			return res, err
		}
		res.judge()
		res.judgeAgents(cfg.LinkRate)
		return res, err
	}
	res.judge()
	res.judgeAgents(cfg.LinkRate)
	if res.Held < res.Settings.Workers {
		return res, fmt.Errorf("%d of %d workers do not hold the version: %s", res.Settings.Workers-res.Held, res.Settings.Workers, res.FirstErr)
	}
	return res, nil
}

// judge computes the targets from the egress and loopback figures.
func (res *FanoutResult) judge() {
	e, lb := res.Egress, res.Loopback
	if e == nil {
		return
	}
	t := &FanoutTargets{
		EgressPerWorker:          float64(e.ResponseBytes) / float64(res.Settings.Workers),
		EgressPerFetcherOverSize: float64(e.ResponseBytes) / float64(res.Settings.Fetchers) / float64(res.Settings.Size),
	}
	if lb != nil && lb.BytesPerS > 0 {
		t.LimitS = float64(e.ResponseBytes) / lb.BytesPerS
		if t.LimitS > 0 {
			t.LastOverLimit = res.FromStart.MaxS / t.LimitS
			if res.NodeInstall != nil {
				t.NodesOverLimit = res.NodeInstall.MaxS / t.LimitS
			}
		}
		t.TimeMet = res.Held == res.Settings.Workers && res.Held > 0 && t.LastOverLimit > 0 && t.LastOverLimit <= TargetTimeFactor
	}
	if res.BrokerCPUS > 0 && res.Settings.CPUs > 0 {
		t.CPUFloorS = (res.BenchCPUS + res.BrokerCPUS) / float64(res.Settings.CPUs)
		t.LastOverCPUFloor = res.FromStart.MaxS / t.CPUFloorS
	}
	res.Targets = t
}

// fanoutRun is one run's shared state. Counters are atomic: workers,
// pollers and the progress printer touch them concurrently.
type fanoutRun struct {
	cfg   FanoutConfig
	log   *slog.Logger
	res   *FanoutResult
	probe *egressProbe

	published atomic.Int64 // bytes handed to the producer by Publish
	installed atomic.Int64 // nodes holding the version
	held      atomic.Int64 // workers holding the version
	polls     atomic.Int64
	pollErrs  atomic.Int64

	profile *os.File // the CPU profile being written, if any
}

// progressf prints one line to the progress writer.
func (r *fanoutRun) progressf(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "fanout %s: "+format+"\n", append([]any{r.cfg.Mode}, args...)...)
	}
}

// watch prints a progress line every second until ctx ends.
func (r *fanoutRun) watch(ctx context.Context, t0 time.Time, before brokerCounters) {
	if r.cfg.Progress == nil {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			egress := ""
			if r.probe != nil {
				if c, err := r.probe.read(ctx); err == nil {
					egress = fmt.Sprintf(", broker egress %.0f MB", float64(c.responseTotal()-before.responseTotal())/1e6)
				}
			}
			line := fmt.Sprintf("%5.1fs published %d/%d MiB", now.Sub(t0).Seconds(), r.published.Load()>>20, r.cfg.Size>>20)
			if r.cfg.Mode != FanoutDirect {
				line += fmt.Sprintf(", nodes %d/%d installed", r.installed.Load(), r.cfg.Nodes)
			} else {
				line += fmt.Sprintf(", %s Latest polls", groupDigits(r.polls.Load()))
			}
			line += fmt.Sprintf(", workers %d/%d hold it%s", r.held.Load(), r.cfg.Nodes*r.cfg.WorkersPerNode, egress)
			r.progressf("%s", line)
		}
	}
}

// cpuMark is a reading of the CPU counters the result reports.
type cpuMark struct {
	self     time.Duration
	broker   procSample
	brokerOK bool
	machine  machineCPU
}

// cpuMark reads the CPU counters at the start of the measured part and
// starts the CPU profile, if one was asked for.
func (r *fanoutRun) cpuMark() cpuMark {
	if r.cfg.CPUProfile != "" && r.profile == nil {
		f, err := os.Create(r.cfg.CPUProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			r.res.Notes = append(r.res.Notes, fmt.Sprintf("no CPU profile: %v", err))
		} else {
			r.profile = f
		}
	}
	return r.readCPU()
}

func (r *fanoutRun) readCPU() cpuMark {
	m := cpuMark{self: selfCPU()}
	if r.cfg.BrokerPID > 0 {
		s, err := newProcReader(r.cfg.BrokerPID).read()
		m.broker, m.brokerOK = s, err == nil
	}
	m.machine, _ = readMachine()
	return m
}

// cpuSince reports the CPU used since a and stops the CPU profile.
func (r *fanoutRun) cpuSince(a cpuMark) {
	if r.profile != nil {
		pprof.StopCPUProfile()
		if err := r.profile.Close(); err != nil {
			r.res.Notes = append(r.res.Notes, fmt.Sprintf("cannot write the CPU profile: %v", err))
		}
	}
	b := r.readCPU()
	r.res.BenchCPUS = (b.self - a.self).Seconds()
	if a.brokerOK && b.brokerOK {
		r.res.BrokerCPUS = newProcReader(r.cfg.BrokerPID).cpuSeconds(a.broker, b.broker)
	}
	if dt := b.machine.Total - a.machine.Total; dt > 0 {
		r.res.MachineBusyPct = float64(b.machine.Busy-a.machine.Busy) / float64(dt) * 100
	}
}

// run does steps 2 to 6 of a run (see the top of this file).
func (r *fanoutRun) run(ctx context.Context) error {
	cl, err := kgo.NewClient(clientOpts(r.cfg.Brokers, r.cfg.ClientOpts, r.log, "simtel-bench-fanout-learner")...)
	if err != nil {
		return fmt.Errorf("cannot create kafka client for %v: %w", r.cfg.Brokers, err)
	}
	defer cl.Close()
	pub := learner.NewPublisher(cl, r.log.With("part", "publisher"))

	warm := make([]byte, 1024)
	warmOpts := learner.PublishOptions{Format: r.cfg.Format}
	if r.cfg.Delta > 0 {
		// The base of the delta: a full format 2 version.
		warm = make([]byte, r.cfg.Size)
		warmOpts.Format = learner.Format2
	}
	rand.Read(warm)
	warmOpts.Meta = map[string]string{"bench": "fanout warm-up"}
	setup, cancel := context.WithTimeout(ctx, r.cfg.SetupTimeout)
	base, err := pub.PublishWith(setup, r.cfg.Policy, bytes.NewReader(warm), warmOpts)
	cancel()
	if err != nil {
		return fmt.Errorf("cannot publish the warm-up version of %s: %w", r.cfg.Policy, err)
	}
	r.progressf("warm-up version %d published; generating %d random bytes", base.Version, r.cfg.Size)
	blob := make([]byte, r.cfg.Size)
	if r.cfg.Delta > 0 {
		blob = learnertest.ChangeRegions(warm, r.cfg.Delta, 4)
	} else {
		rand.Read(blob)
	}
	sum := sha256.Sum256(blob)
	p := &fanoutPublish{pub: pub, policy: r.cfg.Policy, blob: blob, sha: hex.EncodeToString(sum[:]), base: base}
	switch r.cfg.Mode {
	case FanoutNode:
		return r.runNodes(ctx, p)
	case FanoutAgents:
		return r.runAgents(ctx, p)
	}
	return r.runDirect(ctx, p)
}

// fanoutPublish is the version a run publishes and how.
type fanoutPublish struct {
	pub    *learner.Publisher
	policy string
	blob   []byte
	sha    string           // hex SHA-256 of blob
	base   learner.Manifest // the warm-up version everyone holds first
}

// publish runs Publish and fills the result's publish figures; t0 and t1
// are the call's start and return.
func (r *fanoutRun) publish(ctx context.Context, p *fanoutPublish) (m learner.Manifest, t0, t1 time.Time, err error) {
	meta := map[string]string{"bench": "fanout", "mode": r.cfg.Mode}
	t0 = time.Now()
	o := learner.PublishOptions{Meta: meta, Format: r.cfg.Format, Progress: func(sent int64) { r.published.Store(sent) }}
	if r.cfg.Delta > 0 {
		o.DeltaFrom = p.base.Version
	}
	m, err = p.pub.PublishWith(ctx, p.policy, bytes.NewReader(p.blob), o)
	t1 = time.Now()
	r.res.PublishS = t1.Sub(t0).Seconds()
	if err != nil {
		return m, t0, t1, fmt.Errorf("cannot publish %s: %w", p.policy, err)
	}
	r.res.Version, r.res.SHA256, r.res.Chunks = m.Version, m.SHA256, m.Chunks
	if m.SHA256 != p.sha || m.Size != int64(len(p.blob)) {
		return m, t0, t1, fmt.Errorf("publish returned version %d of %d bytes with sha256 %s; published %d bytes with sha256 %s",
			m.Version, m.Size, m.SHA256, len(p.blob), p.sha)
	}
	return m, t0, t1, nil
}

// workerOutcome is what one worker did: when it held which version, how
// many bytes it read, or why it failed.
type workerOutcome struct {
	done    time.Time
	version int64
	bytes   int64
	path    string
	mapped  []byte // the file mapped by a WorkerMap worker, unmapped at the end of the run
	err     error
}

// measurePublish is the measured part of both modes. With the workers
// already waiting (waited for by workers, stopped by stop), it reads the
// broker's counters and the CPU mark, starts the progress watch, calls
// begin right before the Publish call, publishes p and waits until every
// worker is done or cfg.Timeout passed (the run is then aborted with a note
// naming who). It sets the CPU figures and the egress. err is the failure
// that ends the run: the counters could not be read before, or the publish
// failed; cerr is a failure to read the counters after, which the caller
// returns once it has recorded what it measured.
func (r *fanoutRun) measurePublish(ctx context.Context, p *fanoutPublish, who, announce string, begin, stop func(), workers *sync.WaitGroup) (m learner.Manifest, t0, t1 time.Time, cerr, err error) {
	before, err := r.readCounters(ctx)
	if err != nil {
		stop()
		workers.Wait()
		return m, t0, t1, nil, err
	}
	cpu0 := r.cpuMark()
	r.progressf("%s", announce)
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		r.watch(watchCtx, time.Now(), before)
	}()
	stopWatching := func() {
		stopWatch()
		watchWG.Wait()
	}

	measure, cancelMeasure := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancelMeasure()
	begin()
	m, t0, t1, err = r.publish(measure, p)
	if err != nil {
		stop()
		workers.Wait()
		stopWatching()
		return m, t0, t1, nil, err
	}
	allDone := make(chan struct{})
	go func() {
		workers.Wait()
		close(allDone)
	}()
	select {
	case <-allDone:
	case <-measure.Done():
		r.res.Aborted = fmt.Sprintf("not every %s held version %d %s after the publish started", who, m.Version, r.cfg.Timeout)
		stop()
		<-allDone
	}
	after, cerr := r.readCounters(ctx)
	r.cpuSince(cpu0)
	stopWatching()
	if cerr == nil && r.probe != nil {
		r.res.Egress = egressBetween(before, after)
	}
	return m, t0, t1, cerr, nil
}

// collect summarizes the outcomes against the published version m.
func (r *fanoutRun) collect(outs []workerOutcome, m learner.Manifest, t0, t1 time.Time) {
	var fromStart, fromReturn []time.Duration
	for i, o := range outs {
		err := o.err
		if err == nil && o.done.IsZero() {
			err = errors.New("did not finish in time")
		}
		if err == nil && o.version != m.Version {
			err = fmt.Errorf("got version %d, want %d", o.version, m.Version)
		}
		if err == nil && o.bytes != m.Size {
			err = fmt.Errorf("read %d bytes of version %d, want %d", o.bytes, m.Version, m.Size)
		}
		if err != nil {
			r.res.Failures++
			if r.res.FirstErr == "" {
				r.res.FirstErr = fmt.Sprintf("worker %d: %v", i, err)
			}
			continue
		}
		r.res.Held++
		fromStart = append(fromStart, o.done.Sub(t0))
		fromReturn = append(fromReturn, o.done.Sub(t1))
	}
	r.res.FromStart = summarize(fromStart)
	r.res.FromReturn = summarize(fromReturn)
}
