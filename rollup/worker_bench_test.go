package rollup

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// BenchmarkRollupWorker is the whole worker as `simtel rollup` runs it,
// its Kafka client and transactions included: benchLines' samples are
// produced to a broker in a process of its own, then one worker (its
// defaults but the allowed lateness) reads them all; the figure is this
// process's CPU from the worker's start until its group has committed
// the topic's end:
//
//	go test -run X -bench RollupWorker -benchtime 1x ./rollup/
func BenchmarkRollupWorker(b *testing.B) {
	const n = 1_000_000
	br := brokertest.Start(b, brokertest.Topic(DefaultTopic, 1), brokertest.GroupDelay(0))
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addr), kgo.DefaultProduceTopic(DefaultTopic))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	recs := benchLines(n)
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	recs = nil
	runtime.GC()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, DefaultTopic)
	if err != nil {
		b.Fatal(err)
	}
	end := ends[DefaultTopic][0].Offset

	var cpu time.Duration
	var samples int64
	var mallocs, gcs uint64
	var ms0, ms1 runtime.MemStats
	b.ResetTimer()
	for i := range b.N {
		group := DefaultGroup + "-" + strconv.Itoa(i)
		cfg := Config{Brokers: []string{br.Addr}, Group: group, AllowedLateness: time.Second}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		runtime.ReadMemStats(&ms0)
		cpu0 := cpuTime()
		go func() { done <- Run(runCtx, cfg) }()
		for {
			offs, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				b.Fatal(err)
			}
			if o, ok := offs.Lookup(DefaultTopic, 0); ok && o.At >= end {
				break
			}
			select {
			case err := <-done:
				b.Fatalf("the worker stopped: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
		}
		cpu += cpuTime() - cpu0
		runtime.ReadMemStats(&ms1)
		mallocs += ms1.Mallocs - ms0.Mallocs
		gcs += uint64(ms1.NumGC - ms0.NumGC)
		samples += n
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(samples)/cpu.Seconds(), "samples/CPU-s")
	b.ReportMetric(float64(mallocs)/float64(samples), "allocs/sample")
	b.ReportMetric(float64(gcs)/float64(b.N), "GCs/op")
}
