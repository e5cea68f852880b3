package spool

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
)

// benchBatch returns n records of 200 bytes (key + value), like telemetry
// lines keyed by run/host.
func benchBatch(n int) []Record {
	key := []byte("run-1234/node0042")
	out := make([]Record, n)
	for i := range out {
		v := []byte(fmt.Sprintf("cpu,host=node0042,job=1234,step=0 usage_user=%d.25,usage_system=3.5,usage_idle=80.125,iowait=0.5 %d", i, 1700000000000000000+i))
		for len(key)+len(v) < 200 {
			v = append(v, ' ')
		}
		out[i] = Record{Key: key, Value: v[:200-len(key)], Time: int64(1700000000000000000 + i)}
	}
	return out
}

func benchConfig(b *testing.B) Config {
	return Config{
		Dir:      b.TempDir(),
		MaxBytes: 256 << 20,
		Policy:   DropOldest, // steady state: old segments go, as with a slow broker
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// BenchmarkAppend measures Append of batches of 100 records of 200 bytes,
// from one goroutine and from 8, with the default 1 s background sync.
func BenchmarkAppend(b *testing.B) {
	const perBatch = 100
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", par), func(b *testing.B) {
			s, err := Open(benchConfig(b))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			batch := benchBatch(perBatch)
			ctx := context.Background()
			b.SetBytes(perBatch * 200)
			b.ReportAllocs()
			b.ResetTimer()
			if par == 1 {
				for b.Loop() {
					if err := s.Append(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := s.Append(ctx, batch); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.ReportMetric(float64(b.N*perBatch)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkAppendRead runs appenders against one reader that acknowledges
// every batch, with the Block policy and a 64 MiB bound, and measures the
// end-to-end rate: the clock stops when the reader has everything.
func BenchmarkAppendRead(b *testing.B) {
	const perBatch = 100
	cfg := benchConfig(b)
	cfg.Policy = Block
	cfg.MaxBytes = 64 << 20
	s, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	batch := benchBatch(perBatch)
	ctx := context.Background()

	// The reader stops once it has read total records; total is known
	// only when the appenders are done, so a marker record appended
	// after that wakes a reader that already has everything.
	var total atomic.Int64
	total.Store(-1)
	readerDone := make(chan error, 1)
	go func() {
		var n int64
		for {
			rs, p, err := s.Read(ctx, 10_000, 4<<20)
			if err != nil {
				readerDone <- err
				return
			}
			n += int64(len(rs))
			if err := s.Ack(p); err != nil {
				readerDone <- err
				return
			}
			if t := total.Load(); t >= 0 && n >= t {
				readerDone <- nil
				return
			}
		}
	}()

	b.SetBytes(perBatch * 200)
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(2)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Append(ctx, batch); err != nil {
				b.Error(err)
				return
			}
		}
	})
	total.Store(int64(b.N) * perBatch)
	if err := s.Append(ctx, batch[:1]); err != nil {
		b.Fatal(err)
	}
	if err := <-readerDone; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Load())/b.Elapsed().Seconds(), "records/s")
}
