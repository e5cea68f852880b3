package storage

import (
	"bytes"
	"context"
	"testing"
)

// benchBatch is a 16 KiB batch of 1 KiB records.
func benchBatch(b *testing.B) ([]byte, []BatchHeader) {
	recs := make([]rec, 15)
	for i := range recs {
		recs[i] = rec{key: []byte{byte(i)}, value: bytes.Repeat([]byte{byte(i)}, 1024), ts: int64(i)}
	}
	batch := buildBatch(b, batchSpec{recs: recs})
	hs, err := ParseBatches(batch, 0)
	if err != nil {
		b.Fatal(err)
	}
	return batch, hs
}

// BenchmarkAppendSync measures durable append throughput: each producer
// appends a ~16 KiB batch and waits for it to be fsynced. The parallel
// variant (8 producers per GOMAXPROCS) shows group commit sharing
// fdatasyncs between producers.
func BenchmarkAppendSync(b *testing.B) {
	run := func(b *testing.B, parallelism int) {
		l, err := Open(Config{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		batch, _ := benchBatch(b)
		b.SetBytes(int64(len(batch)))
		b.ReportAllocs()
		b.ResetTimer()
		if parallelism == 0 {
			buf, hs := benchBatch(b)
			for b.Loop() {
				_, last, err := l.Append(buf, hs, 0)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Sync(context.Background(), last); err != nil {
					b.Fatal(err)
				}
			}
		} else {
			b.SetParallelism(parallelism)
			b.RunParallel(func(pb *testing.PB) {
				buf, hs := benchBatch(b)
				for pb.Next() {
					_, last, err := l.Append(buf, hs, 0)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Sync(context.Background(), last); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		b.StopTimer()
		st := l.Stats()
		b.ReportMetric(float64(st.Fsyncs)/float64(b.N), "fsyncs/op")
	}
	b.Run("serial", func(b *testing.B) { run(b, 0) })
	b.Run("parallel", func(b *testing.B) { run(b, 8) })
}

// BenchmarkAppend measures the page-cache append path alone.
func BenchmarkAppend(b *testing.B) {
	l, err := Open(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	buf, hs := benchBatch(b)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := l.Append(buf, hs, 0); err != nil {
			b.Fatal(err)
		}
	}
}
