package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/bench"
)

func newBenchCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load generators and the side-by-side benchmark report",
		Long: `Load generators for any Kafka-compatible broker, a disk durability probe, and
the report tool that bench/compare.sh uses to record and publish results.`,
	}
	cmd.AddCommand(newBenchProduceCmd(g), newBenchConsumeCmd(g), newBenchDiskCmd(), newBenchReportCmd(),
		newBenchAgentCmd(g), newBenchAgentReportCmd(), newBenchFanoutCmd(g), newBenchFanoutReportCmd(), newBenchE2ECmd(g), newBenchSinkCmd())
	return cmd
}

// benchOutput holds the output flags shared by the bench commands.
type benchOutput struct {
	json  bool
	quiet bool
}

func (o *benchOutput) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.json, "json", false, "print one JSON result object on stdout")
	cmd.Flags().BoolVar(&o.quiet, "quiet", false, "no progress line on stderr")
}

func (o *benchOutput) progress() io.Writer {
	if o.quiet {
		return nil
	}
	return os.Stderr
}

// emit prints res (if any) as JSON or through human, then returns runErr:
// a failed run still shows what it measured.
func (o *benchOutput) emit(res any, runErr error, human func(io.Writer)) error {
	// A run that failed before measuring returns a nil result pointer,
	// which is not a nil interface here.
	if v := reflect.ValueOf(res); res != nil && (v.Kind() != reflect.Pointer || !v.IsNil()) {
		if o.json {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(res); err != nil {
				return err
			}
		} else {
			human(os.Stdout)
		}
	}
	return runErr
}

func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

func newBenchProduceCmd(g *globalFlags) *cobra.Command {
	var cfg bench.ProduceConfig
	var brokers string
	var idempotent bool
	var out benchOutput
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Produce records as fast as the broker acknowledges them",
		Long: `Produce fixed-size records of random bytes with independent franz-go clients
and report records/s, MB/s (10^6 bytes of record values) and the latency of
each record from the Produce call to its acknowledgement (p50/p99/p999).

The topic is created with --partitions if it does not exist. The run ends
after --duration or --records, on the first failed record, or when nothing
was acknowledged for --stall-timeout.`,
		Example: `  simtel bench produce --topic bench --partitions 4 --producers 2 --duration 20s
  simtel bench produce --topic bench --acks 1 --idempotent=false --max-inflight 10 --records 1000000 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Brokers = splitBrokers(brokers)
			cfg.NoIdempotence = !idempotent
			if cfg.Duration == 0 && cfg.Records == 0 {
				cfg.Duration = 10 * time.Second
			}
			cfg.Logger = log
			cfg.Progress = out.progress()
			res, runErr := bench.Produce(cmd.Context(), cfg)
			return out.emit(res, runErr, func(w io.Writer) { printProduce(w, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&cfg.Topic, "topic", "simtel-bench", "topic to produce to")
	f.Int32Var(&cfg.Partitions, "partitions", 1, "partitions to create the topic with if it does not exist")
	f.IntVar(&cfg.RecordSize, "record-size", 1024, "bytes of each record's value")
	f.StringVar(&cfg.Acks, "acks", "all", "all, 1 or 0 (1 and 0 turn idempotence off)")
	f.IntVar(&cfg.Producers, "producers", 1, "independent clients producing in parallel")
	f.DurationVar(&cfg.Duration, "duration", 0, "how long to produce (default 10s unless --records)")
	f.Int64Var(&cfg.Records, "records", 0, "how many records to produce in total")
	f.DurationVar(&cfg.Linger, "linger", 0, "how long a partition's batch waits for more records")
	f.Int32Var(&cfg.BatchMaxBytes, "batch-max-bytes", 1<<20, "largest record batch (kgo ProducerBatchMaxBytes)")
	f.IntVar(&cfg.MaxInflight, "max-inflight", 0, "produce requests in flight per broker and client (default: kgo's, 5 when idempotent; other values need --idempotent=false)")
	f.BoolVar(&idempotent, "idempotent", true, "idempotent producer, as the agent uses")
	f.StringVar(&cfg.Compression, "compression", "none", "none, snappy, lz4, zstd or gzip")
	f.StringVar(&cfg.Partitioner, "partitioner", "round-robin", "round-robin (record by record) or sticky (a partition per batch)")
	f.IntVar(&cfg.MaxBufferedRecords, "max-buffered-records", 10000, "records each client buffers before Produce blocks")
	f.Float64Var(&cfg.Rate, "rate", 0, "total records per second (0: as fast as acknowledged)")
	f.DurationVar(&cfg.Warmup, "warmup", 0, "first part of the run that is produced but not measured")
	f.DurationVar(&cfg.StallTimeout, "stall-timeout", 30*time.Second, "abort when nothing was acknowledged for this long")
	out.register(cmd)
	return cmd
}

func printProduce(w io.Writer, r *bench.ProduceResult) {
	s := r.Settings
	fmt.Fprintf(w, "produce %s: %d B records, acks=%s, %d producers, %d partitions, idempotent=%v\n",
		s.Topic, s.RecordSize, s.Acks, s.Producers, s.Partitions, s.Idempotent)
	fmt.Fprintf(w, "  %d records (%.1f MB) in %.2f s: %.0f records/s, %.1f MB/s, %d errors",
		r.Records, float64(r.Bytes)/1e6, r.Elapsed, r.RecPerS, r.MBPerS, r.Errors)
	if r.Warmup > 0 {
		fmt.Fprintf(w, " (after %d warmup records)", r.Warmup)
	}
	fmt.Fprintln(w)
	l := r.Latency
	fmt.Fprintf(w, "  latency ms: p50 %.3f  p90 %.3f  p99 %.3f  p999 %.3f  max %.3f\n",
		float64(l.P50US)/1e3, float64(l.P90US)/1e3, float64(l.P99US)/1e3, float64(l.P999US)/1e3, float64(l.MaxUS)/1e3)
	if r.FirstErr != "" {
		fmt.Fprintf(w, "  first error: %s\n", r.FirstErr)
	}
}

func newBenchConsumeCmd(g *globalFlags) *cobra.Command {
	var cfg bench.ConsumeConfig
	var brokers string
	var out benchOutput
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Read a topic from its start and report MB/s and records/s",
		Long: `Read a topic from its start with independent franz-go clients.

By default records are read with kgo's PollFetches (decoded, as an
application sees them) and MB counts keys and values. With --raw the
clients send FetchRequests themselves and count the record batches from
their headers without decoding records: that measures the broker and the
wire rather than the client's decoding, and MB counts whole batches.

