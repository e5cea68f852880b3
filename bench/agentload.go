package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simtel/simtel/internal/linegen"
)

// AgentLoadConfig configures AgentLoad. Zero values take the defaults
// noted.
type AgentLoadConfig struct {
	// Transport is udp, tcp or http. Default udp.
	Transport string
	// Addr is the agent listener's host:port for the transport. Required.
	Addr string
	// HTTPPath is the write path and query. Default "/write?db=bench"
	// (InfluxDB 1.x, nanosecond timestamps); "/api/v2/write?bucket=bench"
	// is the 2.x API.
	HTTPPath string
	// Rate is the lines per second to send, paced every millisecond. 0
	// sends as fast as the transport takes them.
	Rate float64
	// Duration is how long the measured part of the run sends. Default 10 s.
	Duration time.Duration
	// Warmup is sent before the measurement starts and is not measured
	// (it is counted in the delivery check). Default 0.
	Warmup time.Duration
	// DatagramBytes bounds a UDP datagram, or a TCP write, to whole lines
	// of at most this many bytes, as Telegraf's socket_writer and StatsD
	// clients pack them. Default 8192.
	DatagramBytes int
	// Batch is the lines per HTTP POST. Default 5000.
	Batch int
	// Linger sends a batch that is not full once its first line is this
	// old, so low rates are not held back. Default 1 s (at 10,000 lines/s
	// a 5000-line POST fills in half a second).
	Linger time.Duration
	// Senders is the number of HTTP requests in flight, each on its own
	// connection. Default 2.
	Senders int
	// Ranks is the number of distinct rank tags; with the env and device
	// tags they make the series. Default 64.
	Ranks int
	// Variants is the number of pre-rendered lines the generator cycles
	// through. Default 4096.
	Variants int

	// AgentPID, if not 0, is the agent process to measure: its CPU time
	// and memory from /proc over the run.
	AgentPID int
	// AgentHTTP is the agent's HTTP listener, host:port, for its /metrics
	// (the delivery check) and /debug/pprof (Profile). Default none:
	// nothing is checked.
	AgentHTTP string
	// Client's Brokers, if set, are asked for the end offsets of Topic
	// before and after the run: what reached the broker. Its Progress
	// gets one line per SampleInterval.
	Client
	// Topic the agent ships to. Default "telemetry".
	Topic string
	// DrainTimeout bounds the wait, after the last line, for the agent to
	// ship what it accepted (and, before the first line, for it to ship
	// what an earlier run left). Default 60 s.
	DrainTimeout time.Duration
	// SampleInterval is how often the agent is sampled for the timeline,
	// the largest RSS and the progress line. Default 1 s.
	SampleInterval time.Duration
	// Profile, if set, is a file that gets a CPU profile of the agent
	// (from its /debug/pprof/profile) over the measured part of the run.
	Profile string
}

func (c AgentLoadConfig) withDefaults() AgentLoadConfig {
	c.Client = c.Client.withDefaults()
	c.Transport = cmp.Or(c.Transport, "udp")
	c.HTTPPath = cmp.Or(c.HTTPPath, "/write?db=bench")
	c.Duration = cmp.Or(c.Duration, 10*time.Second)
	c.DatagramBytes = cmp.Or(c.DatagramBytes, 8192)
	c.Batch = cmp.Or(c.Batch, 5000)
	c.Linger = cmp.Or(c.Linger, time.Second)
	c.Senders = cmp.Or(c.Senders, 2)
	c.Ranks = cmp.Or(c.Ranks, 64)
	c.Variants = cmp.Or(c.Variants, 4096)
	c.Topic = cmp.Or(c.Topic, "telemetry")
	c.DrainTimeout = cmp.Or(c.DrainTimeout, time.Minute)
	c.SampleInterval = cmp.Or(c.SampleInterval, time.Second)
	return c
}

