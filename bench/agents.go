package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	shipper "github.com/simtel/simtel/agent/producer"
	"github.com/simtel/simtel/agent/spool"
	"github.com/simtel/simtel/internal/metricsrv"
)

// `simtel bench agents`: many emulated node agents against one cluster.
// Each emulated agent is the agent's own shipper (agent/producer) with
// its own Kafka client (connections, producer id, metadata) reading an
// in-memory spool (memSpool) that one generator fills at Rate samples/s
// per agent. The run has phases: steady load, then optionally a broker
// stopped and started again, then the controller killed with SIGKILL
// and started again. At the end every spool is drained, the topic is
// read back and each sample checked for delivery exactly once.
//
// Goroutines: Agents starts one shipper per agent (producer.Run, which
// starts its sender), the generator, the progress watch and, with
// MetricsListen, an HTTP server; it cancels and waits for all of them
// before it returns.

// Broker choices for AgentsConfig.RestartBroker.
const (
	// NoBroker skips the restart phase.
	NoBroker int32 = -1
	// AutoBroker restarts a broker other than the controller.
	AutoBroker int32 = -2
)

// AgentsConfig configures Agents. Zero values take the defaults noted.
type AgentsConfig struct {
	// Client's Brokers are the cluster's Kafka listeners, required unless
	// Spawn. Its Logger gets the run's warnings and the first of the
	// agents', its Progress one line per Interval.
	Client
	// BrokerHTTP are the brokers' HTTP listeners, host:port, whose
	// /metrics the run reads (memory, goroutines, fds). Optional; with
	// Spawn the run knows them.
	BrokerHTTP []string

	// Spawn, if not 0, is the number of `simtel broker` processes of
	// Binary the run starts as one cluster on loopback (and stops at the
	// end), in SpawnDir (default a temporary directory, removed), on
	// ports from SpawnPortBase (Kafka base+i, raft base+10+i, gossip
	// base+20+i, HTTP base+30+i; 0: free ports).
	Spawn         int
	Binary        string
	SpawnDir      string
	SpawnPortBase int

	// Agents is the number of emulated agents. Default 100.
	Agents int
	// Rate is the samples per second each agent takes. Default 50.
	Rate float64
	// SampleBytes is the size of a sample's line of line protocol.
	// Default 100.
	SampleBytes int
	// Duration is the steady phase. Default 60 s.
	Duration time.Duration
	// RestartBroker is the broker stopped (SIGTERM) and started again
	// after the steady phase: a node id, AutoBroker or NoBroker. Needs
	// Spawn.
	RestartBroker int32
	// KillController kills the controller with SIGKILL and starts it
	// again after the restart phase. Needs Spawn.
	KillController bool
	// FaultPhase is how long the load goes on after a broker stopped or
	// was killed (longer if the agents are not all back by then).
	// Default 30 s.
	FaultPhase time.Duration
	// RecoverTimeout bounds the wait, after a broker stopped or was
	// killed, for every agent to deliver again; past it the run fails.
	// Default 2 min.
	RecoverTimeout time.Duration

	// Topic is created for the run with Partitions partitions and
	// replication factor min(3, brokers); it must not exist. Default
	// "simtel-bench-agents-<unix time>". Partitions default 12.
	Topic      string
	Partitions int32
	// Linger and BatchMaxBytes are the shipper's (agent --linger,
	// --batch-max-bytes). Defaults 1 s and 1 MiB, the agent's.
	Linger        time.Duration
	BatchMaxBytes int32
	// DrainTimeout bounds the wait for the agents to deliver what they
	// took once the load stops, and the read-back's wait for records.
	// Default 2 min.
	DrainTimeout time.Duration

	// MetricsListen, if set, is a host:port serving the run's counters
	// on /metrics while it runs, and the process's profiles on
	// /debug/pprof/.
	MetricsListen string
	// Interval is how often progress is printed. Default 1 s.
	Interval time.Duration
}

