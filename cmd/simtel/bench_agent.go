package main

import (
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/bench"
)

func newBenchAgentCmd(g *globalFlags) *cobra.Command {
	var cfg bench.AgentLoadConfig
	var kf kafkaFlags
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
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			var err error
			if cfg.Client, err = benchClient(&kf, log, &out); err != nil {
				return err
			}
			if cfg.AgentHTTP == "" && cfg.Transport == "http" {
				cfg.AgentHTTP = cfg.Addr
			}
			res, runErr := bench.AgentLoad(cmd.Context(), cfg)
			return out.emit(res, runErr, func(w io.Writer) { bench.PrintAgentLoad(w, res) })
		}),
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
	kf.register(f, "", "brokers to read the topic's end offsets from (empty: no check)")
	f.StringVar(&cfg.Topic, "topic", "telemetry", "the topic the agent ships to")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", time.Minute, "how long to wait for the agent to ship what it accepted")
	f.DurationVar(&cfg.SampleInterval, "sample-interval", time.Second, "how often the agent is sampled")
	f.StringVar(&cfg.Profile, "agent-profile", "", "write a CPU profile of the agent over --duration to this file (needs --agent-http)")
	out.register(cmd)
	return cmd
}