// Validate reports the first setting that cannot work, after defaults.
func (c AgentLoadConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Transport != "udp" && c.Transport != "tcp" && c.Transport != "http":
		return fmt.Errorf("%q: %w", c.Transport, errUnknownTransport)
	case c.Addr == "":
		return errors.New("the agent's address is required")
	case c.Rate < 0 || math.IsInf(c.Rate, 0) || math.IsNaN(c.Rate):
		return fmt.Errorf("rate %g is not a number of lines per second", c.Rate)
	case c.Duration < 0 || c.Warmup < 0:
		return errors.New("duration and warmup must not be negative")
	case c.DatagramBytes < 256 || c.DatagramBytes > 65507:
		return fmt.Errorf("datagram bytes %d is outside [256, 65507] (lines are up to about 130 bytes)", c.DatagramBytes)
	case c.Batch < 1:
		return fmt.Errorf("batch %d is not positive", c.Batch)
	case c.Linger < 0:
		return fmt.Errorf("linger %s is negative", c.Linger)
	case c.Senders < 1:
		return fmt.Errorf("senders %d is not positive", c.Senders)
	case c.Ranks < 1 || c.Variants < 1:
		return errors.New("ranks and variants must be positive")
	case c.AgentPID < 0:
		return fmt.Errorf("agent pid %d is negative", c.AgentPID)
	case len(c.Brokers) > 0 && c.AgentHTTP == "":
		return errors.New("checking the broker needs the agent's counters: set the agent's HTTP address")
	case c.Profile != "" && c.AgentHTTP == "":
		return errors.New("a profile needs the agent's HTTP address")
	case c.SampleInterval < 10*time.Millisecond:
		return fmt.Errorf("sample interval %s is below 10ms", c.SampleInterval)
	case c.DrainTimeout < 0:
		return fmt.Errorf("drain timeout %s is negative", c.DrainTimeout)
	}
	if !strings.HasPrefix(c.HTTPPath, "/") {
		return fmt.Errorf("http path %q does not start with /", c.HTTPPath)
	}
	return nil
}

// AgentLoadSettings echoes the configuration a result was measured with.
type AgentLoadSettings struct {
	Transport     string  `json:"transport"`
	Addr          string  `json:"addr"`
	HTTPPath      string  `json:"http_path,omitempty"`
	Rate          float64 `json:"rate"` // 0: unpaced
	Duration      string  `json:"duration"`
	Warmup        string  `json:"warmup,omitempty"`
	DatagramBytes int     `json:"datagram_bytes,omitempty"`
	Batch         int     `json:"batch,omitempty"`
	Linger        string  `json:"linger"`
	Senders       int     `json:"senders,omitempty"`
	Ranks         int     `json:"ranks"`
	AgentPID      int     `json:"agent_pid,omitempty"`
	AgentHTTP     string  `json:"agent_http,omitempty"`
	Topic         string  `json:"topic,omitempty"`
}

func (c AgentLoadConfig) settings() AgentLoadSettings {
	s := AgentLoadSettings{Transport: c.Transport, Addr: c.Addr, Rate: c.Rate, Duration: c.Duration.String(),
		Linger: c.Linger.String(), Ranks: c.Ranks, AgentPID: c.AgentPID, AgentHTTP: c.AgentHTTP}
	if c.Warmup > 0 {
		s.Warmup = c.Warmup.String()
	}
	if c.Transport == "http" {
		s.HTTPPath, s.Batch, s.Senders = c.HTTPPath, c.Batch, c.Senders
	} else {
		s.DatagramBytes = c.DatagramBytes
	}
	if c.AgentHTTP != "" && len(c.Brokers) > 0 {
		s.Topic = c.Topic
	}
	return s
}

