package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/bench"
)

func newBenchAgentsCmd(g *globalFlags) *cobra.Command {
	var cfg bench.AgentsConfig
	var kf kafkaFlags
	var brokerHTTP, restart string
	var out benchOutput
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Emulate many node agents against a cluster and check every sample arrived exactly once",
		Long: `Run --agents emulated node agents in this process, each the agent's own
shipper (an idempotent producer with its own connection, producer id and
key, reading a spool in memory) taking --rate samples/s of about
--sample-bytes of line protocol, against the cluster of --brokers, or
against --spawn brokers of this binary started on loopback for the run.

Phases: steady load for --duration; then (with --spawn) --restart-broker
stopped with SIGTERM and started again, and with --kill-controller the
controller killed with SIGKILL and started again, each phase lasting
--fault-phase. After a stop or kill, the run measures how long until every
agent had a sample it took after the event acknowledged. At the end the
agents deliver what they took, the topic is read back and every sample
checked: lost and duplicated samples are counted, and either fails the run.

Each phase reports produce latency (spool read to acknowledgement) and the
brokers' memory (RSS from /proc, Go heap from their /metrics), goroutines
and open files; the steady phase's growth over the brokers before the
agents connected, per agent. With --brokers, give --broker-http for those
figures.`,
		Example: `  simtel bench agents --spawn 3 --agents 500 --rate 50 --duration 60s --kill-controller
  simtel bench agents --brokers 10.0.0.1:9092,10.0.0.2:9092 --broker-http 10.0.0.1:9644,10.0.0.2:9644 \
      --agents 2000 --restart-broker none --json`,
		Args: cobra.NoArgs,
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			// The run's config takes 0 for its defaults; here 0 is a mistake.
			switch {
			case cfg.Agents < 1:
				return fmt.Errorf("--agents %d: want at least 1", cfg.Agents)
			case cfg.Rate <= 0:
				return fmt.Errorf("--rate %g: want samples per second above 0", cfg.Rate)
			case cfg.Duration <= 0:
				return fmt.Errorf("--duration %s: want a steady phase longer than 0", cfg.Duration)
			}
			cfg.BrokerHTTP = splitList(brokerHTTP)
			var err error
			if cfg.Client, err = benchClient(&kf, log, &out); err != nil {
				return err
			}
			switch restart {
			case "auto":
				cfg.RestartBroker = bench.AutoBroker
				if cfg.Spawn == 0 {
					cfg.RestartBroker = bench.NoBroker // nothing to restart
				}
			case "none":
				cfg.RestartBroker = bench.NoBroker
			default:
				id, err := strconv.ParseInt(restart, 10, 32)
				if err != nil || id < 0 {
					return fmt.Errorf("--restart-broker %q: want auto, none or a node id", restart)
				}
				cfg.RestartBroker = int32(id)
			}
			if cfg.Spawn > 0 {
				if cfg.Binary, err = os.Executable(); err != nil {
					return fmt.Errorf("cannot find this binary to spawn brokers: %w", err)
				}
			}
			res, runErr := bench.Agents(cmd.Context(), cfg)
			return out.emit(res, runErr, func(w io.Writer) { bench.PrintAgents(w, res) })
		}),
	}
	f := cmd.Flags()
	kf.register(f, "", "comma-separated broker addresses of the cluster (or --spawn)")
	f.StringVar(&brokerHTTP, "broker-http", "", "the brokers' HTTP listeners for /metrics, in --brokers' order (optional)")
	f.IntVar(&cfg.Spawn, "spawn", 0, "start this many brokers of this binary as one cluster on loopback for the run")
	f.IntVar(&cfg.SpawnPortBase, "spawn-ports", 0, "spawned brokers' ports: Kafka base+i, raft base+10+i, gossip base+20+i, HTTP base+30+i (0: free ports)")
	f.StringVar(&cfg.SpawnDir, "spawn-dir", "", "directory for the spawned brokers' data and logs (default: a temporary one, removed)")
	f.IntVar(&cfg.Agents, "agents", 100, "emulated agents")
	f.Float64Var(&cfg.Rate, "rate", 50, "samples per second per agent")
	f.IntVar(&cfg.SampleBytes, "sample-bytes", 100, "bytes of each sample's line of line protocol")
	f.DurationVar(&cfg.Duration, "duration", time.Minute, "steady phase")
	f.StringVar(&restart, "restart-broker", "auto", "broker to stop and start again after the steady phase: auto (one that is not the controller), none, or a node id (needs --spawn)")
	f.BoolVar(&cfg.KillController, "kill-controller", false, "then kill the controller with SIGKILL and start it again (needs --spawn)")
	f.DurationVar(&cfg.FaultPhase, "fault-phase", 30*time.Second, "how long each restart or kill phase runs")
	f.DurationVar(&cfg.RecoverTimeout, "recover-timeout", 2*time.Minute, "fail if an agent does not deliver again this long after a stop or kill")
	f.StringVar(&cfg.Topic, "topic", "", "topic to create for the run (default simtel-bench-agents-<unix time>; it must not exist)")
	f.Int32Var(&cfg.Partitions, "partitions", 12, "partitions of the topic")
	f.DurationVar(&cfg.Linger, "linger", time.Second, "the agents' --linger")
	f.Int32Var(&cfg.BatchMaxBytes, "batch-max-bytes", 1<<20, "the agents' --batch-max-bytes")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 2*time.Minute, "how long the agents may take to deliver what they took once the load stops")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "", "host:port serving the run's counters on /metrics (empty: none)")
	out.register(cmd)
	return cmd
}
