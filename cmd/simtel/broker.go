package main

import (
	"context"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/broker"
)

func newBrokerCmd(g *globalFlags) *cobra.Command {
	var cfg broker.Config
	var noAutoCreate bool
	var groupDelay time.Duration
	var stopTimeout time.Duration
	var lf listenerFlags
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a Kafka-compatible broker",
		Long: `Run a Kafka-wire-compatible broker. Kafka clients (franz-go, kcat,
librdkafka, sarama, the Java client) connect to --listen unchanged.

Data, topic metadata, committed group offsets and producer ids live in
--data-dir and survive restarts. /metrics, /healthz and /readyz are served on
--http-listen.

Cluster mode (--raft-listen): brokers find each other by gossip
(--gossip-listen, --join) and keep topics, configs and partition placement in
a raft controller quorum. A new cluster forms once --bootstrap-expect brokers
see each other; a broker started later with --join is added automatically.
--join is needed at a broker's first start only: restarted with the same
--data-dir, a broker rejoins the brokers it knew (the first broker of the
cluster, started without --join, too).
Each partition with more than one replica (replication factor: default 3, at
most the alive brokers) is its own raft group over the same --raft-listen
port: produce answers once a majority has the batch, and when a leader dies
another replica takes over without losing acknowledged records. See
docs/broker-cluster.md.`,
		Example: `  simtel broker --node-id 0 --data-dir /var/lib/simtel --listen 0.0.0.0:9092 --http-listen :9644
  SIMTEL_DATA_DIR=/tmp/b0 simtel broker

  # three brokers on one machine
  simtel broker --node-id 0 --data-dir /tmp/c0 --listen 127.0.0.1:9092 --raft-listen 127.0.0.1:9192 \
    --gossip-listen 127.0.0.1:9292 --bootstrap-expect 3
  simtel broker --node-id 1 --data-dir /tmp/c1 --listen 127.0.0.1:9093 --raft-listen 127.0.0.1:9193 \
    --gossip-listen 127.0.0.1:9293 --join 127.0.0.1:9292 --bootstrap-expect 3
  simtel broker --node-id 2 --data-dir /tmp/c2 --listen 127.0.0.1:9094 --raft-listen 127.0.0.1:9194 \
    --gossip-listen 127.0.0.1:9294 --join 127.0.0.1:9292 --bootstrap-expect 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			cfg.DisableAutoCreate = noAutoCreate
			cfg.GroupInitialRebalanceDelay = groupDelay
			cfg.GroupInitialRebalanceDelaySet = true
			if err := lf.apply(cmd, &cfg); err != nil {
				return err
			}
			b, err := broker.New(cfg)
			if err != nil {
				return err
			}
			stop := reloadOnHangup(cmd.Context(), b.ReloadTLS, log)
			defer stop()
			done := make(chan struct{})
			defer close(done)
			go boundStop(cmd.Context(), done, stopTimeout, log)
			return b.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.Int32Var(&cfg.NodeID, "node-id", 0, "this broker's node id")
	f.DurationVar(&stopTimeout, "stop-timeout", 20*time.Second, "after SIGTERM or SIGINT, exit anyway if the clean stop (handing off leadership, closing raft groups and logs) has not finished within this long, logging where it waits; what is on disk is then as after a crash, which a restart recovers (0: wait for ever)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for logs and metadata (required)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:9092", "Kafka listener host:port")
	f.StringVar(&cfg.Advertise, "advertise", "", "host:port given to clients (default: --listen)")
	f.StringVar(&cfg.HTTPListen, "http-listen", "", "host:port for /metrics, /healthz, /readyz (empty: off)")
	f.BoolVar(&noAutoCreate, "no-auto-create-topics", false, "do not create topics named in Metadata requests")
	f.Int32Var(&cfg.DefaultPartitions, "default-partitions", 1, "partitions of auto-created topics (num.partitions)")
	f.Int32Var(&cfg.MaxRequestBytes, "max-request-bytes", 100<<20, "largest request frame accepted (socket.request.max.bytes)")
	f.DurationVar(&cfg.RetentionCheckInterval, "retention-check-interval", 30*time.Second, "how often retention and compaction run")
	f.DurationVar(&cfg.ProducerIDExpiration, "producer-id-expiration", 24*time.Hour, "forget an idempotent producer's sequences after this long without a batch from it, measured on batch timestamps (producer.id.expiration.ms; negative: never)")
	f.DurationVar(&cfg.TransactionalIDExpiration, "transactional-id-expiration", 7*24*time.Hour, "forget a transactional id with no open transaction after this long without a change (transactional.id.expiration.ms; negative: never)")
	f.DurationVar(&groupDelay, "group-initial-rebalance-delay", 3*time.Second, "wait for more members before a new group's first rebalance")
	f.StringVar(&cfg.RaftListen, "raft-listen", "", "cluster mode: host:port of the raft listener (controller; empty: single node)")
	f.StringVar(&cfg.RaftAdvertise, "raft-advertise", "", "host:port other brokers dial for raft (default: --raft-listen)")
	f.StringVar(&cfg.GossipListen, "gossip-listen", "", "cluster mode: host:port for gossip (TCP and UDP)")
	f.StringSliceVar(&cfg.Join, "join", nil, "cluster mode: gossip host:port of brokers to join, comma-separated (needed at a broker's first start only)")
	f.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", 0, "cluster mode: form a new cluster once this many brokers see each other (1-5; 0: only join)")
	f.IntVar(&cfg.ReplicaSnapshotEntries, "replica-snapshot-entries", 8192, "cluster mode: raft entries a replicated partition applies between snapshots (each snapshot fsyncs its log)")
	f.IntVar(&cfg.ReplicaTrailingLogs, "replica-trailing-logs", 10240, "cluster mode: raft entries a replicated partition keeps behind each snapshot; a replica lagging by more catches up from a snapshot carrying the partition's data")
	f.DurationVar(&cfg.ReplicaReplaceAfter, "replica-replace-after", 10*time.Minute, "cluster mode: after a broker has been gone this long, the controller re-creates its replicas on the other brokers (negative: never)")
	f.BoolVar(&cfg.AutoRebalance, "auto-rebalance", true, "cluster mode: the controller spreads replicas and leaders evenly over the alive brokers, so a joining broker takes its share (false: only the simtel cluster rebalance command moves them)")
	f.DurationVar(&cfg.ReplicaDormantAfter, "replica-dormant-after", 0, "cluster mode: put a replicated partition's raft group to sleep after this long without a write (0: never); a dormant partition costs no CPU, is still read, and its next write waits for an election (milliseconds)")
	f.DurationVar(&cfg.ReplicaHeartbeatTimeout, "replica-heartbeat-timeout", time.Second, "cluster mode: raft heartbeat/election timeout of replicated partitions; longer means less idle CPU and slower failover after a hang or network partition (a crashed broker is noticed at once)")
	f.StringToStringVar(&cfg.TopicDefaults, "topic-default", nil, "broker default for a topic config, e.g. --topic-default retention.ms=86400000")
	lf.register(f, &cfg)
	registerAuthorizerFlags(f, &cfg)
	registerSASLFlags(f, &cfg.SASL)
	registerClusterTLSFlags(f, &cfg)
	return cmd
}

// boundStop exits the process when the broker has not returned (done)
// within timeout of ctx's end (SIGTERM or SIGINT). A clean stop waits
// for the other brokers and for every raft group; on a starved machine
// or with a peer that answers late that can take minutes, and a
// service manager's stop or a script that waits for the process must
// not hang on it. The goroutines go to stderr first: they say what the
// stop waited for.
func boundStop(ctx context.Context, done <-chan struct{}, timeout time.Duration, log *slog.Logger) {
	select {
	case <-ctx.Done():
	case <-done:
		return
	}
	if timeout <= 0 {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	log.Error("the clean stop has not finished; exiting without it (the next start recovers as after a crash)", "stop_timeout", timeout)
	// Writing thousands of goroutines of a starved broker took half a
	// minute and more while the stop went on: the exit does not wait for
	// the dump beyond dumpTimeout.
	time.AfterFunc(dumpTimeout, func() { os.Exit(1) })
	_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
	os.Exit(1)
}

// dumpTimeout bounds boundStop's goroutine dump.
const dumpTimeout = 2 * time.Second