func (c AgentsConfig) withDefaults() AgentsConfig {
	c.Client = c.Client.withDefaults()
	c.Agents = cmp.Or(c.Agents, 100)
	c.Rate = cmp.Or(c.Rate, 50)
	c.SampleBytes = cmp.Or(c.SampleBytes, 100)
	c.Duration = cmp.Or(c.Duration, time.Minute)
	c.FaultPhase = cmp.Or(c.FaultPhase, 30*time.Second)
	c.RecoverTimeout = cmp.Or(c.RecoverTimeout, 2*time.Minute)
	c.Topic = cmp.Or(c.Topic, "simtel-bench-agents-"+strconv.FormatInt(time.Now().Unix(), 10))
	c.Partitions = cmp.Or(c.Partitions, 12)
	c.Linger = cmp.Or(c.Linger, time.Second)
	c.BatchMaxBytes = cmp.Or(c.BatchMaxBytes, 1<<20)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 2*time.Minute)
	c.Interval = cmp.Or(c.Interval, time.Second)
	return c
}

// Validate reports the first setting that cannot work, after defaults.
func (c AgentsConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Spawn < 0:
		return fmt.Errorf("spawn %d is negative", c.Spawn)
	case c.Spawn == 0 && len(c.Brokers) == 0:
		return errors.New("no brokers: give the cluster's brokers or spawn one")
	case c.Spawn > 0 && len(c.Brokers) > 0:
		return errors.New("give brokers or spawn a cluster, not both")
	case c.Spawn > 0 && c.Binary == "":
		return errors.New("spawning brokers needs the simtel binary")
	case c.Spawn > 9:
		return fmt.Errorf("spawn %d: at most 9 brokers (their ports are base+0..9)", c.Spawn)
	case c.SpawnPortBase < 0 || c.SpawnPortBase > 65535-40:
		return fmt.Errorf("port base %d leaves no room for 40 ports", c.SpawnPortBase)
	case c.Spawn > 0 && len(c.BrokerHTTP) > 0:
		return errors.New("the spawned brokers' HTTP listeners are the run's own: give no broker HTTP addresses")
	case len(c.BrokerHTTP) > 0 && len(c.BrokerHTTP) != len(c.Brokers):
		return fmt.Errorf("%d broker HTTP addresses for %d brokers: give one per broker, in the same order", len(c.BrokerHTTP), len(c.Brokers))
	case c.Agents < 1:
		return fmt.Errorf("agents %d is not positive", c.Agents)
	case c.Rate <= 0 || math.IsInf(c.Rate, 0) || math.IsNaN(c.Rate):
		return fmt.Errorf("rate %g is not a positive number of samples per second", c.Rate)
	case c.SampleBytes < 80 || c.SampleBytes > 1<<20:
		return fmt.Errorf("sample bytes %d is outside [80, 1 MiB] (the line's name, node, sequence number and timestamp take up to 80)", c.SampleBytes)
	case c.Duration < 0 || c.FaultPhase < 0 || c.RecoverTimeout < 0 || c.DrainTimeout < 0 || c.Linger < 0:
		return errors.New("durations must not be negative")
	case c.RestartBroker < AutoBroker:
		return fmt.Errorf("restart broker %d is no node id", c.RestartBroker)
	case c.RestartBroker >= 0 && c.Spawn > 0 && int(c.RestartBroker) >= c.Spawn:
		return fmt.Errorf("restart broker %d: the spawned brokers are 0..%d", c.RestartBroker, c.Spawn-1)
	case (c.RestartBroker != NoBroker || c.KillController) && c.Spawn == 0:
		return fmt.Errorf("%w; without it, skip the restart and the controller kill", errNoSpawn)
	case c.Partitions < 1:
		return fmt.Errorf("partitions %d is not positive", c.Partitions)
	case c.BatchMaxBytes < 1:
		return fmt.Errorf("batch max bytes %d is not positive", c.BatchMaxBytes)
	case c.Interval < 10*time.Millisecond:
		return fmt.Errorf("interval %s is below 10 ms", c.Interval)
	}
	return nil
}

