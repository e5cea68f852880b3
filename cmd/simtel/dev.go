package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/simtel/simtel/agent"
	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/rollup"
	"github.com/simtel/simtel/sink"
)

// devConfig holds simtel dev's flags.
type devConfig struct {
	dataDir, brokerAddr, brokerHTTP, agentHTTP, agentUDP, agentTCP, sinkHTTP, rollupHTTP string
	flushAge, compactInterval, allowedLateness, retentionInterval                        time.Duration
	summary                                                                              bool
	icebergCatalog                                                                       string
}

// newDevCmd wires the embedded default: a broker, a node agent and a sink
// into a local lake, in one process, with their data under one directory.
func newDevCmd(g *globalFlags) *cobra.Command {
	var c devConfig
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a broker, a node agent, the rollups and a sink into a local lake, in one process",
		Long: `Run the whole pipeline on one machine: a single-node broker, a node agent
taking line protocol over HTTP, UDP and TCP, and a sink that writes the
telemetry topic into a Parquet lake under --data-dir/lake. Send samples to
the agent; a few seconds later (--flush-age) they are rows that
"simtel lake query" reads with SQL.

The rollup worker (see simtel rollup) rolls the telemetry topic up into
10 s, 1 min and 1 h windows, which the sink writes as the tables
rollup_10s.<measurement>, rollup_1m.<measurement> and rollup_1h.<measurement>:
a window reaches the lake once samples --allowed-lateness past its end have
arrived, or about a minute after the samples stop.

The telemetry topic is created with simtel.retention.hold.groups set to the
sink's group, so retention never deletes what the lake does not hold yet.

The sink applies the lake's retention policies every --retention-interval
(see simtel lake retention; by default raw samples go after 30 days, 10 s
rollups after 90, the rest stays).

Nothing is secured (no TLS, no login, no ACLs): the listeners stay on
loopback by default. docs/security.md sets up simtel broker for a shared
cluster.`,
		Example: `  simtel dev --data-dir ./simtel-data
  curl -XPOST 'http://127.0.0.1:8186/write?db=sim' --data-binary 'reward,env=cartpole value=1.5'
  simtel lake query 'SELECT time, env, value FROM reward'      # --lake file://./simtel-data/lake is the default
  kcat -C -b 127.0.0.1:9092 -t telemetry -e`,
		Args: cobra.NoArgs,
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			return runDev(cmd.Context(), c, log)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&c.dataDir, "data-dir", "simtel-data", "directory for the broker's data, the agent's spool and the lake")
	f.StringVar(&c.brokerAddr, "broker-listen", "127.0.0.1:9092", "Kafka listener")
	f.StringVar(&c.brokerHTTP, "broker-http", "127.0.0.1:9644", "broker /metrics, /healthz, /readyz")
	f.StringVar(&c.agentHTTP, "agent-http", "127.0.0.1:8186", "agent HTTP listener (/write, /api/v2/write, /metrics)")
	f.StringVar(&c.agentUDP, "agent-udp", "127.0.0.1:8089", "agent UDP line-protocol listener")
	f.StringVar(&c.agentTCP, "agent-tcp", "127.0.0.1:8094", "agent TCP line-protocol listener")
	f.StringVar(&c.sinkHTTP, "sink-http", "127.0.0.1:9645", "sink /metrics and /healthz")
	f.StringVar(&c.rollupHTTP, "rollup-http", "127.0.0.1:9646", "rollup worker /metrics and /healthz")
	f.DurationVar(&c.allowedLateness, "allowed-lateness", rollup.DefaultAllowedLateness, "the rollups wait this long in sample time for late samples before a window is final")
	f.DurationVar(&c.flushAge, "flush-age", 2*time.Second, "the sink writes buffered samples to the lake at least this often")
	f.DurationVar(&c.compactInterval, "compact-interval", sink.DefaultCompactInterval, "the sink merges the lake's small objects this often (0: off; see simtel sink --help)")
	f.DurationVar(&c.retentionInterval, "retention-interval", time.Hour, "the sink applies the lake's retention policies this often (0: off; see simtel lake retention)")
	f.StringVar(&c.icebergCatalog, "iceberg-catalog", "", "also publish the lake as Apache Iceberg tables in this catalog, e.g. sqlite:simtel-data/iceberg.db (see docs/lake-iceberg.md)")
	f.BoolVar(&c.summary, "summary", true, "print a live one-line summary (samples/s, sink lag, lake rows) on stderr")
	return cmd
}