// AgentLoadResult is the outcome of AgentLoad. The figures without a
// qualifier are over the measured part of the run (after the warmup): lines
// the generator produced then, at the pace it achieved.
type AgentLoadResult struct {
	Kind     string            `json:"kind"` // "agent"
	Settings AgentLoadSettings `json:"settings"`
	Started  time.Time         `json:"started"`
	Elapsed  float64           `json:"elapsed_s"`
	Lines    int64             `json:"lines"`
	Bytes    int64             `json:"bytes"`
	// LinesPerS is the achieved rate; MBPerS counts 10^6 bytes of lines.
	LinesPerS float64 `json:"lines_per_s"`
	MBPerS    float64 `json:"mb_per_s"`
	LineBytes float64 `json:"mean_line_bytes"`
	// Batches are the datagrams, writes or POSTs of the whole run.
	Batches       int64   `json:"batches"`
	LinesPerBatch float64 `json:"lines_per_batch"`
	WarmupLines   int64   `json:"warmup_lines,omitempty"`
	// Behind counts lines the schedule held that the generator skipped
	// because it could not send them in time (see pacer).
	Behind     int64            `json:"lines_behind"`
	Errors     int64            `json:"errors"` // failed writes or requests
	FirstErr   string           `json:"first_error,omitempty"`
	HTTPStatus map[string]int64 `json:"http_status,omitempty"`
	// GeneratorCPUPct is this process's CPU time over the measured part,
	// in % of one core; MachineBusyPct is the whole machine's, in % of
	// all its CPUs (CPUs of them), which shows how much else was running.
	GeneratorCPUPct float64        `json:"generator_cpu_pct"`
	MachineBusyPct  float64        `json:"machine_busy_pct,omitempty"`
	CPUs            int            `json:"cpus"`
	Agent           *AgentCost     `json:"agent,omitempty"`
	Delivery        *AgentDelivery `json:"delivery,omitempty"`
	Profile         string         `json:"profile,omitempty"`
	Timeline        []AgentSecond  `json:"timeline,omitempty"`
	Aborted         string         `json:"aborted,omitempty"`
	Notes           []string       `json:"notes,omitempty"`
}

// AgentCost is what the agent process used. CPU figures are over the
// measured part of the run unless named Step…; memory is in MiB.
type AgentCost struct {
	PID        int     `json:"pid"`
	CPUSeconds float64 `json:"cpu_s"`   // utime + stime
	CPUPct     float64 `json:"cpu_pct"` // of one core
	// ReceivedPerS is the lines per second the agent counted as received
	// on the listener in the measured part (from its metrics; 0 without).
	ReceivedPerS float64 `json:"received_per_s,omitempty"`
	// CPUPctPer10k is CPUPct for each 10,000 lines per second the agent
	// received: CPUPct ÷ (rate / 10,000), with the rate the generator
	// achieved times the fraction of the run's lines the agent received
	// (a UDP line the kernel dropped costs the agent nothing).
	CPUPctPer10k float64 `json:"cpu_pct_per_10k_lines_per_s"`
	// StepCPUSeconds is the CPU time from before the first line to the end
	// of the drain, and MicrosPerLine that time per line accepted. 1 µs
	// per line is 1% of one core at 10,000 lines per second.
	StepCPUSeconds float64 `json:"step_cpu_s"`
	MicrosPerLine  float64 `json:"step_cpu_us_per_line,omitempty"`
	RSSMiB         float64 `json:"rss_mib"`     // VmRSS at the end of the measured part
	AnonMiB        float64 `json:"anon_mib"`    // RssAnon then: heap and stacks
	PSSMiB         float64 `json:"pss_mib"`     // PSS then: RSS with shared pages divided among their processes
	RSSMaxMiB      float64 `json:"rss_max_mib"` // the largest VmRSS sampled
	// PeakMiB is VmHWM at the end of the run: the kernel's own peak of
	// VmRSS since PeakSince ("run": reset at the start of this run
	// through clear_refs; "process start" when that was not allowed).
	PeakMiB   float64 `json:"peak_rss_mib"`
	PeakSince string  `json:"peak_since"`
	Threads   int     `json:"threads"`
}

// AgentSecond is one sample of the run's timeline.
type AgentSecond struct {
	T         float64 `json:"t_s"` // since the first line
	LinesPerS float64 `json:"lines_per_s"`
	CPUPct    float64 `json:"agent_cpu_pct,omitempty"`
	RSSMiB    float64 `json:"agent_rss_mib,omitempty"`
}

const mib = 1 << 20

