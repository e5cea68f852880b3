package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/simtel/simtel/agent"
	"github.com/simtel/simtel/broker"
)

// newDevCmd wires the embedded default: one broker and one agent in one
// process, with their data under one directory. The sink and the local
// lake join it as they are built.
func newDevCmd(g *globalFlags) *cobra.Command {
	var dataDir, brokerAddr, brokerHTTP, agentHTTP, agentUDP, agentTCP string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a broker and a node agent in one process, for trying simtel on one machine",
		Long: `Run the embedded default: a single-node broker and a node agent in one
process, keeping everything under --data-dir. Send line protocol to the
agent (HTTP, UDP or TCP) and read it back from the broker's "telemetry"
topic with any Kafka client.`,
		Example: `  simtel dev --data-dir ./simtel-data
  curl -XPOST 'http://127.0.0.1:8186/write?db=sim' --data-binary 'reward,env=cartpole value=1.5'
  kcat -C -b 127.0.0.1:9092 -t telemetry -e`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			b, err := broker.New(broker.Config{
				DataDir:    filepath.Join(dataDir, "broker"),
				Listen:     brokerAddr,
				HTTPListen: brokerHTTP,
				Logger:     log.With("part", "broker"),
			})
			if err != nil {
				return err
			}
			tags := agent.TagsFromEnv("", nil)
			if tags.Run == "" {
				tags.Run = "dev"
			}
			a, err := agent.New(agent.Config{
				Brokers:    []string{b.Addr().String()},
				ListenHTTP: agentHTTP,
				ListenUDP:  agentUDP,
				ListenTCP:  agentTCP,
				SpoolDir:   filepath.Join(dataDir, "spool"),
				Tags:       tags,
				Logger:     log.With("part", "agent"),
			})
			if err != nil {
				b.Close()
				return err
			}
			fmt.Fprintf(os.Stderr, `simtel dev is running (data in %s)
  send samples:  curl -XPOST 'http://%s/write?db=sim' --data-binary 'reward,env=cartpole value=1.5'
                 echo 'reward value=2' > /dev/udp/%s
  read them:     kcat -C -b %s -t telemetry -e
  metrics:       http://%s/metrics (broker), http://%s/metrics (agent)
`, dataDir, agentHTTP, hostPortSlash(agentUDP), b.Addr(), brokerHTTP, agentHTTP)
			// The agent stops first so it can flush its spool into the
			// broker, which stops after it.
			actx, stopAgent := context.WithCancel(context.Background())
			bctx, stopBroker := context.WithCancel(context.Background())
			var eg errgroup.Group
			eg.Go(func() error { return b.Run(bctx) })
			eg.Go(func() error { defer stopBroker(); return a.Run(actx) })
			<-cmd.Context().Done()
			stopAgent()
			err = eg.Wait()
			if errors.Is(err, context.Canceled) {
				err = nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "simtel-data", "directory for the broker's data and the agent's spool")
	f.StringVar(&brokerAddr, "broker-listen", "127.0.0.1:9092", "Kafka listener")
	f.StringVar(&brokerHTTP, "broker-http", "127.0.0.1:9644", "broker /metrics, /healthz, /readyz")
	f.StringVar(&agentHTTP, "agent-http", "127.0.0.1:8186", "agent HTTP listener (/write, /api/v2/write, /metrics)")
	f.StringVar(&agentUDP, "agent-udp", "127.0.0.1:8089", "agent UDP line-protocol listener")
	f.StringVar(&agentTCP, "agent-tcp", "127.0.0.1:8094", "agent TCP line-protocol listener")
	return cmd
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