// AgentsSettings is the configuration a result was measured with.
type AgentsSettings struct {
	Brokers        int     `json:"brokers"`
	Spawned        bool    `json:"spawned"`
	Agents         int     `json:"agents"`
	Rate           float64 `json:"rate_per_agent"`
	SampleBytes    int     `json:"sample_bytes"`
	Topic          string  `json:"topic"`
	Partitions     int32   `json:"partitions"`
	Replication    int16   `json:"replication"`
	DurationS      float64 `json:"duration_s"`
	FaultPhaseS    float64 `json:"fault_phase_s"`
	LingerMS       float64 `json:"linger_ms"`
	RestartBroker  int32   `json:"restart_broker"` // -1: no restart phase
	KillController bool    `json:"kill_controller"`
	GOMAXPROCS     int     `json:"gomaxprocs"`
	CPUs           int     `json:"cpus"`
}

// AgentsResult is what Agents measured. Counts are samples.
type AgentsResult struct {
	Kind     string         `json:"kind"` // "agents"
	Settings AgentsSettings `json:"settings"`
	Started  time.Time      `json:"started"`

	Agents int `json:"agents"`
	// Accepted: samples the agents took into their spools. Acked: the
	// brokers acknowledged them. Delivered: distinct samples read back
	// from the topic. Lost = Accepted − Delivered; Duplicated counts
	// samples read more than once (each extra read).
	Accepted   int64 `json:"accepted"`
	Acked      int64 `json:"acked"`
	Delivered  int64 `json:"delivered"`
	Lost       int64 `json:"lost"`
	Duplicated int64 `json:"duplicated"`
	AgentsLost int   `json:"agents_lost"`
	// Refused: samples the brokers refused for good (the shipper drops
	// them). Foreign: records of the topic that are no sample of the run.
	Refused int64 `json:"refused"`
	Foreign int64 `json:"foreign"`
	// AgentWarnings counts the warnings the shippers logged (retries).
	AgentWarnings int64 `json:"agent_warnings"`

	// ConnectS is the time from starting the agents until every one had
	// its first samples acknowledged; the steady phase starts then.
	ConnectS float64        `json:"connect_s"`
	Phases   []AgentsPhase  `json:"phases"`
	Baseline []BrokerSample `json:"brokers_before_agents,omitempty"`
	// RSSPerAgentBytes is the brokers' RSS at the end of the steady
	// phase minus before the agents connected, summed over the brokers,
	// per agent.
	RSSPerAgentBytes int64 `json:"broker_rss_per_agent_bytes"`
	// HeapPerAgentBytes is the same for go_memstats_heap_inuse_bytes
	// plus go_memstats_stack_inuse_bytes.
	HeapPerAgentBytes int64 `json:"broker_heap_per_agent_bytes"`
	// GoroutinesPerAgent and FDsPerAgent: the brokers' growth, per agent.
	// These four are 0 when a broker could not be read.
	GoroutinesPerAgent float64 `json:"broker_goroutines_per_agent"`
	FDsPerAgent        float64 `json:"broker_fds_per_agent"`

	// The emulating process itself, at the end of the steady phase.
	ClientRSSBytes   int64 `json:"client_rss_bytes"`
	ClientGoroutines int   `json:"client_goroutines"`

	DrainS    float64 `json:"drain_s"`
	ReadBackS float64 `json:"read_back_s"`
}

// AgentsPhase is one phase of the run.
type AgentsPhase struct {
	Name string `json:"name"` // steady, restart-broker or kill-controller
	// Broker is the broker stopped or killed; -1 in the steady phase.
	Broker    int32   `json:"broker"`
	DurationS float64 `json:"duration_s"`
	Accepted  int64   `json:"accepted"`
	Acked     int64   `json:"acked"`
	// Latency of the agents' spool reads, from the read to the last
	// acknowledgement of its batches, in this phase.
	Latency LatencySummary `json:"latency"`
	// DownS: from the stop or kill until the broker listened again.
	// StopS: how long the broker took to stop after SIGTERM.
	DownS float64 `json:"down_s,omitempty"`
	StopS float64 `json:"stop_s,omitempty"`
	// RecoverMaxS and RecoverP50S: from the stop or kill until an agent
	// had a sample acknowledged that it took after it; the largest over
	// the agents and the median. AgentsNotBack did not within
	// RecoverTimeout.
	RecoverMaxS   float64 `json:"recover_max_s,omitempty"`
	RecoverP50S   float64 `json:"recover_p50_s,omitempty"`
	AgentsNotBack int     `json:"agents_not_back"`
	// Brokers at the end of the phase.
	Brokers []BrokerSample `json:"brokers,omitempty"`
}