// AgentLoad sends line protocol to a simtel agent (or anything that takes
// InfluxDB line protocol) at cfg.Rate for the warmup and the duration. With
// AgentPID it measures the agent process over the measured part; with
// AgentHTTP it checks that the agent received, spooled and shipped every
// line, and with Brokers that the topic grew by as many records. It
// returns the result so far together with any error, so a failed run still
// reports what it measured.
//
// Goroutines: the generator runs on the caller's; a monitor samples the
// agent; HTTP senders post batches; an optional profile fetch. AgentLoad
// returns after all of them have exited.
func AgentLoad(ctx context.Context, cfg AgentLoadConfig) (*AgentLoadResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid agent load configuration: %w", err)
	}
	cfg = cfg.withDefaults()
	g := &agentGen{cfg: cfg, lines: linegen.New(cfg.Variants, cfg.Ranks, 1)}
	res := &AgentLoadResult{Kind: "agent", Settings: cfg.settings(), CPUs: runtime.NumCPU()}

	var udpPort int
	if cfg.Transport == "udp" {
		_, p, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("agent address %q: %w", cfg.Addr, err)
		}
		udpPort, _ = strconv.Atoi(p)
	}
	if cfg.AgentPID > 0 {
		g.proc = newProcReader(cfg.AgentPID)
		if _, err := g.proc.read(); err != nil {
			return nil, err
		}
	}
	if cfg.AgentHTTP != "" {
		probe, err := newAgentProbe(cfg.AgentHTTP, cfg.Brokers, cfg.ClientOpts, cfg.Topic, cfg.Logger)
		if err != nil {
			return nil, err
		}
		defer probe.close()
		g.probe = probe
	}

	// 1. Before the first line: what an earlier run left is shipped, then
	// the counters and offsets to compare with, and the peak RSS reset.
	var before agentSnapshot
	var socketEmpty func() bool
	if g.proc != nil && udpPort > 0 {
		socketEmpty = func() bool {
			s, err := g.proc.udp(udpPort)
			return err != nil || !s.Found || s.RxQueue == 0
		}
	}
	if g.probe != nil {
		since, err := g.probe.counters(ctx)
		if err != nil {
			return nil, err
		}
		if _, idle, err := g.probe.waitIdle(ctx, since, -1, cfg.DrainTimeout, socketEmpty); err != nil {
			return nil, err
		} else if !idle {
			res.Notes = append(res.Notes, "the agent was still shipping an earlier run's samples when this run started")
		}
		if before, err = g.probe.snapshot(ctx, g.proc, udpPort); err != nil {
			return nil, err
		}
	}
	var stepStart procSample
	peakSince := "process start"
	if g.proc != nil {
		if err := g.proc.resetPeak(); err == nil {
			peakSince = "run"
		} else {
			cfg.Logger.Warn("cannot reset the agent's peak RSS; VmHWM is since its start", "err", err)
		}
		var err error
		if stepStart, err = g.proc.read(); err != nil {
			return nil, err
		}
	}

	// 2. The run.
	var snd lineSender
	var err error
	switch cfg.Transport {
	case "http":
		snd = newHTTPSender(ctx, "http://"+cfg.Addr+cfg.HTTPPath, cfg.Senders, cfg.Batch*140)
	default:
		snd, err = newConnSender(cfg.Transport, cfg.Addr, cfg.DatagramBytes)
	}
	if err != nil {
		return nil, err
	}
	g.snd = snd
	runErr := g.run(ctx, res)
	snd.close()
	sc := snd.counts()
	res.Batches = sc.Batches
	if sc.Batches > 0 {
		res.LinesPerBatch = float64(sc.Lines) / float64(sc.Batches)
	}
	res.Errors, res.FirstErr = sc.Errors, sc.FirstErr
	if cfg.Transport == "http" {
		res.HTTPStatus = sc.Status
	}
	lastLine := time.Now()

	// 3. After the last line: wait for the agent to ship, then compare.
	var after agentSnapshot
	if g.probe != nil && !errors.Is(runErr, ErrProcessGone) {
		dctx := context.WithoutCancel(ctx) // report even an interrupted run
		c, idle, err := g.probe.waitIdle(dctx, before.Counters, sc.Lines, cfg.DrainTimeout, socketEmpty)
		drained := time.Since(lastLine)
		if err == nil {
			after, err = g.probe.snapshot(dctx, g.proc, udpPort)
			after.Counters = c
		}
		if err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("cannot check delivery: %w", err))
		} else {
			d := newAgentDelivery(before, after, cfg.Transport, sc.Lines, sc.OKLines, cfg.Transport == "udp", g.probe.adm != nil)
			d.DrainS, d.Idle = drained.Seconds(), idle
			res.Delivery = d
		}
	}
	if g.proc != nil {
		res.Agent = g.agentCost(res)
		res.Agent.PeakSince = peakSince
		if s, err := g.proc.read(); err == nil {
			res.Agent.PeakMiB = float64(s.Mem.HWM) / mib
			res.Agent.RSSMaxMiB = max(res.Agent.RSSMaxMiB, float64(s.Mem.RSS)/mib)
			res.Agent.StepCPUSeconds = g.proc.cpuSeconds(stepStart, s)
			if res.Delivery != nil && res.Delivery.Accepted > 0 {
				res.Agent.MicrosPerLine = res.Agent.StepCPUSeconds / float64(res.Delivery.Accepted) * 1e6
			}
		} else if runErr == nil {
			runErr = err
		}
	}
	if ctx.Err() != nil && res.Aborted == "" {
		res.Aborted = "interrupted: " + ctx.Err().Error()
	}
	if runErr != nil && res.Aborted == "" {
		res.Aborted = runErr.Error()
	}
	return res, runErr
}

