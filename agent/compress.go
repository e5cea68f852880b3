package agent

import (
	"bytes"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kgo"
)

// zstdCompressor compresses produce batches with zstd for the producer
// (kgo.WithCompressor). It differs from the client's default compressor in
// two ways that matter for the agent's own CPU cost:
//
//   - Encoders are kept in a small free list rather than a sync.Pool. A
//     sync.Pool is emptied by every other garbage collection, and a fresh
//     encoder allocates and clears its tables and history again (about
//     1 MiB) on its first batch; under the agent's memory limit the GC
//     runs often enough at high rates that this showed in profiles.
//   - The frame checksum is off. Kafka protects every record batch with
//     its own CRC-32C, computed over the compressed bytes, so zstd's
//     xxhash over the uncompressed bytes checks nothing new.
//
// The level is zstd's fastest: telemetry lines compress well at it, and
// compression is the agent's largest CPU cost at higher levels.
type zstdCompressor struct {
	mu   sync.Mutex
	free []*zstd.Encoder
}

// maxIdleEncoders bounds the encoders kept: the producer compresses one
// batch at a time per broker connection.
const maxIdleEncoders = 4

func newZstdEncoder() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithWindowSize(64<<10),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false),
		zstd.WithZeroFrames(true),
	)
}

func (c *zstdCompressor) get() *zstd.Encoder {
	c.mu.Lock()
	if n := len(c.free); n > 0 {
		e := c.free[n-1]
		c.free = c.free[:n-1]
		c.mu.Unlock()
		return e
	}
	c.mu.Unlock()
	e, err := newZstdEncoder()
	if err != nil {
		return nil // cannot happen with constant options; sent uncompressed
	}
	return e
}

func (c *zstdCompressor) put(e *zstd.Encoder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.free) < maxIdleEncoders {
		c.free = append(c.free, e)
	}
}

// Compress implements kgo.Compressor. Brokers too old for zstd (produce
// requests before v7) get the batch uncompressed.
func (c *zstdCompressor) Compress(dst *bytes.Buffer, src []byte, flags ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	for _, f := range flags {
		if f == kgo.CompressDisableZstd {
			return src, kgo.CodecNone
		}
	}
	e := c.get()
	if e == nil {
		return src, kgo.CodecNone
	}
	defer c.put(e)
	if l := e.MaxEncodedSize(len(src)); l > dst.Cap() {
		dst.Grow(l)
	}
	return e.EncodeAll(src, dst.Bytes()[:0]), kgo.CodecZstd
}