// emuAgent is one emulated agent.
type emuAgent struct {
	sp   *memSpool
	p    *shipper.Producer
	key  []byte
	node []byte
	gen  uint64 // samples the generator gave it (generator's)
}

// agentsRun is one Agents call's state.
type agentsRun struct {
	cfg     AgentsConfig
	log     *slog.Logger
	cluster *spawnedCluster // nil without Spawn
	brokers []string
	http    []string
	opts    []kgo.Opt
	agents  []*emuAgent
	hc      *http.Client
	run     string // the key prefix of this run's samples

	acked    atomic.Int64
	refused  atomic.Int64
	warnings atomic.Int64
	phaseLat atomic.Pointer[Latency]
	phase    atomic.Pointer[string]
	waiting  atomic.Int64 // agents not back after their start or a fault, as of the last progress line
}

// Agents runs the emulated agents against the cluster. The result is
// returned with what was measured even when the run fails; it fails if
// any sample was lost or duplicated, or an agent did not deliver again
// after a fault within RecoverTimeout.
func Agents(ctx context.Context, cfg AgentsConfig) (*AgentsResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r := &agentsRun{cfg: cfg, log: cfg.Logger, brokers: cfg.Brokers, http: cfg.BrokerHTTP,
		hc: &http.Client{Timeout: 10 * time.Second}, run: cfg.Topic}
	if cfg.Spawn > 0 {
		r.progressf("starting %d brokers", cfg.Spawn)
		c, err := spawnCluster(ctx, cfg.Binary, cfg.Spawn, cfg.SpawnPortBase, cfg.SpawnDir, r.log)
		if err != nil {
			return nil, err
		}
		defer c.close()
		r.cluster, r.brokers = c, c.addrs()
		for _, b := range c.brokers {
			r.http = append(r.http, b.http)
		}
	}
	r.opts = append([]kgo.Opt{kgo.SeedBrokers(r.brokers...), kgo.WithLogger(kgoLogger{r.log})}, cfg.ClientOpts...)
	res := &AgentsResult{Kind: "agents", Started: time.Now().UTC(), Agents: cfg.Agents}
	rf, err := r.createTopic(ctx)
	if err != nil {
		return nil, err
	}
	res.Settings = r.settings(rf)
	if cfg.MetricsListen != "" {
		stop, err := r.serveMetrics()
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	res.Baseline = r.sampleBrokers(ctx)
	err = r.exercise(ctx, res)
	return res, err
}

func (r *agentsRun) settings(rf int16) AgentsSettings {
	c := r.cfg
	restart := c.RestartBroker
	if restart == AutoBroker {
		restart = -1 // set when the phase runs
	}
	return AgentsSettings{Brokers: len(r.brokers), Spawned: c.Spawn > 0, Agents: c.Agents, Rate: c.Rate,
		SampleBytes: c.SampleBytes, Topic: c.Topic, Partitions: c.Partitions, Replication: rf,
		DurationS: c.Duration.Seconds(), FaultPhaseS: c.FaultPhase.Seconds(),
		LingerMS: float64(c.Linger) / 1e6, RestartBroker: restart, KillController: c.KillController,
		GOMAXPROCS: runtime.GOMAXPROCS(0), CPUs: runtime.NumCPU()}
}

func (r *agentsRun) progressf(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "agents: "+format+"\n", args...)
	}
}