// agentGen is one run of the generator.
type agentGen struct {
	cfg   AgentLoadConfig
	lines *linegen.Set
	snd   lineSender
	proc  *procReader // nil: the agent is not measured
	probe *agentProbe // nil: no delivery check

	// made and bytes count the lines the generator produced (the achieved
	// rate); the generator goroutine writes them, the monitor reads them
	// for the timeline and the progress line.
	made  atomic.Int64
	bytes atomic.Int64

	// The measured part: its ends, written and read by the generator
	// goroutine.
	win struct {
		from, to windowEnd
		haveCtr  bool
	}
	// Written by the monitor, read after it exited.
	rssMax   int64
	timeline []AgentSecond

	abortOnce sync.Once
	abortErr  error
	cancel    context.CancelFunc
}

func (g *agentGen) abort(err error) {
	g.abortOnce.Do(func() {
		g.abortErr = err
		g.cancel()
	})
}

// run paces lines into batches until the warmup and the duration have
// passed, then sends what is left. Every tick (a millisecond) it asks the
// pacer how many lines are due and adds them to the current batch, which
// leaves when the next line would not fit (UDP, TCP), when it holds Batch
// lines (HTTP), or when its first line is Linger old.
func (g *agentGen) run(ctx context.Context, res *AgentLoadResult) error {
	cfg := g.cfg
	runCtx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	defer cancel()

	start := time.Now()
	res.Started = start
	measureFrom := start.Add(cfg.Warmup)
	end := measureFrom.Add(cfg.Duration)

	monCtx, stopMon := context.WithCancel(runCtx)
	var wg sync.WaitGroup
	wg.Go(func() { g.monitor(monCtx, start) })
	var profErr error
	profile := func() {}
	defer func() {
		stopMon()
		wg.Wait()
	}()

	burst := int64(cfg.Rate / 10) // 100 ms of lines
	burst = max(burst, int64(cfg.Batch), 1000)
	p := newPacer(cfg.Rate, burst, start)
	b, err := g.snd.next(runCtx)
	if err != nil {
		return err
	}
	measuring := false
	tick := time.Millisecond
	nextTick := start
loop:
	for {
		now := time.Now()
		if !measuring && !now.Before(measureFrom) {
			measuring = true
			g.beginWindow(runCtx, now)
			if cfg.Profile != "" {
				secs := max(int(math.Round(cfg.Duration.Seconds())), 1)
				wg.Go(func() { profErr = writeAgentProfile(runCtx, cfg.AgentHTTP, secs, cfg.Profile) })
				profile = func() {
					if profErr != nil {
						res.Notes = append(res.Notes, profErr.Error())
					} else {
						res.Profile = cfg.Profile
					}
				}
			}
		}
		if !now.Before(end) || runCtx.Err() != nil {
			break
		}
		var n int64
		if cfg.Rate > 0 {
			n = p.grant(now)
		} else {
			n = int64(cfg.Batch) // unpaced: a batch's worth per turn
		}
		ts := now.UnixNano()
		for i := range n {
			if b.lines == 0 {
				b.first = now
			}
			l := len(b.buf)
			b.buf = g.lines.AppendLine(b.buf, ts+i)
			b.lines++
			g.made.Add(1)
			g.bytes.Add(int64(len(b.buf) - l))
			if g.full(b) {
				if b, err = g.flush(runCtx, b); err != nil {
					g.abort(err)
					break loop
				}
			}
		}
		if b.lines > 0 && now.Sub(b.first) >= cfg.Linger {
			if b, err = g.flush(runCtx, b); err != nil {
				g.abort(err)
				break loop
			}
		}
		if cfg.Rate > 0 {
			nextTick = nextTick.Add(tick)
			if d := time.Until(nextTick); d > 0 {
				time.Sleep(d)
			} else if d < -10*tick {
				nextTick = time.Now() // far behind: the pacer catches up, ticks need not
			}
		}
	}
	if measuring {
		g.endWindow(runCtx, time.Now())
	}
	if b != nil && b.lines > 0 && runCtx.Err() == nil {
		if _, err := g.flush(runCtx, b); err != nil {
			g.abort(err)
		}
	}
	stopMon()
	wg.Wait()
	profile()

	res.Behind = p.skipped
	w := &g.win
	if measuring {
		el := w.to.at.Sub(w.from.at)
		res.Elapsed = el.Seconds()
		res.Lines = w.to.lines - w.from.lines
		res.Bytes = w.to.bytes - w.from.bytes
		res.WarmupLines = w.from.lines
		if el > 0 {
			res.LinesPerS = float64(res.Lines) / el.Seconds()
			res.MBPerS = float64(res.Bytes) / el.Seconds() / 1e6
			res.GeneratorCPUPct = (w.to.self - w.from.self).Seconds() / el.Seconds() * 100
		}
		if res.Lines > 0 {
			res.LineBytes = float64(res.Bytes) / float64(res.Lines)
		}
		if h0, h1 := w.from.proc.Host, w.to.proc.Host; h1.Total > h0.Total {
			res.MachineBusyPct = float64(h1.Busy-h0.Busy) / float64(h1.Total-h0.Total) * 100
		}
	}
	res.Timeline = g.timeline
	if g.abortErr != nil {
		return g.abortErr
	}
	return ctx.Err()
}