Without --records every partition is read up to the end offset it had when
the run began. The run also ends when nothing arrived for --idle.`,
		Example: `  simtel bench consume --topic bench --raw
  simtel bench consume --topic bench --group bench-readers --consumers 2 --records 1000000 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Brokers = splitBrokers(brokers)
			cfg.Logger = log
			cfg.Progress = out.progress()
			res, runErr := bench.Consume(cmd.Context(), cfg)
			if runErr == nil && res != nil && !res.Complete {
				runErr = fmt.Errorf("stopped after %s without data before reading everything (%d records)", cfg.Idle, res.Records)
			}
			return out.emit(res, runErr, func(w io.Writer) { printConsume(w, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&cfg.Topic, "topic", "simtel-bench", "topic to read")
	f.StringVar(&cfg.Group, "group", "", "consumer group to join (poll mode; default: assign partitions directly)")
	f.IntVar(&cfg.Consumers, "consumers", 1, "independent clients reading in parallel")
	f.Int64Var(&cfg.Records, "records", 0, "stop after this many records (default: read to the end offsets at start)")
	f.DurationVar(&cfg.Idle, "idle", 3*time.Second, "stop when nothing arrived for this long")
	f.BoolVar(&cfg.Raw, "raw", false, "send FetchRequests directly and count batch bytes without decoding records")
	f.Int32Var(&cfg.FetchMaxBytes, "fetch-max-bytes", 50<<20, "response size limit per fetch request")
	f.Int32Var(&cfg.PartitionMaxBytes, "partition-max-bytes", 10<<20, "per-partition size limit within a fetch")
	out.register(cmd)
	return cmd
}

func printConsume(w io.Writer, r *bench.ConsumeResult) {
	s := r.Settings
	fmt.Fprintf(w, "consume %s (%s, %d consumers, %d partitions)\n", s.Topic, s.Mode, s.Consumers, s.Partitions)
	fmt.Fprintf(w, "  %d records (%.1f MB of %s) in %d fetches; first data after %.2f s\n",
		r.Records, float64(r.Bytes)/1e6, r.BytesOf, r.Fetches, r.Startup)
	fmt.Fprintf(w, "  %.0f records/s, %.1f MB/s over %.2f s\n", r.RecPerS, r.MBPerS, r.Elapsed)
}

func newBenchDiskCmd() *cobra.Command {
	var cfg bench.DiskConfig
	var out benchOutput
	cmd := &cobra.Command{
		Use:   "disk",
		Short: "Measure what the disk under a directory can make durable",
		Long: `Measure the bandwidth of sequential writes each followed by fdatasync (as dd
oflag=dsync bs=1M does), and the rate and latency of 4 KiB appends each
followed by fdatasync. The test files are removed afterwards.`,
		Example: "  simtel bench disk --dir /var/lib/simtel",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := bench.MeasureDisk(cmd.Context(), cfg)
			return out.emit(res, err, func(w io.Writer) {
				fmt.Fprintf(w, "disk %s\n  sequential %d B writes + fdatasync: %.1f MB/s\n", res.Dir, res.BlockSize, res.SeqMBPerS)
				if res.SustainSeries != nil {
					fmt.Fprintf(w, "  sustained, per second: %.0f MB/s; last seconds: %.1f MB/s\n", res.SustainSeries, res.SustainMBPerS)
				}
				fmt.Fprintf(w, "  %d B appends + fdatasync: %.0f /s, p50 %d µs, p99 %d µs\n",
					res.AppendSize, res.AppendsPS, res.AppendLat.P50US, res.AppendLat.P99US)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory to test (required)")
	f.Int64Var(&cfg.SeqBytes, "seq-bytes", 512<<20, "most bytes the sequential test writes")
	f.DurationVar(&cfg.SeqTime, "seq-time", 5*time.Second, "longest time for the sequential test")
	f.DurationVar(&cfg.SustainTime, "sustain-time", 0, "also write 1 MiB blocks + fdatasync for this long and report the rate of the last seconds")
	f.IntVar(&cfg.BlockSize, "block-size", 1<<20, "sequential write size")
	f.IntVar(&cfg.AppendSize, "append-size", 4<<10, "append size")
	f.IntVar(&cfg.Appends, "appends", 5000, "most appends to make")
	f.DurationVar(&cfg.AppendTime, "append-time", 3*time.Second, "longest time for the appends")
	f.BoolVar(&out.json, "json", false, "print one JSON result object on stdout")
	return cmd
}

func newBenchReportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Collect benchmark steps into a run and publish it",
		Long: `Used by bench/compare.sh: "add" appends one step's output to a run file,
"publish" writes bench/results/<id>.json and <id>.svg and rewrites the
results section of bench/README.md.`,
	}

	var run, kind, label, command, serverSync, failure, input string
	add := &cobra.Command{
		Use:   "add",
		Short: "Append a step's output to a run file",
		Example: `  simtel bench produce --json ... > p.json
  simtel bench report add --run run.json --kind produce --label produce --command "..." --input p.json
  nats bench js pub async ... | simtel bench report add --run run.json --kind jetstream --label "js async" --command "..."`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := readStepInput(input)
			if err != nil {
				return err
			}
			return bench.AddStep(run, kind, label, command, serverSync, failure, b)
		},
	}
	f := add.Flags()
	f.StringVar(&run, "run", "", "run file to append to (created if missing)")
	f.StringVar(&kind, "kind", "", "disk, produce, consume (their --json output) or jetstream (nats bench text output)")
	f.StringVar(&label, "label", "", "name of the step")
	f.StringVar(&command, "command", "", "the exact command that produced the output")
	f.StringVar(&serverSync, "server-sync", "", "jetstream: the server's sync_interval (empty: its default)")
	f.StringVar(&input, "input", "-", "file with the step's output, - for stdin")
	f.StringVar(&failure, "failed", "", "how the step's command failed (recorded; its figures are left out of the summary)")

	var p bench.PublishConfig
	publish := &cobra.Command{
		Use:   "publish",
		Short: "Write a run's results file and chart and update the README",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := bench.Publish(p.WithDefaults())
			if err != nil {
				return err
			}
			r, err := bench.ReadRun(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stdout, "wrote %s\n", path)
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(r.Summary)
		},
	}
	registerPublishFlags(publish, &p, "bench/results", "results", "bench/compare.sh")

	cmd.AddCommand(add, publish)
	return cmd
}

