package producer

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	ddzstd "github.com/DataDog/zstd"
	"github.com/klauspost/compress/zstd"
)

// sampleBatch is about n bytes of records as the producer lays them out
// before compression: per record a few varints, the key and a telemetry
// line like the agent benchmark sends.
func sampleBatch(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	envs := []string{"cartpole", "pendulum", "halfcheetah", "ant"}
	var b []byte
	ts := int64(1_764_000_000_000_000_000)
	for i := 0; len(b) < n; i++ {
		rank := rng.IntN(64)
		line := fmt.Appendf(nil, "sim_step,env=%s,host=bench,rank=%d,run=bench reward=%.3f,episode_len=%di,step_time=%.5f %d",
			envs[rank%4], rank, rng.NormFloat64()*50+100, 1+rng.IntN(1000), 0.001+rng.ExpFloat64()*0.004, ts+int64(i)*1000)
		b = append(b, byte(2*(len(line)+20)), 0, byte(2*i), 0x96, 0x01, 22)
		b = append(b, "bench/bench"...)
		b = strconv.AppendInt(b, int64(len(line)), 10)[:len(b)+1]
		b = append(b, line...)
		b = append(b, 0)
	}
	return b
}

func TestZstdCompressorRoundTrip(t *testing.T) {
	src := sampleBatch(1 << 20)
	c := &zstdCompressor{}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	prefix := []byte("header")
	for i := range 3 { // the second and third call reuse the encoder
		out, err := c.compress(append([]byte(nil), prefix...), src)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !bytes.HasPrefix(out, prefix) {
			t.Fatalf("call %d: what dst held is gone", i)
		}
		out = out[len(prefix):]
		if len(out) >= len(src)/3 {
			t.Errorf("call %d: %d bytes compressed to %d, want under a third", i, len(src), len(out))
		}
		got, err := dec.DecodeAll(out, nil)
		if err != nil {
			t.Fatalf("call %d: cannot decompress: %v", i, err)
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("call %d: round trip changed the batch", i)
		}
	}
	if n := len(c.free); n != 1 {
		t.Errorf("idle encoders: got %d, want 1 (reused, not recreated)", n)
	}
}

// BenchmarkZstdCompressor compresses batches of the sizes the producer
// sends (up to 1 MiB of records before compression by default), next to
// zstd's first negative level and the pure-Go encoder at its fastest
// setting.
func BenchmarkZstdCompressor(b *testing.B) {
	for _, size := range []int{64 << 10, 256 << 10, 1 << 20} {
		src := sampleBatch(size)
		var dst []byte
		run := func(b *testing.B, compress func() []byte) {
			b.SetBytes(int64(len(src)))
			var n int
			for b.Loop() {
				dst = compress()
				n = len(dst)
			}
			b.ReportMetric(float64(len(src))/float64(n), "ratio")
		}
		b.Run(fmt.Sprintf("cgo-level1/%dKiB", size>>10), func(b *testing.B) {
			c := &zstdCompressor{}
			run(b, func() []byte { out, _ := c.compress(dst[:0], src); return out })
		})
		b.Run(fmt.Sprintf("cgo-negative1/%dKiB", size>>10), func(b *testing.B) {
			e := ddzstd.NewCtx()
			run(b, func() []byte {
				out, err := e.CompressLevel(dst[:cap(dst)], src, -1)
				if err != nil {
					b.Fatal(err)
				}
				return out
			})
		})
		b.Run(fmt.Sprintf("go-fastest/%dKiB", size>>10), func(b *testing.B) {
			e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(64<<10),
				zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
			if err != nil {
				b.Fatal(err)
			}
			run(b, func() []byte { return e.EncodeAll(src, dst[:0]) })
		})
	}
}
