package producer

import (
	"fmt"
	"slices"
	"sync"

	"github.com/DataDog/zstd"
)

// zstdCompressor compresses record batches with zstd for the producer.
// Compression is the agent's largest CPU cost per sample, so:
//
//   - It uses the reference zstd library (through cgo) at level 1: on
//     record batches of telemetry lines it takes less CPU per byte than
//     the pure-Go encoder at its fastest setting, for the same ratio
//     (go test -run XXX -bench ZstdCompressor ./agent/producer).
//   - Its frames are ordinary zstd frames without a content checksum:
//     Kafka protects every record batch with its own CRC-32C over the
//     compressed bytes, so zstd's checksum over the uncompressed bytes
//     would check nothing new.
//   - Compression contexts are kept in a small free list rather than a
//     sync.Pool, which every other garbage collection empties: a fresh
//     context allocates its tables again on its first batch.
type zstdCompressor struct {
	mu   sync.Mutex
	free []zstd.Ctx
}

// zstdLevel is zstd's level 1, its fastest with entropy coding. Negative
// levels save time but give up a quarter of the ratio (the same benchmark,
// cgo-level1 against cgo-negative1).
const zstdLevel = 1

// maxIdleEncoders bounds the contexts kept: the shipper compresses one
// batch at a time, and splits a refused one rarely.
const maxIdleEncoders = 2

func (c *zstdCompressor) get() zstd.Ctx {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.free); n > 0 {
		e := c.free[n-1]
		c.free = c.free[:n-1]
		return e
	}
	return zstd.NewCtx()
}

func (c *zstdCompressor) put(e zstd.Ctx) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.free) < maxIdleEncoders {
		c.free = append(c.free, e)
	}
}

// compress appends src compressed as one zstd frame to dst. It fails
// only if the library does (a destination too small or a level out of
// range, neither of which can happen here); dst is returned unchanged then.
func (c *zstdCompressor) compress(dst, src []byte) ([]byte, error) {
	e := c.get()
	defer c.put(e)
	n := len(dst)
	dst = slices.Grow(dst, zstd.CompressBound(len(src)))
	out, err := e.CompressLevel(dst[n:cap(dst)], src, zstdLevel)
	if err != nil {
		return dst[:n], fmt.Errorf("zstd: cannot compress %d bytes: %w", len(src), err)
	}
	if len(out) > 0 && &out[0] != &dst[n:cap(dst)][0] {
		return append(dst, out...), nil
	}
	return dst[:n+len(out)], nil
}
