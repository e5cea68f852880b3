package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/agent"
)

func newAgentCmd(g *globalFlags) *cobra.Command {
	var cfg agent.Config
	var run, host, policies, gossipJoin string
	var memLimit int64
	var kf kafkaFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: accept line protocol, spool it, ship it to the broker",
		Long: `Run the node agent. Simulations, Telegraf and Slurm's profiling plugin send
InfluxDB line protocol to it over UDP, TCP, a unix socket or HTTP (/write and
/api/v2/write, as InfluxDB 1.x and 2.x); StatsD goes to --listen-statsd. The
agent adds host, job, step and run tags the sender did not set, writes every
accepted sample to a disk spool, and ships them to the broker (one Kafka
record per sample, key <run>/<host>, zstd, idempotent). An HTTP write is
answered 204 only once its samples are in the spool; while the broker is
away samples wait there, up to --spool-max-bytes.

Tags come from SLURMD_NODENAME (or the hostname), SLURM_JOB_ID,
SLURM_STEP_ID and --run / SIMTEL_RUN (default: the job id). A sample that
carries a job tag and no run tag, as Slurm's InfluxDB profiler sends them,
gets run=<job> and Slurm's special steps by name (step=batch, extern,
interactive); --run-from-tag off keeps the agent's run and the tags as sent.`,
		Example: `  simtel agent --brokers broker1:9092 --spool-dir /var/spool/simtel --listen-http 127.0.0.1:8186
  curl -XPOST 'http://127.0.0.1:8186/write?db=sim' --data-binary 'reward,env=cartpole value=1.5'`,
		Args: cobra.NoArgs,
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			cfg.Logger = log
			cfg.Policies = splitList(policies)
			cfg.GossipJoin = splitList(gossipJoin)
			var err error
			if cfg.Brokers, cfg.ClientOpts, err = kf.dial(cmd.Context()); err != nil {
				return fmt.Errorf("agent: %w", err)
			}
			cfg.Tags = agent.TagsFromEnv(run, nil)
			cfg.JobUID = os.Getenv("SLURM_JOB_UID")
			if host != "" {
				cfg.Tags.Host = host
			}
			if memLimit > 0 {
				// A soft limit: the garbage collector works harder near
				// it instead of letting the heap grow with bursts. It is
				// counted on top of what the runtime holds before the
				// agent starts (package data of everything linked into
				// the one binary), so linking in another library does not
				// shrink the agent's own room and make the collector run
				// continually at high rates.
				debug.SetMemoryLimit(runtimeBaseline() + memLimit)
			}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			stop := reloadOnHangup(cmd.Context(), a.Reload, log)
			defer stop()
			return a.Run(cmd.Context())
		}),
	}
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&cfg.Topic, "topic", "telemetry", "topic for samples")
	f.StringVar(&cfg.ListenUDP, "listen-udp", "127.0.0.1:8089", "UDP address for line protocol (empty: off)")
	f.StringVar(&cfg.ListenTCP, "listen-tcp", "127.0.0.1:8094", "TCP address for newline-separated line protocol (empty: off)")
	f.StringVar(&cfg.ListenUnix, "listen-unix", "", "unix socket path for line protocol (empty: off)")
	f.StringVar(&cfg.ListenHTTP, "listen-http", "127.0.0.1:8186", "HTTP address for /write, /api/v2/write, /metrics (empty: off)")
	f.StringVar(&cfg.ListenStatsD, "listen-statsd", "", "UDP address for StatsD (empty: off)")
	f.StringVar(&cfg.HTTPTLSCert, "http-tls-cert", "", "PEM certificate (chain) making the HTTP listener serve HTTPS only; reloaded when it changes and on SIGHUP")
	f.StringVar(&cfg.HTTPTLSKey, "http-tls-key", "", "PEM private key of --http-tls-cert")
	f.StringVar(&cfg.HTTPTokenFile, "http-token-file", "", "file of tokens, one a line, that HTTP requests must carry (Authorization: Token or Bearer, or as the password of Basic auth or ?p=); /metrics and health checks stay open; re-read when it changes and on SIGHUP (empty: no token; a policy is then published from loopback only)")
	f.StringVar(&cfg.SpoolDir, "spool-dir", "", "directory where accepted samples wait for the broker (required)")
	f.Int64Var(&cfg.SpoolMaxBytes, "spool-max-bytes", 1<<30, "largest spool on disk")
	f.StringVar(&cfg.SpoolPolicy, "spool-policy", "block", "when the spool is full: block (senders wait) or drop-oldest")
	f.DurationVar(&cfg.SpoolSync, "spool-sync", time.Second, "how often the spool fdatasyncs samples the broker has not acknowledged since the previous tick (negative: never)")
	f.StringVar(&policies, "policies", "", "comma-separated policies to keep the newest version of, for this node's workers")
	f.StringVar(&cfg.PolicyDir, "policy-dir", "/dev/shm/simtel/policy", "where policy versions are kept (<dir>/<policy>/<version>, latest link)")
	f.IntVar(&cfg.PolicyKeep, "policy-keep", 3, "policy versions kept on disk")
	f.StringVar(&cfg.PolicyTrustedKeys, "policy-trusted-keys", "", "PEM file of ed25519 public keys (openssl pkey -pubout); policy versions not signed by one of them are refused (empty: versions need no signature)")
	f.StringVar(&cfg.GossipListen, "gossip-listen", "", "host:port for the rollout gossip pool (empty: off)")
	f.StringVar(&gossipJoin, "gossip-join", "", "comma-separated gossip addresses of other agents of the run")
	f.BoolVar(&cfg.GossipFast, "gossip-fast", false, "short gossip timers, for tests on one machine")
	f.StringVar(&cfg.PolicyRelayListen, "policy-relay-listen", "", "host:port where this agent serves the policy chunks it holds to the other agents of its gossip pool, and so fetches new versions from them before the brokers (needs --gossip-listen and --policy-relay-key; empty: off)")
	f.StringVar(&cfg.PolicyRelayKey, "policy-relay-key", "", "file holding the pool's shared secret (at least 16 bytes, the same on every agent): relay requests are signed with it, and unsigned ones refused")
	f.IntVar(&cfg.PolicyRelaySeeds, "policy-relay-seeds", 2, "agents of the pool (chosen anew for each version) that fetch a version from the brokers at once; the others fetch it from peers")
	f.DurationVar(&cfg.PolicyRelayWait, "policy-relay-wait", 10*time.Second, "how long an agent that is not a seed waits for a peer to hold a new version before it fetches from the brokers (up to twice this, by rank)")
	_ = f.MarkHidden("gossip-fast")
	f.StringVar(&run, "run", "", "run id tag (default: SIMTEL_RUN, else SLURM_JOB_ID)")
	f.StringVar(&host, "host", "", "host tag (default: SLURMD_NODENAME, else the hostname)")
	f.StringVar(&cfg.RunFromTag, "run-from-tag", "job", "a sample with this tag and no run tag gets its value as run, and Slurm's special step ids by name (Slurm's profiler; off: keep the agent's run)")
	f.DurationVar(&cfg.CollectInterval, "collect-interval", 10*time.Second, "node metrics interval (negative: off)")
	f.IntVar(&cfg.MaxLineBytes, "max-line-bytes", 64<<10, "longest line accepted")
	f.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 32<<20, "largest HTTP body accepted (after gzip)")
	f.Int64Var(&cfg.FieldTypesMemory, "field-types-memory", 4<<20, "bytes for remembering each run's field types, to refuse lines that change a field's type as InfluxDB does (when full the least recently active run is forgotten; negative: no check)")
	f.DurationVar(&cfg.PacketGather, "packet-gather", time.Second, "how long UDP and StatsD datagrams may wait in the socket buffer so that one wake-up stores many (cut short as the buffer fills; negative: read each at once)")
	f.DurationVar(&cfg.Linger, "linger", time.Second, "how long samples gather in the spool before they are sent, while few arrive (under 16,384 per linger); longer means fewer wake-ups, later delivery")
	f.Int64Var(&memLimit, "memory-limit", 32<<20, "soft limit in bytes on the memory the agent's work adds to the Go runtime's own at start (0: none); keeps the agent small on compute nodes")
	f.BoolVar(&cfg.ReleaseExecPages, "release-exec-pages", true, "once serving, give back the pages of the simtel executable that only start-up used (read-only, unmodified mappings; see docs/agent-cost.md)")
	f.IntVar(&cfg.MaxProcs, "max-procs", 2, "Go processors (GOMAXPROCS) the agent uses while samples arrive at over 300,000 a second; below 150,000 it uses one, which costs less CPU (0: leave GOMAXPROCS as the runtime sets it; see docs/agent-cost.md)")
	f.DurationVar(&cfg.MonitorSlack, "monitor-slack", time.Millisecond, "timer slack of the Go runtime's monitor thread: how late its 20 µs sleeps may end, so that bursts of work wake it less (0: the kernel's default; needs CAP_SYS_NICE; see docs/agent-cost.md)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to keep sending the spool after SIGTERM")
	return cmd
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// runtimeBaseline is the memory the Go runtime holds and has not handed back
// to the OS: what the binary costs before the agent does any work. It is
// read after releaseStartupMemory collected and returned the garbage of
// package initialisation (the agent is a long-running command).
func runtimeBaseline() int64 {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(samples)
	if samples[0].Value.Kind() != metrics.KindUint64 || samples[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(samples[0].Value.Uint64() - samples[1].Value.Uint64())
}
