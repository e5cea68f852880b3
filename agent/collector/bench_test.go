//go:build linux

package collector

import (
	"context"
	"syscall"
	"testing"
)

// BenchmarkCollect measures one Collect on this machine's /proc (no job, no
// GPU). cpu-ns/op is user+system CPU time of the process per Collect.
func BenchmarkCollect(b *testing.B) {
	c := New(Config{NvidiaSMI: "/nonexistent/nvidia-smi"})
	buf, err := c.Collect(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for b.Loop() {
		buf, err = c.Collect(context.Background(), buf[:0])
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := syscall.TimevalToNsec(after.Utime) - syscall.TimevalToNsec(before.Utime) +
		syscall.TimevalToNsec(after.Stime) - syscall.TimevalToNsec(before.Stime)
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}