// createTopic creates the run's topic, replicated on up to three brokers,
// and waits until each partition has a leader.
func (r *agentsRun) createTopic(ctx context.Context) (int16, error) {
	cl, err := kgo.NewClient(r.opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("cannot reach the brokers %v: %w", r.brokers, err)
	}
	rf := int16(min(3, len(meta.Brokers)))
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := adm.CreateTopic(ctx, r.cfg.Partitions, rf, nil, r.cfg.Topic)
		if err == nil {
			err = resp.Err
		}
		if errors.Is(err, kerr.TopicAlreadyExists) {
			return 0, fmt.Errorf("topic %s exists: the read-back needs a topic of this run's samples only; choose another topic", r.cfg.Topic)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("cannot create topic %s: %w", r.cfg.Topic, err)
		}
		time.Sleep(500 * time.Millisecond) // a new cluster may not take topics yet
	}
	for {
		_, parts, err := describeTopic(ctx, adm, r.cfg.Topic)
		led := 0
		for _, p := range parts {
			if p.leader >= 0 {
				led++
			}
		}
		if err == nil && led == int(r.cfg.Partitions) {
			return rf, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("topic %s: %d of %d partitions have a leader after a minute (%v)", r.cfg.Topic, led, r.cfg.Partitions, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sampleBrokers reads every broker.
func (r *agentsRun) sampleBrokers(ctx context.Context) []BrokerSample {
	var out []BrokerSample
	n := max(len(r.brokers), len(r.http))
	if r.cluster == nil && len(r.http) == 0 {
		return nil
	}
	for i := range n {
		id, pid, h := int32(i), 0, ""
		if i < len(r.http) {
			h = r.http[i]
		}
		if r.cluster != nil {
			b := r.cluster.brokers[i]
			id, pid = b.id, b.pid()
		}
		out = append(out, sampleBroker(ctx, r.hc, id, h, pid))
	}
	return out
}

// exercise runs the agents through the phases, drains them and checks
// the topic.
func (r *agentsRun) exercise(ctx context.Context, res *AgentsResult) error {
	cfg := r.cfg
	actx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopAgents()
		wg.Wait()
		for _, a := range r.agents {
			a.p.Close()
		}
	}()
	agentLog := slog.New(&countingHandler{inner: r.log.Handler(), n: &r.warnings, forward: 20})
	empty := ""
	r.phase.Store(&empty)
	r.phaseLat.Store(NewLatency())
	started := time.Now()
	for i := range cfg.Agents {
		key := sampleKey(r.run, i)
		a := &emuAgent{sp: newMemSpool(), key: key, node: key[len(r.run)+1:]}
		p, err := shipper.New(shipper.Config{
			Brokers: r.brokers, ClientOpts: cfg.ClientOpts, Topic: cfg.Topic,
			Linger: cfg.Linger, BatchMaxBytes: cfg.BatchMaxBytes,
			Logger: agentLog.With("agent", i),
			OnDelivery: func(d shipper.Delivery) {
				r.acked.Add(int64(d.Sent))
				r.refused.Add(int64(d.Dropped))
				r.phaseLat.Load().Record(d.Latency)
			},
		})
		if err != nil {
			return fmt.Errorf("agent %d: %w", i, err)
		}
		a.p = p
		r.agents = append(r.agents, a)
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Run(actx, a.sp)
		}()
	}
	r.progressf("%d agents started, %g samples/s each, topic %s", cfg.Agents, cfg.Rate, cfg.Topic)

	gctx, stopGen := context.WithCancel(actx)
	genDone := make(chan struct{})
	go func() {
		defer close(genDone)
		r.generate(gctx, started)
	}()
	wctx, stopWatch := context.WithCancel(actx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		r.watch(wctx, started)
	}()
	stopLoad := func() {
		stopGen()
		<-genDone
		stopWatch()
		<-watchDone
	}

	phaseErr := r.phases(ctx, res, started)
	stopLoad()
	var taken []uint64
	for _, a := range r.agents {
		n, _ := a.sp.counts()
		taken = append(taken, n)
		res.Accepted += int64(n)
	}

	r.progressf("load stopped; waiting for the agents to deliver what they took")
	t0 := time.Now()
	drainErr := r.drain(ctx)
	res.DrainS = time.Since(t0).Seconds()
	stopAgents()
	wg.Wait()
	res.Acked, res.Refused, res.AgentWarnings = r.acked.Load(), r.refused.Load(), r.warnings.Load()

	r.progressf("reading the topic back")
	t0 = time.Now()
	t := newTally(taken)
	readErr := readBack(ctx, r.opts, cfg.Topic, r.run, t, cfg.DrainTimeout)
	res.ReadBackS = time.Since(t0).Seconds()
	res.Delivered, res.Duplicated, res.Foreign = t.delivered, t.duplicated, t.foreign
	res.Lost, res.AgentsLost = t.lost()

	var errs []error
	for _, e := range []error{phaseErr, drainErr, readErr} {
		if e != nil {
			errs = append(errs, e)
		}
	}
	if res.Lost > 0 || res.Duplicated > 0 {
		errs = append(errs, fmt.Errorf("%d samples lost (of %d agents), %d duplicated", res.Lost, res.AgentsLost, res.Duplicated))
	}
	return errors.Join(errs...)
}

// phases runs the steady phase and the fault phases.
func (r *agentsRun) phases(ctx context.Context, res *AgentsResult, started time.Time) error {
	cfg := r.cfg
	r.beginPhase("connect", -1)
	// Every agent's first acknowledgement (memSpool watches from 0). The
	// steady phase begins then, so that its latency is not the first
	// connections' and producer ids'.
	var connectErr error
	if maxS, _, notBack := r.waitBack(ctx, started, cfg.RecoverTimeout); notBack > 0 {
		connectErr = fmt.Errorf("%d of %d agents delivered nothing within %s of their start", notBack, cfg.Agents, cfg.RecoverTimeout)
	} else {
		res.ConnectS = maxS
	}
	steady := r.beginPhase("steady", -1)
	if !sleepUntil(ctx, steady.start.Add(cfg.Duration)) {
		return ctx.Err()
	}
	p := r.endPhase(ctx, steady)
	res.Phases = append(res.Phases, p)
	r.perAgent(res, p.Brokers)
	if connectErr != nil {
		return connectErr
	}
	if r.cluster == nil {
		return nil
	}

	var errs []error
	if cfg.RestartBroker != NoBroker {
		id := cfg.RestartBroker
		if id == AutoBroker {
			ctrl, err := r.waitAll(ctx)
			if err != nil {
				return err
			}
			id = int32(0)
			if ctrl == 0 {
				id = 1 % int32(len(r.cluster.brokers))
			}
		}
		res.Settings.RestartBroker = id
		p, err := r.faultPhase(ctx, "restart-broker", id, false)
		res.Phases = append(res.Phases, p)
		errs = append(errs, err)
	}
	if cfg.KillController && ctx.Err() == nil {
		ctrl, err := r.waitAll(ctx)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		p, err := r.faultPhase(ctx, "kill-controller", ctrl, true)
		res.Phases = append(res.Phases, p)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// perAgent derives the brokers' cost per connected agent from the steady
// phase's end against the baseline.
func (r *agentsRun) perAgent(res *AgentsResult, end []BrokerSample) {
	if len(res.Baseline) == 0 || len(end) != len(res.Baseline) {
		return
	}
	var rss, heap, gor, fds int64
	rssOK, metricsOK := true, true
	for i, b := range end {
		a := res.Baseline[i]
		rssOK = rssOK && a.RSSBytes > 0 && b.RSSBytes > 0
		// A broker whose /metrics did not answer (a busy machine) has
		// zeros there, which would pass for no growth.
		metricsOK = metricsOK && a.Goroutines > 0 && b.Goroutines > 0
		rss += b.RSSBytes - a.RSSBytes
		heap += b.HeapInuseBytes + b.StackInuseBytes - a.HeapInuseBytes - a.StackInuseBytes
		gor += b.Goroutines - a.Goroutines
		fds += b.OpenFDs - a.OpenFDs
	}
	n := int64(r.cfg.Agents)
	if rssOK {
		res.RSSPerAgentBytes = rss / n
	}
	if metricsOK {
		res.HeapPerAgentBytes = heap / n
		res.GoroutinesPerAgent, res.FDsPerAgent = float64(gor)/float64(n), float64(fds)/float64(n)
	}
	res.ClientGoroutines = runtime.NumGoroutine()
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		if m, err := parseProcStatus(b); err == nil {
			res.ClientRSSBytes = m.RSS
		}
	}
}

// waitAll waits until a live broker reports all brokers and a
// controller, and returns the controller.
func (r *agentsRun) waitAll(ctx context.Context) (int32, error) {
	for _, b := range r.cluster.brokers {
		if b.running() {
			return waitCluster(ctx, b.addr, len(r.cluster.brokers), r.cfg.RecoverTimeout)
		}
	}
	return -1, errors.New("no broker is running")
}

type phaseState struct {
	p        AgentsPhase
	start    time.Time
	lat      *Latency
	accepted int64
	acked    int64
}

func (r *agentsRun) beginPhase(name string, broker int32) *phaseState {
	s := &phaseState{p: AgentsPhase{Name: name, Broker: broker}, start: time.Now(), lat: NewLatency(),
		accepted: r.accepted(), acked: r.acked.Load()}
	r.phaseLat.Store(s.lat)
	r.phase.Store(&name)
	return s
}

func (r *agentsRun) endPhase(ctx context.Context, s *phaseState) AgentsPhase {
	s.p.DurationS = time.Since(s.start).Seconds()
	s.p.Accepted = r.accepted() - s.accepted
	s.p.Acked = r.acked.Load() - s.acked
	s.p.Latency = s.lat.Summary()
	s.p.Brokers = r.sampleBrokers(ctx)
	return s.p
}

func (r *agentsRun) accepted() int64 {
	var n int64
	for _, a := range r.agents {
		x, _ := a.sp.counts()
		n += int64(x)
	}
	return n
}

// faultPhase stops (or kills) broker id, starts it again, and measures
// how long the agents took to deliver again.
func (r *agentsRun) faultPhase(ctx context.Context, name string, id int32, kill bool) (AgentsPhase, error) {
	b := r.cluster.broker(id)
	s := r.beginPhase(name, id)
	for _, a := range r.agents {
		a.sp.watchFrom()
	}
	event := time.Now()
	r.progressf("%s: broker %d", name, id)
	if kill {
		r.cluster.kill(b)
	} else {
		if err := r.cluster.stop(b, 60*time.Second); err != nil {
			r.log.Warn("broker stop", "err", err)
		}
		s.p.StopS = time.Since(event).Seconds()
	}
	var errs []error
	if err := r.cluster.start(ctx, b); err != nil {
		errs = append(errs, err)
	}
	s.p.DownS = time.Since(event).Seconds()
	maxS, p50, notBack := r.waitBack(ctx, event, r.cfg.RecoverTimeout)
	s.p.RecoverMaxS, s.p.RecoverP50S, s.p.AgentsNotBack = maxS, p50, notBack
	if notBack > 0 {
		errs = append(errs, fmt.Errorf("%s: %d of %d agents did not deliver again within %s of broker %d's %s", name, notBack, r.cfg.Agents, r.cfg.RecoverTimeout, id, map[bool]string{false: "stop", true: "kill"}[kill]))
	}
	if !sleepUntil(ctx, event.Add(r.cfg.FaultPhase)) {
		errs = append(errs, ctx.Err())
	}
	p := r.endPhase(ctx, s)
	r.progressf("%s: broker %d down %.1fs; every agent delivering again after %.1fs (median %.1fs)", name, id, p.DownS, p.RecoverMaxS, p.RecoverP50S)
	return p, errors.Join(errs...)
}

// waitBack waits until every agent had a sample acknowledged that it took
// after the spools began watching, or within has passed since from. It
// returns the largest and the median time from from, and how many agents
// were not back.
func (r *agentsRun) waitBack(ctx context.Context, from time.Time, within time.Duration) (maxS, p50S float64, notBack int) {
	deadline := from.Add(within)
	for {
		notBack = 0
		var ds []float64
		for _, a := range r.agents {
			if t := a.sp.back(); t.IsZero() {
				notBack++
			} else {
				ds = append(ds, t.Sub(from).Seconds())
			}
		}
		if notBack == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			if len(ds) > 0 {
				sort.Float64s(ds)
				maxS, p50S = ds[len(ds)-1], ds[len(ds)/2]
			}
			return maxS, p50S, notBack
		}
		sleepUntil(ctx, time.Now().Add(50*time.Millisecond))
	}
}

// notBack counts the agents that have not delivered a sample taken
// since the spools began watching.
func (r *agentsRun) notBack() int {
	n := 0
	for _, a := range r.agents {
		if a.sp.back().IsZero() {
			n++
		}
	}
	return n
}

// drain waits until every agent's spool is acknowledged to its end.
func (r *agentsRun) drain(ctx context.Context) error {
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	for {
		left, agents := uint64(0), 0
		for _, a := range r.agents {
			n, acked := a.sp.counts()
			if acked < n {
				left += n - acked
				agents++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d samples of %d agents still not acknowledged %s after the load stopped", left, agents, r.cfg.DrainTimeout)
		}
		sleepUntil(ctx, time.Now().Add(100*time.Millisecond))
	}
}

// generate gives every agent its samples: by each tick, Rate × the time
// since started. A tick is 100 ms, or a sample's interval if longer.
func (r *agentsRun) generate(ctx context.Context, started time.Time) {
	tick := max(100*time.Millisecond, time.Duration(float64(time.Second)/r.cfg.Rate))
	t := time.NewTicker(tick)
	defer t.Stop()
	size := r.cfg.SampleBytes
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			want := uint64(r.cfg.Rate * now.Sub(started).Seconds())
			ts := now.UnixNano()
			for _, a := range r.agents {
				n := int(want - a.gen)
				if want <= a.gen {
					continue
				}
				a.gen = want
				// One allocation for the tick's samples of an agent, not
				// one per sample: at thousands of agents the emulator's
				// allocations compete with the brokers for the cores.
				buf := make([]byte, 0, n*size)
				a.sp.append(n, func(seq uint64) spool.Record {
					start := len(buf)
					buf = appendSample(buf, a.node, seq, ts, size)
					return spool.Record{Key: a.key, Value: buf[start:len(buf):len(buf)], Time: ts}
				})
			}
		}
	}
}

