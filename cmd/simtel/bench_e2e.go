package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/bench"
)

func newBenchE2ECmd(g *globalFlags) *cobra.Command {
	var cfg bench.E2EConfig
	var kf kafkaFlags
	var out benchOutput
	cmd := &cobra.Command{
		Use:   "e2e",
		Short: "Measure end-to-end latency: a record's send until a consumer has it",
		Long: `Send records at a fixed rate (--rate records/s in total, split over
--producers clients) while --consumers clients read the same topic, and
measure for every record the time from its send to the poll that delivered
it to a consumer: p50, p90, p99, p99.9 and max, alongside the time to the
producer's acknowledgement and the rates achieved.

Each record's value starts with a 28-byte header: the run's id, the send time,
the producer and a sequence number. The consumers start at the partitions'
end offsets and skip records of other runs, so the topic can be reused. After
the schedule ends the run waits up to --drain-timeout for every acknowledged
record, and fails if one is missing. Producers and consumers run in this
process and share one monotonic clock.

The send time is the record's scheduled time when the producer is late
(blocked by a full buffer or short of CPU), so falling behind shows up in the
latency instead of slowing the load down. Use --warmup to leave connection
setup and the first batches out of the figures.`,
		Example: `  simtel bench e2e --brokers 127.0.0.1:9092 --rate 10000 --duration 30s --warmup 5s
  simtel bench e2e --topic e2e --partitions 4 --producers 2 --consumers 2 --rate 50000 --acks 1 --json`,
		Args: cobra.NoArgs,
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			var err error
			if cfg.Client, err = benchClient(&kf, log, &out); err != nil {
				return err
			}
			res, runErr := bench.E2E(cmd.Context(), cfg)
			if res == nil {
				return runErr // nothing was measured
			}
			return out.emit(res, runErr, func(w io.Writer) { bench.PrintE2E(w, res) })
		}),
	}
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
	f.StringVar(&cfg.Topic, "topic", "simtel-e2e", "topic to produce to and read (created if it does not exist)")
	f.Int32Var(&cfg.Partitions, "partitions", 1, "partitions to create the topic with if it does not exist")
	f.IntVar(&cfg.RecordSize, "record-size", 1024, fmt.Sprintf("bytes of each record's value (at least %d, the header)", bench.E2EHeaderSize))
	f.StringVar(&cfg.Acks, "acks", "all", "all (idempotent producer), 1 or 0")
	f.IntVar(&cfg.Producers, "producers", 1, "independent clients producing, each at rate/producers")
	f.IntVar(&cfg.Consumers, "consumers", 1, "independent clients consuming; the partitions are split over them")
	f.Float64Var(&cfg.Rate, "rate", 1000, "total records per second, on a fixed schedule")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to send, warmup included")
	f.DurationVar(&cfg.Warmup, "warmup", 0, "first part of the run whose records are checked but not measured")
	f.DurationVar(&cfg.Linger, "linger", 0, "how long a partition's batch waits for more records in the producer")
	f.StringVar(&cfg.Compression, "compression", "none", "none, snappy, lz4, zstd or gzip")
	f.IntVar(&cfg.MaxBufferedRecords, "max-buffered-records", 10000, "records each producer buffers before sending blocks")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 10*time.Second, "how long after the last send to wait for every acknowledged record")
	f.DurationVar(&cfg.StallTimeout, "stall-timeout", 30*time.Second, "abort when nothing was delivered for this long")
	out.register(cmd)
	return cmd
}