func newBenchAgentCmd(g *globalFlags) *cobra.Command {
	var cfg bench.AgentLoadConfig
	var brokers string
	var out benchOutput
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Send line protocol to a simtel agent at a fixed rate and measure what it costs",
		Long: `Send InfluxDB line protocol (per-rank training metrics, about 100 bytes a line,
with nanosecond timestamps) to an agent over UDP (datagrams of whole lines up
to --datagram-bytes), TCP (writes of that size) or HTTP (POSTs of --batch
lines), paced every millisecond at --rate lines/s for --warmup and then
--duration.

With --agent-pid the agent process is measured over --duration from
/proc/<pid>/stat and /proc/<pid>/status: CPU time in % of one core and per
10,000 lines/s, resident memory and its peak over the run (VmHWM, reset at
the start through clear_refs). With --agent-http (the default for
--transport http) the agent's /metrics are compared before and after: lines
received, spooled, shipped, dropped; with --brokers also the growth of the
topic's end offsets. After the last line the run waits up to
--drain-timeout for the agent to ship everything it accepted.`,
		Example: `  simtel bench agent --transport udp --addr 127.0.0.1:8089 --rate 100000 --duration 10s
  simtel bench agent --transport http --addr 127.0.0.1:8186 --rate 1000000 --warmup 2s \
      --agent-pid $(pgrep -f 'simtel agent') --brokers 127.0.0.1:9092 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Brokers = splitBrokers(brokers)
			if cfg.AgentHTTP == "" && cfg.Transport == "http" {
				cfg.AgentHTTP = cfg.Addr
			}
			cfg.Logger = log
			cfg.Progress = out.progress()
			res, runErr := bench.AgentLoad(cmd.Context(), cfg)
			return out.emit(res, runErr, func(w io.Writer) { printAgentLoad(w, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Transport, "transport", "udp", "udp, tcp or http")
	f.StringVar(&cfg.Addr, "addr", "127.0.0.1:8089", "the agent's listener for the transport")
	f.StringVar(&cfg.HTTPPath, "http-path", "/write?db=bench", "HTTP write path and query (or /api/v2/write?bucket=bench)")
	f.Float64Var(&cfg.Rate, "rate", 10000, "lines per second (0: as fast as the transport takes them)")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long the measured part sends")
	f.DurationVar(&cfg.Warmup, "warmup", 0, "how long to send before measuring")
	f.IntVar(&cfg.DatagramBytes, "datagram-bytes", 8192, "largest UDP datagram (TCP: write) of whole lines")
	f.IntVar(&cfg.Batch, "batch", 5000, "lines per HTTP POST")
	f.DurationVar(&cfg.Linger, "linger", time.Second, "send a batch that is not full once its first line is this old")
	f.IntVar(&cfg.Senders, "senders", 2, "HTTP requests in flight")
	f.IntVar(&cfg.Ranks, "ranks", 64, "distinct rank tags")
	f.IntVar(&cfg.AgentPID, "agent-pid", 0, "agent process to measure (0: none)")
	f.StringVar(&cfg.AgentHTTP, "agent-http", "", "the agent's HTTP listener for /metrics and /debug/pprof (default: --addr with --transport http)")
	f.StringVar(&brokers, "brokers", "", "brokers to read the topic's end offsets from (empty: no check)")
	f.StringVar(&cfg.Topic, "topic", "telemetry", "the topic the agent ships to")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", time.Minute, "how long to wait for the agent to ship what it accepted")
	f.DurationVar(&cfg.SampleInterval, "sample-interval", time.Second, "how often the agent is sampled")
	f.StringVar(&cfg.Profile, "agent-profile", "", "write a CPU profile of the agent over --duration to this file (needs --agent-http)")
	out.register(cmd)
	return cmd
}

func printAgentLoad(w io.Writer, r *bench.AgentLoadResult) {
	s := r.Settings
	fmt.Fprintf(w, "agent %s %s: target %s lines/s\n", s.Transport, s.Addr, fmtRate(s.Rate))
	fmt.Fprintf(w, "  %d lines (%.1f MB, %.0f B/line) in %.2f s: %.0f lines/s, %.1f MB/s; %d batches (%.0f lines each), %d behind, %d errors\n",
		r.Lines, float64(r.Bytes)/1e6, r.LineBytes, r.Elapsed, r.LinesPerS, r.MBPerS, r.Batches, r.LinesPerBatch, r.Behind, r.Errors)
	if len(r.HTTPStatus) > 0 {
		fmt.Fprintf(w, "  http status: %v\n", r.HTTPStatus)
	}
	fmt.Fprintf(w, "  generator %.1f%% of a core; machine %.0f%% busy (%d CPUs)\n", r.GeneratorCPUPct, r.MachineBusyPct, r.CPUs)
	if a := r.Agent; a != nil {
		fmt.Fprintf(w, "  agent pid %d: %.1f%% of a core (%.2f%% per 10k lines/s, %.2f µs/line over the run), RSS %.1f MiB (anon %.1f), peak %.1f MiB since %s, %d threads\n",
			a.PID, a.CPUPct, a.CPUPctPer10k, a.MicrosPerLine, a.RSSMiB, a.AnonMiB, a.PeakMiB, a.PeakSince, a.Threads)
	}
	if d := r.Delivery; d != nil {
		fmt.Fprintf(w, "  delivery: sent %d, received %d, parse errors %d, accepted %d, shipped %d, dropped %d, delivered %d, drained in %.1f s, complete %v\n",
			d.Sent, d.Received, d.ParseErrors, d.Accepted, d.Shipped, d.Dropped, d.Delivered, d.DrainS, d.Complete)
		if s.Transport == "udp" {
			fmt.Fprintf(w, "  udp socket drops: %d\n", d.UDPSocketDrops)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if r.FirstErr != "" {
		fmt.Fprintf(w, "  first error: %s\n", r.FirstErr)
	}
	if r.Aborted != "" {
		fmt.Fprintf(w, "  aborted: %s\n", r.Aborted)
	}
}

func fmtRate(r float64) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.0f", r)
}

func newBenchAgentReportCmd() *cobra.Command {
	return newStepReportCmd("agent-report", "agent cost", "bench/agent-cost.sh", "simtel bench agent",
		"bench/results/agent-cost", "agent results", bench.AddAgentStep, bench.PublishAgent)
}

// newStepReportCmd builds the add/publish pair the benchmark scripts use to
// collect one benchmark's steps into a run and publish it.
func newStepReportCmd(use, what, script, producer, resultsDir, section string,
	addStep func(run, label, command, failure string, output []byte) error,
	publishRun func(bench.PublishConfig) (string, error)) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: "Collect " + what + " steps into a run and publish it",
		Long: fmt.Sprintf(`Used by %s: "add" appends one step's output (%s
--json) to a run file, "publish" writes %s/<id>.json and
rewrites the %s in bench/README.md.`, script, producer, resultsDir, section),
	}
	var run, label, command, failure, input string
	add := &cobra.Command{
		Use:   "add",
		Short: "Append a step's output to a run file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := readStepInput(input)
			if err != nil {
				return err
			}
			return addStep(run, label, command, failure, b)
		},
	}
	f := add.Flags()
	f.StringVar(&run, "run", "", "run file to append to (created if missing)")
	f.StringVar(&label, "label", "", "name of the step")
	f.StringVar(&command, "command", "", "the exact commands of the step")
	f.StringVar(&input, "input", "-", "file with the step's JSON output, - for stdin")
	f.StringVar(&failure, "failed", "", "how the step's command failed")

	var p bench.PublishConfig
	publish := &cobra.Command{
		Use:   "publish",
		Short: "Write a run's results file and update the README",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := publishRun(p.WithDefaults())
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stdout, "wrote %s\n", path)
			return nil
		},
	}
	registerPublishFlags(publish, &p, resultsDir, section, script)
	cmd.AddCommand(add, publish)
	return cmd
}

// readStepInput reads a step's output from a file or, for "-", stdin.
func readStepInput(input string) ([]byte, error) {
	var b []byte
	var err error
	if input == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(input)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read step output: %w", err)
	}
	return b, nil
}

func registerPublishFlags(cmd *cobra.Command, p *bench.PublishConfig, resultsDir, section, script string) {
	f := cmd.Flags()
	f.StringVar(&p.RunPath, "run", "", "run file made by add (required)")
	f.StringVar(&p.ResultsDir, "results-dir", resultsDir, "where <id>.json goes")
	f.StringVar(&p.README, "readme", "bench/README.md", "file whose "+section+" section is rewritten (empty: none)")
	f.StringVar(&p.ID, "id", time.Now().UTC().Format("2006-01-02-150405"), "name of the results file")
	f.StringVar(&p.Date, "date", "", "date of the run, RFC 3339 (default: now)")
	f.StringVar(&p.Host, "host", "", "description of the machine")
	f.StringVar(&p.Command, "command", script, "how the run was started")
	_ = cmd.MarkFlagRequired("run")
}

func newBenchFanoutCmd(g *globalFlags) *cobra.Command {
	var cfg bench.FanoutConfig
	var brokers, size string
	var out benchOutput
	cmd := &cobra.Command{
		Use:   "fanout",
		Short: "Publish one policy version and time until every worker holds it",
		Long: `Publish a policy version of --size random bytes with the learner's publisher