// watch prints a progress line every Interval.
func (r *agentsRun) watch(ctx context.Context, started time.Time) {
	if r.cfg.Progress == nil {
		return
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	lastT, lastA := started, int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.waiting.Store(int64(r.notBack()))
			acked := r.acked.Load()
			l := r.phaseLat.Load().Summary()
			fmt.Fprintf(r.cfg.Progress, "agents: %-15s %6.1fs %10s acked/s %14s acked %6d agents waiting p50 %6.1f ms p99 %7.1f ms\n",
				*r.phase.Load(), now.Sub(started).Seconds(),
				groupDigits(int64(float64(acked-lastA)/now.Sub(lastT).Seconds())), groupDigits(acked),
				r.waiting.Load(), float64(l.P50US)/1e3, float64(l.P99US)/1e3)
			lastT, lastA = now, acked
		}
	}
}

// serveMetrics serves the run's counters on MetricsListen until stop.
func (r *agentsRun) serveMetrics() (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_bench_agents_accepted_samples_total", Help: "Samples the emulated agents took."},
			func() float64 { return float64(r.accepted()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_bench_agents_acked_samples_total", Help: "Samples the brokers acknowledged."},
			func() float64 { return float64(r.acked.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_bench_agents_waiting_agents", Help: "Agents not delivering again yet after a broker stop or kill."},
			func() float64 { return float64(r.notBack()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_bench_agents_warnings_total", Help: "Warnings the emulated agents' shippers logged."},
			func() float64 { return float64(r.warnings.Load()) }),
	)
	// The emulator's own profile: what thousands of agents cost the
	// emulating process, apart from the brokers.
	stop, err = metricsrv.Start(r.cfg.MetricsListen, reg, slog.Default(), metricsrv.Pprof)
	if err != nil {
		return nil, fmt.Errorf("cannot listen for metrics on %s: %w", r.cfg.MetricsListen, err)
	}
	return stop, nil
}

// sleepUntil sleeps until t and reports whether ctx is still live.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// countingHandler counts the agents' warnings and errors and passes the
// first forward of them on: a broker restart makes every agent warn
// once, which at thousands of agents would bury the progress lines.
type countingHandler struct {
	inner   slog.Handler
	n       *atomic.Int64
	forward int64
}

func (h *countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn
}

func (h *countingHandler) Handle(ctx context.Context, rec slog.Record) error {
	if h.n.Add(1) <= h.forward && h.inner.Enabled(ctx, rec.Level) {
		return h.inner.Handle(ctx, rec)
	}
	return nil
}

func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{inner: h.inner.WithAttrs(as), n: h.n, forward: h.forward}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{inner: h.inner.WithGroup(name), n: h.n, forward: h.forward}
}