func runDev(ctx context.Context, c devConfig, log *slog.Logger) error {
	lakeDir, err := filepath.Abs(filepath.Join(c.dataDir, "lake"))
	if err != nil {
		return err
	}
	b, err := broker.New(broker.Config{
		DataDir:    filepath.Join(c.dataDir, "broker"),
		Listen:     c.brokerAddr,
		HTTPListen: c.brokerHTTP,
		Logger:     log.With("part", "broker"),
	})
	if err != nil {
		return err
	}
	// Stop order: the agent first so it can flush its spool into the
	// broker, then the sink so it can flush into the lake, then the broker.
	bctx, stopBroker := context.WithCancel(context.Background())
	defer stopBroker()
	var beg errgroup.Group
	beg.Go(func() error { return b.Run(bctx) })
	brokers := []string{b.Addr().String()}
	a, err := devAgent(ctx, c, brokers, log)
	if err != nil {
		stopBroker()
		_ = beg.Wait()
		return err
	}
	sinkReg := prometheus.NewRegistry()
	sinkCfg := devSinkConfig(c, brokers, lakeDir, sinkReg, log)
	fmt.Fprintf(os.Stderr, `simtel dev is running (data in %s)
  send samples:  curl -XPOST 'http://%s/write?db=sim' --data-binary 'reward,env=cartpole value=1.5'
                 echo 'reward value=2' > /dev/udp/%s
  query them:    simtel lake query --lake file://%s 'SELECT time, env, value FROM reward'
  rollups:       simtel lake query --lake file://%s 'SELECT time, env, value_mean, value_p95 FROM rollup_1m.reward'
  list runs:     simtel lake runs --lake file://%s
  read the topic: kcat -C -b %s -t telemetry -e
  metrics:       http://%s/metrics (broker), http://%s/metrics (agent), http://%s/metrics (sink)
  security:      off (no TLS, login or ACLs): keep it on loopback. To turn it on, run simtel broker
                 with --listeners NAME=SASL_SSL://..., --sasl-mechanisms, --authorizer acl (docs/security.md)
`, c.dataDir, c.agentHTTP, hostPortSlash(c.agentUDP), lakeDir, lakeDir, lakeDir, b.Addr(), c.brokerHTTP, c.agentHTTP, c.sinkHTTP)
	rollupCfg := rollup.Config{Brokers: brokers, AllowedLateness: c.allowedLateness, HTTPListen: c.rollupHTTP, Logger: log.With("part", "rollup")}
	err = runDevParts(ctx, c, a, rollupCfg, sinkCfg, sinkReg)
	stopBroker()
	err = errors.Join(err, beg.Wait())
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// devAgent creates the telemetry topic and the agent that ships into it.
func devAgent(ctx context.Context, c devConfig, brokers []string, log *slog.Logger) (*agent.Agent, error) {
	if err := devTopic(ctx, brokers); err != nil {
		return nil, err
	}
	tags := agent.TagsFromEnv("", nil)
	if tags.Run == "" {
		tags.Run = "dev"
	}
	return agent.New(agent.Config{
		Brokers:    brokers,
		ListenHTTP: c.agentHTTP,
		ListenUDP:  c.agentUDP,
		ListenTCP:  c.agentTCP,
		SpoolDir:   filepath.Join(c.dataDir, "spool"),
		Tags:       tags,
		Logger:     log.With("part", "agent"),
	})
}

// devSinkConfig is the sink of the telemetry and rollup topics into the
// lake at lakeDir.
func devSinkConfig(c devConfig, brokers []string, lakeDir string, reg *prometheus.Registry, log *slog.Logger) sink.Config {
	return sink.Config{
		Brokers:         brokers,
		Topics:          devLakeTopics(),
		TelemetryTopics: devLakeTopics(),
		Lake:            "file://" + lakeDir,
		FlushAge:        c.flushAge,
		HTTPListen:      c.sinkHTTP,
		Logger:          log.With("part", "sink"),
		Registry:        reg,
		// Queries on one machine load the catalog and read its objects
		// within seconds, so replaced objects need not wait the sink's
		// default 10 minutes: the lake directory stays a few dozen
		// objects per measurement.
		Compact: sink.CompactConfig{Interval: c.compactInterval, DeleteDelay: 2 * time.Minute},
		// Expired objects wait as long as replaced ones, for the same reason.
		Retention:      sink.RetentionConfig{Interval: c.retentionInterval, Grace: 2 * time.Minute},
		IcebergCatalog: c.icebergCatalog,
	}
}

// devLakeTopics are the topics simtel dev writes into the lake, all line
// protocol: telemetry, the rollups and the run summaries.
func devLakeTopics() []string {
	topics := []string{"telemetry"}
	for _, r := range rollup.Resolutions {
		topics = append(topics, r.Topic())
	}
	return append(topics, rollup.DefaultSummaryTopic)
}

// runDevParts runs the agent, the rollup worker and the sink (and the
// summary line) until ctx ends or one of them stops on its own (a listener
// failed), then stops the others.
func runDevParts(ctx context.Context, c devConfig, a *agent.Agent, rollupCfg rollup.Config, sinkCfg sink.Config, sinkReg prometheus.Gatherer) error {
	actx, stopAgent := context.WithCancel(context.Background())
	rctx, stopRollup := context.WithCancel(context.Background())
	sctx, stopSink := context.WithCancel(context.Background())
	agentDone, rollupDone, sinkDone := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { agentDone <- a.Run(actx) }()
	go func() { rollupDone <- rollup.Run(rctx, rollupCfg) }()
	go func() { sinkDone <- sink.Run(sctx, sinkCfg) }()
	done := make(chan struct{})
	var sg errgroup.Group
	if c.summary {
		sg.Go(func() error { devSummary(done, os.Stderr, a.Gatherer(), sinkReg); return nil })
	}
	var agentErr, rollupErr, sinkErr error
	agentOver, rollupOver, sinkOver := false, false, false
	select {
	case <-ctx.Done():
	case agentErr = <-agentDone:
		agentOver = true
	case rollupErr = <-rollupDone:
		rollupOver = true
	case sinkErr = <-sinkDone:
		sinkOver = true
	}
	close(done)
	_ = sg.Wait()
	// The agent first, so it ships its spool into the broker; then the
	// sink, which flushes what it has consumed into the lake. Records it
	// had not fetched yet stay in the broker (the retention hold keeps
	// them) and reach the lake at the next start.
	stopAgent()
	if !agentOver {
		agentErr = <-agentDone
	}
	// The rollup worker commits what it has consumed (its open windows
	// go to its state topic and close at the next start).
	stopRollup()
	if !rollupOver {
		rollupErr = <-rollupDone
	}
	stopSink()
	if !sinkOver {
		sinkErr = <-sinkDone
	}
	return errors.Join(agentErr, rollupErr, sinkErr)
}

// devTopic creates the telemetry topic with the retention hold for the
// sink's and the rollup worker's groups, unless it exists.
func devTopic(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(tctx, 4, 1, map[string]*string{"simtel.retention.hold.groups": kadm.StringPtr(sink.DefaultGroup + "," + rollup.DefaultGroup)}, "telemetry")
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("cannot create the telemetry topic: %w", err)
	}
	return nil
}

// hostPortSlash turns host:port into host/port for bash's /dev/udp paths.
func hostPortSlash(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i] + "/" + addr[i+1:]
		}
	}
	return addr
}
