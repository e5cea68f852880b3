package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
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
		newBenchAgentCmd(g), newBenchAgentsCmd(g), newBenchAgentReportCmd(), newBenchFanoutCmd(g), newBenchFanoutReportCmd(), newBenchE2ECmd(g), newBenchSinkCmd())
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

// benchClient is the bench.Client a bench command runs with: the brokers
// and client options of its flags, its logger, and progress on stderr
// unless --quiet.
func benchClient(kf *kafkaFlags, log *slog.Logger, out *benchOutput) (bench.Client, error) {
	brokers, opts, err := kf.client()
	return bench.Client{Brokers: brokers, ClientOpts: opts, Logger: log, Progress: out.progress()}, err
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

func newBenchProduceCmd(g *globalFlags) *cobra.Command {
	var cfg bench.ProduceConfig
	var kf kafkaFlags
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
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			var err error
			if cfg.Client, err = benchClient(&kf, log, &out); err != nil {
				return err
			}
			cfg.NoIdempotence = !idempotent
			if cfg.Duration == 0 && cfg.Records == 0 {
				cfg.Duration = 10 * time.Second
			}
			res, runErr := bench.Produce(cmd.Context(), cfg)
			return out.emit(res, runErr, func(w io.Writer) { bench.PrintProduce(w, res) })
		}),
	}
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
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

func newBenchConsumeCmd(g *globalFlags) *cobra.Command {
	var cfg bench.ConsumeConfig
	var kf kafkaFlags
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
		RunE: g.withLogger(func(cmd *cobra.Command, log *slog.Logger) error {
			var err error
			if cfg.Client, err = benchClient(&kf, log, &out); err != nil {
				return err
			}
			res, runErr := bench.Consume(cmd.Context(), cfg)
			if runErr == nil && res != nil && !res.Complete {
				runErr = fmt.Errorf("stopped after %s without data before reading everything (%d records)", cfg.Idle, res.Records)
			}
			return out.emit(res, runErr, func(w io.Writer) { bench.PrintConsume(w, res) })
		}),
	}
	f := cmd.Flags()
	kf.register(f, "127.0.0.1:9092", "comma-separated broker addresses")
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
			return out.emit(res, err, func(w io.Writer) { bench.PrintDisk(w, res) })
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