// full reports whether b must leave before the next line.
func (g *agentGen) full(b *lineBatch) bool {
	if g.cfg.Transport == "http" {
		return b.lines >= g.cfg.Batch
	}
	return len(b.buf)+g.lines.NextLen() > g.cfg.DatagramBytes
}

func (g *agentGen) flush(ctx context.Context, b *lineBatch) (*lineBatch, error) {
	if err := g.snd.send(ctx, b); err != nil {
		return nil, err
	}
	return g.snd.next(ctx)
}

// beginWindow and endWindow read everything the measured part is the
// difference of. They run on the generator goroutine, between ticks.
//
// A scrape of the agent's /metrics costs the agent CPU time of its own: it
// is the probe's cost, not the lines', so beginWindow scrapes before it
// reads the agent's CPU time and endWindow after.
func (g *agentGen) beginWindow(ctx context.Context, now time.Time) {
	w := &g.win
	if g.probe != nil {
		c, err := g.probe.counters(ctx)
		w.from.ctr, w.haveCtr = c, err == nil
		now = time.Now()
	}
	g.readEnd(&w.from, now)
}

func (g *agentGen) endWindow(ctx context.Context, now time.Time) {
	w := &g.win
	if !g.readEnd(&w.to, now) {
		return
	}
	if g.probe != nil && w.haveCtr {
		c, err := g.probe.counters(ctx)
		w.to.ctr, w.haveCtr = c, err == nil
	}
}

