package main

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/bench"
	"github.com/simtel/simtel/internal/bytesize"
)

func newBenchFanoutCmd(g *globalFlags) *cobra.Command {
	var cfg bench.FanoutConfig
	var kf kafkaFlags
	var size, linkRate string
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
published first, so subscribers start from a held version.

With --delta F (node mode) the warm-up version is instead a full format 2
version of --size random bytes, and the measured one a copy with the fraction
F of its bytes changed in four regions, published as a delta against it: the
result adds the bytes the publisher wrote and each node received.

--mode agents measures real agents (simtel agent --policies <name>) instead
of emulated nodes: --agents lists their HTTP listeners; for each the run
long-polls GET /v1/policy/<name> as a worker does and records when the agent
answers with the new version, and reads the agents' /metrics (policy bytes
from the brokers and peers, CPU) before and after. With --agent-links and
--broker-link (root-namespace ends of veth pairs, as bench/fanout-netns.sh
makes them) it reads what each link carried; with --link-rate it judges the
issue's targets: broker egress ≤ 4 × the version, the last node within 3 ×
(version ÷ link rate), a delta moving ≤ 10% of the version to any node.`,
		Example: `  simtel bench fanout --brokers 127.0.0.1:9092 --broker-metrics http://127.0.0.1:9644/metrics \
      --mode node --nodes 50 --workers-per-node 20 --size 64MiB
  simtel bench fanout --brokers 127.0.0.1:9092 --broker-metrics http://127.0.0.1:9644/metrics \
      --mode direct --nodes 5 --workers-per-node 20 --size 64MiB --json
  simtel bench fanout --brokers 127.0.0.1:9092 --broker-metrics http://127.0.0.1:9644/metrics \
      --nodes 8 --workers-per-node 4 --size 64MiB --delta 0.03
  simtel bench fanout --brokers 10.213.0.2:24092 --mode agents --format 2 --link-rate 1gbit \
      --agents http://10.213.1.1:24186,http://10.213.1.2:24186 --agent-links sf1n0,sf1n1 --broker-link sf1b`,
		Args: cobra.NoArgs,
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			var err error
			if cfg.Size, err = bytesize.Parse(size); err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			if cfg.Client, err = benchClient(&kf, log, &out); err != nil {
				return err
			}
			if cfg.LinkRate, err = parseRate(linkRate); err != nil {
				return fmt.Errorf("--link-rate: %w", err)
			}
			res, runErr := bench.Fanout(cmd.Context(), cfg)
			return out.emit(res, runErr, func(w io.Writer) { bench.PrintFanout(w, res) })
		}),
	}
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&cfg.Mode, "mode", "node", "node (one subscriber per node, workers read its copy), direct (every worker fetches) or agents (the agents of --agents)")
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
	f.Float64Var(&cfg.Delta, "delta", 0, "node mode: measure a delta with this fraction of the bytes changed (0.03: 3%) against a full format 2 warm-up version of --size bytes (0: a full version)")
	f.IntVar(&cfg.Format, "format", 0, "format of the versions published: 0 (the publisher's default) or 2 (chunks by hash, what relaying agents share)")
	f.StringSliceVar(&cfg.Agents, "agents", nil, "agents mode: comma-separated agent HTTP URLs, http://host:port, one per node")
	f.StringSliceVar(&cfg.AgentLinks, "agent-links", nil, "agents mode: the interface of each agent's link whose transmitted bytes reach it (the root end of its veth), in --agents order")
	f.StringVar(&cfg.BrokerLink, "broker-link", "", "agents mode: the interface whose received bytes are the broker's egress (the root end of its veth)")
	f.StringVar(&linkRate, "link-rate", "", "agents mode: the links' rate for the time target, bits per second: 1gbit, 100mbit, 1e9 (empty: not judged)")
	f.StringVar(&cfg.CPUProfile, "cpu-profile", "", "write a CPU profile of this process over the measured part to this file")
	out.register(cmd)
	return cmd
}

// parseRate reads a rate in bits per second as tc writes it: a number
// with an optional kbit, mbit or gbit (decimal multiples).
func parseRate(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	num, mult := s, 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q is not a positive rate like 1gbit", s)
	}
	return v * mult, nil
}