and measure, for every worker, the time from the Publish call (and from its
return) until the worker holds the version: p50, p99 and max.

--mode node emulates --nodes nodes in this process, each a learner.Subscriber
(its own kafka clients and cache directory under --dir, tmpfs by default)
with --workers-per-node workers that long-poll Subscriber.Wait and then hold
the installed file: open it, check its size and map it read-only (--worker-load
map, the default), or read all of it into a buffer of their own (--worker-load
read, a private copy per worker). --mode direct runs nodes × workers-per-node
direct subscribers, each its own client polling learner.Latest every
--poll-interval and reading the version with learner.Fetch.

With --broker-metrics (the broker's /metrics, simtel broker --http-listen)
the broker's egress over the measurement is read from its counters, and the
run is judged against the loopback bandwidth it measures first (a TCP stream
over 127.0.0.1 for --loopback-time): the last worker should hold the version
within 2x of egress bytes / loopback bandwidth. A 1 KiB warm-up version is
published first, so subscribers start from a held version.`,
		Example: `  simtel bench fanout --brokers 127.0.0.1:9092 --broker-metrics http://127.0.0.1:9644/metrics \
      --mode node --nodes 50 --workers-per-node 20 --size 64MiB
  simtel bench fanout --brokers 127.0.0.1:9092 --broker-metrics http://127.0.0.1:9644/metrics \
      --mode direct --nodes 5 --workers-per-node 20 --size 64MiB --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if cfg.Size, err = bench.ParseByteSize(size); err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			cfg.Brokers = splitBrokers(brokers)
			cfg.Logger = log
			cfg.Progress = out.progress()
			res, runErr := bench.Fanout(cmd.Context(), cfg)
			return out.emit(res, runErr, func(w io.Writer) { bench.PrintFanout(w, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&cfg.Mode, "mode", "node", "node (one subscriber per node, workers read its copy) or direct (every worker fetches)")
	f.IntVar(&cfg.Nodes, "nodes", 50, "emulated nodes")
	f.IntVar(&cfg.WorkersPerNode, "workers-per-node", 20, "workers per node (direct mode: nodes × workers-per-node direct subscribers)")
	f.StringVar(&size, "size", "64MiB", "bytes of the version published (64MiB, 2MiB, 1048576)")
	f.StringVar(&cfg.Policy, "policy", "bench-fanout", "policy name (topic policy.<name>)")
	f.StringVar(&cfg.BrokerMetrics, "broker-metrics", "", "the broker's /metrics URL, e.g. http://127.0.0.1:9644/metrics (empty: egress not measured)")
	f.IntVar(&cfg.BrokerPID, "broker-pid", 0, "broker process whose CPU time is reported (0: none)")
	f.StringVar(&cfg.Dir, "dir", "", "where node caches go (default /dev/shm, else the temporary directory)")
	f.DurationVar(&cfg.PollInterval, "poll-interval", 500*time.Millisecond, "direct mode: how often a subscriber calls Latest")
	f.DurationVar(&cfg.LoopbackTime, "loopback-time", 2*time.Second, "how long the loopback bandwidth test streams (negative: skip)")
	f.StringVar(&cfg.WorkerLoad, "worker-load", "map", "node mode: map (each worker maps the node's file read-only) or read (each worker reads its own copy)")
	f.IntVar(&cfg.ReadBuffer, "read-buffer", 256<<10, "node mode, --worker-load read: the buffer a worker reads the file with")
	f.BoolVar(&cfg.VerifyReads, "verify-reads", false, "every worker compares the bytes it reads with the published ones (inside the measured time)")
	f.DurationVar(&cfg.SetupTimeout, "setup-timeout", 2*time.Minute, "limit for the warm-up")
	f.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "limit from the publish to the last worker")
	f.StringVar(&cfg.CPUProfile, "cpu-profile", "", "write a CPU profile of this process over the measured part to this file")
	out.register(cmd)
	return cmd
}

func newBenchFanoutReportCmd() *cobra.Command {
	return newStepReportCmd("fanout-report", "fan-out", "bench/fanout.sh", "simtel bench fanout",
		"bench/results/fanout", "fan-out results", bench.AddFanoutStep, bench.PublishFanout)
}

func newBenchSinkCmd() *cobra.Command {
	var cfg bench.SinkBenchConfig
	var out benchOutput
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Measure how fast the sink encodes line protocol into Parquet, on one core",
		Long: `Generate --samples line-protocol records like the agent ships them (sorted
tags host, job, run, step plus --tags of the sender's, --fields fields, --runs
distinct runs) and encode them as one flush of one sink partition into Parquet
objects (one per run, measurement and day), on one goroutine as the sink does
per partition. No broker or store is involved.

Reports samples per second of wall time and per CPU second (independent of
the number of cores), and bytes per sample as line protocol, in the broker's
log and in Parquet: the lake's compression against the broker.

A progress line (samples buffered so far, their rate) goes to stderr once a
second, except with --quiet or --json.`,
		Example: `  simtel bench sink --samples 1000000
  simtel bench sink --samples 200000 --tags 4 --fields 8 --runs 16 --dir /tmp/lake --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !out.json {
				cfg.Progress = out.progress()
			}
			res, err := bench.RunSinkBench(cmd.Context(), cfg)
			if err != nil && res.Samples == 0 {
				return err
			}
			return out.emit(res, err, func(w io.Writer) {
				fmt.Fprintf(w, "sink encode: %d samples into %d objects in %.2f s (%.2f CPU s)\n",
					res.Samples, res.Objects, res.WallSeconds, res.CPUSeconds)
				fmt.Fprintf(w, "  %.0f samples/s, %.0f samples per CPU second\n", res.SamplesPerSec, res.SamplesPerCoreSec)
				fmt.Fprintf(w, "  bytes per sample: %.1f line protocol, %.1f in the broker, %.1f in Parquet (%.1fx smaller than the broker's log)\n",
					res.LineBytesPerSample, res.BrokerBytesPerSample, res.ParquetBytesPerSample, res.CompressionRatio)
				if res.DeadLetters > 0 {
					fmt.Fprintf(w, "  %d dead letters\n", res.DeadLetters)
				}
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Samples, "samples", 1_000_000, "records to encode")
	f.IntVar(&cfg.Tags, "tags", 2, "tags per line besides host, job, step and run (0 means the default, 2)")
	f.IntVar(&cfg.Fields, "fields", 4, "fields per line: floats, an integer counter and a boolean")
	f.IntVar(&cfg.Runs, "runs", 4, "distinct runs; each run, measurement and day is one object")
	f.StringVar(&cfg.Dir, "dir", "", "also write the objects under this directory, for inspection")
	out.register(cmd)
	return cmd
}