// windowEnd is what one end of the measured part reads.
type windowEnd struct {
	at           time.Time
	self         time.Duration // this process's CPU time
	lines, bytes int64         // made and bytes
	proc         procSample    // the agent's, or only Host without one
	ctr          agentCounters // the agent's /metrics, if haveCtr
}

// readEnd fills e, but for its counters. It returns false when the agent
// could not be read, which aborts the run.
func (g *agentGen) readEnd(e *windowEnd, now time.Time) bool {
	e.at, e.self = now, selfCPU()
	e.lines, e.bytes = g.made.Load(), g.bytes.Load()
	if g.proc != nil {
		s, err := g.proc.read()
		if err != nil {
			g.abort(err)
			return false
		}
		e.proc = s
	} else if b, err := readMachine(); err == nil {
		e.proc.Host = b
	}
	return true
}

// agentCost derives the agent's figures for the measured part.
func (g *agentGen) agentCost(res *AgentLoadResult) *AgentCost {
	w := &g.win
	a := &AgentCost{PID: g.cfg.AgentPID, RSSMaxMiB: float64(g.rssMax) / mib}
	if w.to.proc.At.IsZero() {
		return a // the run ended before its measured part
	}
	el := w.to.proc.At.Sub(w.from.proc.At).Seconds()
	a.CPUSeconds = g.proc.cpuSeconds(w.from.proc, w.to.proc)
	if el > 0 {
		a.CPUPct = a.CPUSeconds / el * 100
	}
	a.RSSMiB = float64(w.to.proc.Mem.RSS) / mib
	a.AnonMiB = float64(w.to.proc.Mem.Anon) / mib
	a.PSSMiB = float64(w.to.proc.Mem.PSS) / mib
	a.RSSMaxMiB = max(a.RSSMaxMiB, a.RSSMiB)
	a.Threads = w.to.proc.CPU.Threads
	if w.haveCtr && el > 0 {
		l := g.cfg.Transport
		a.ReceivedPerS = float64(w.to.ctr.Received[l]-w.from.ctr.Received[l]) / el
	}
	rate := res.LinesPerS
	if d := res.Delivery; d != nil && d.Sent > 0 {
		rate *= math.Min(1, float64(d.Received)/float64(d.Sent))
	}
	if rate > 0 {
		a.CPUPctPer10k = a.CPUPct / (rate / 1e4)
	}
	return a
}

// monitor samples the agent every SampleInterval until ctx ends: the
// timeline, the largest RSS, the progress line. A vanished agent aborts
// the run.
func (g *agentGen) monitor(ctx context.Context, start time.Time) {
	t := time.NewTicker(g.cfg.SampleInterval)
	defer t.Stop()
	lastAt, lastLines := start, int64(0)
	var last procSample
	if g.proc != nil {
		last, _ = g.proc.read()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			lines := g.made.Load()
			dt := now.Sub(lastAt).Seconds()
			sec := AgentSecond{T: now.Sub(start).Seconds(), LinesPerS: float64(lines-lastLines) / dt}
			lastAt, lastLines = now, lines
			if g.proc != nil {
				s, err := g.proc.read()
				if err != nil {
					g.abort(err)
					return
				}
				if el := s.At.Sub(last.At).Seconds(); el > 0 {
					sec.CPUPct = g.proc.cpuSeconds(last, s) / el * 100
				}
				sec.RSSMiB = float64(s.Mem.RSS) / mib
				g.rssMax = max(g.rssMax, s.Mem.RSS)
				last = s
			}
			g.timeline = append(g.timeline, sec)
			if g.cfg.Progress != nil {
				fmt.Fprintf(g.cfg.Progress, "agent %s %6.1fs %12s lines/s %14s lines", g.cfg.Transport, sec.T,
					groupDigits(int64(sec.LinesPerS)), groupDigits(lines))
				if g.proc != nil {
					fmt.Fprintf(g.cfg.Progress, "   agent %5.1f%% cpu %6.1f MiB", sec.CPUPct, sec.RSSMiB)
				}
				fmt.Fprintln(g.cfg.Progress)
			}
		}
	}
}

func readMachine() (machineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, err
	}
	return parseMachineStat(b)
}
