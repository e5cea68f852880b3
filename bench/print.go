package bench

import (
	"fmt"
	"io"
)

// The human-readable forms of the benchmarks' results, which the
// commands print without --json.

// PrintProduce writes a produce result for people.
func PrintProduce(w io.Writer, r *ProduceResult) {
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

// PrintConsume writes a consume result for people.
func PrintConsume(w io.Writer, r *ConsumeResult) {
	s := r.Settings
	fmt.Fprintf(w, "consume %s (%s, %d consumers, %d partitions)\n", s.Topic, s.Mode, s.Consumers, s.Partitions)
	fmt.Fprintf(w, "  %d records (%.1f MB of %s) in %d fetches; first data after %.2f s\n",
		r.Records, float64(r.Bytes)/1e6, r.BytesOf, r.Fetches, r.Startup)
	fmt.Fprintf(w, "  %.0f records/s, %.1f MB/s over %.2f s\n", r.RecPerS, r.MBPerS, r.Elapsed)
}

// PrintAgentLoad writes an agent load result for people.
func PrintAgentLoad(w io.Writer, r *AgentLoadResult) {
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

// fmtRate is a target rate, 0 being unlimited.
func fmtRate(r float64) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.0f", r)
}

// PrintE2E writes an end-to-end latency result for people.
func PrintE2E(w io.Writer, r *E2EResult) {
	s := r.Settings
	fmt.Fprintf(w, "e2e %s: %d B records at %.0f records/s, acks=%s, %d producers, %d consumers, %d partitions\n",
		s.Topic, s.RecordSize, s.Rate, s.Acks, s.Producers, s.Consumers, s.Partitions)
	fmt.Fprintf(w, "  sent %d, acknowledged %d, failed %d; delivered %d, duplicates %d, lost %d, foreign %d; drained in %.2f s\n",
		r.Sent, r.Acked, r.Failed, r.Delivered, r.Duplicates, r.Lost, r.Foreign, r.DrainS)
	fmt.Fprintf(w, "  measured %.2f s: sent %.0f records/s, delivered %.0f records/s (%.2f MB/s); %d sends behind schedule, max %.2f ms\n",
		r.Elapsed, r.SentPerS, r.DeliveredPerS, r.DeliveredMBPerS, r.Behind, r.MaxSendLagMS)
	for _, l := range []struct {
		name string
		s    LatencySummary
	}{{"end-to-end", r.Latency}, {"acknowledged", r.AckLatency}} {
		fmt.Fprintf(w, "  %s latency ms (%d records): p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", l.name, l.s.Count,
			float64(l.s.P50US)/1e3, float64(l.s.P90US)/1e3, float64(l.s.P99US)/1e3, float64(l.s.P999US)/1e3, float64(l.s.MaxUS)/1e3)
	}
	if r.FirstErr != "" {
		fmt.Fprintf(w, "  first error: %s\n", r.FirstErr)
	}
	if r.Aborted != "" {
		fmt.Fprintf(w, "  aborted: %s\n", r.Aborted)
	}
}

// PrintDisk writes a disk result for people.
func PrintDisk(w io.Writer, res *DiskResult) {
	fmt.Fprintf(w, "disk %s\n  sequential %d B writes + fdatasync: %.1f MB/s\n", res.Dir, res.BlockSize, res.SeqMBPerS)
	if res.SustainSeries != nil {
		fmt.Fprintf(w, "  sustained, per second: %.0f MB/s; last seconds: %.1f MB/s\n", res.SustainSeries, res.SustainMBPerS)
	}
	fmt.Fprintf(w, "  %d B appends + fdatasync: %.0f /s, p50 %d µs, p99 %d µs\n",
		res.AppendSize, res.AppendsPS, res.AppendLat.P50US, res.AppendLat.P99US)
}

// PrintSink writes a sink encoding result for people.
func PrintSink(w io.Writer, res *SinkBenchResult) {
	fmt.Fprintf(w, "sink encode: %d samples into %d objects in %.2f s (%.2f CPU s)\n",
		res.Samples, res.Objects, res.WallSeconds, res.CPUSeconds)
	fmt.Fprintf(w, "  %.0f samples/s, %.0f samples per CPU second\n", res.SamplesPerSec, res.SamplesPerCoreSec)
	fmt.Fprintf(w, "  bytes per sample: %.1f line protocol, %.1f in the broker, %.1f in Parquet (%.1fx smaller than the broker's log)\n",
		res.LineBytesPerSample, res.BrokerBytesPerSample, res.ParquetBytesPerSample, res.CompressionRatio)
	if res.DeadLetters > 0 {
		fmt.Fprintf(w, "  %d dead letters\n", res.DeadLetters)
	}
	if res.IcebergCommits > 0 {
		fmt.Fprintf(w, "  iceberg: %d commits, %.2f CPU s (%.1f%% of the total), %.1f ms a commit\n",
			res.IcebergCommits, res.IcebergCPUSeconds, 100*res.IcebergCPUSeconds/res.CPUSeconds, res.IcebergCommitMillis)
	}
}
