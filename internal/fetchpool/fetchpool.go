// Package fetchpool recycles the memory a franz-go client decodes fetched
// record batches into: each batch's records and its decompressed bytes.
// A consumer that is done with every record it polls before the next poll,
// and keeps nothing of them, gives each back with kgo.Record.Recycle; once
// every record of a batch is back, the client puts the batch's slices here
// and the next batch is decoded into them. Without it every fetched batch
// is new garbage, and a consumer of many small records spends much of its
// CPU collecting it.
//
// A record must not be used, nor any slice of its key or value, after it
// is recycled: the bytes are zeroed and decoded into again.
package fetchpool

import (
	"math/bits"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// classes is how many capacity classes each kind of slice has: powers of
// two from 1 up to 2^(classes-1); larger ones are not kept.
const classes = 28

// Pools implements kgo.PoolRecords and kgo.PoolDecompressBytes. The zero
// value is ready; give it to a client with kgo.WithPools.
type Pools struct {
	recs  [classes]sync.Pool // *[]kgo.Record
	bytes [classes]sync.Pool // *[]byte
}

var (
	_ kgo.PoolRecords         = (*Pools)(nil)
	_ kgo.PoolDecompressBytes = (*Pools)(nil)
)

// class is the class of slices of capacity at least n: the least power
// of two not below n.
func class(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// GetRecords returns a slice of capacity n or more.
func (p *Pools) GetRecords(n int) []kgo.Record {
	c := class(n)
	if c < classes {
		if v, ok := p.recs[c].Get().(*[]kgo.Record); ok {
			return (*v)[:0]
		}
		return make([]kgo.Record, 0, 1<<c)
	}
	return make([]kgo.Record, 0, n)
}

// PutRecords keeps s (whose records the client has zeroed) for a later
// batch of up to its capacity.
func (p *Pools) PutRecords(s []kgo.Record) {
	// The class whose slices s can stand for: its capacity may lie
	// between two powers of two.
	c := bits.Len(uint(cap(s))) - 1
	if c < 0 || c >= classes {
		return
	}
	p.recs[c].Put(&s)
}

// GetDecompressBytes returns a slice to decompress into, of at least
// twice the compressed size; the client grows it if that is short and
// puts back the grown one. Line protocol compresses several times over,
// so a kept slice up to 16 times the compressed size is taken first.
func (p *Pools) GetDecompressBytes(compressed []byte, _ kgo.CompressionCodecType) []byte {
	n := 2 * len(compressed)
	c := class(n)
	for k := min(c+3, classes-1); k >= c; k-- {
		if v, ok := p.bytes[k].Get().(*[]byte); ok {
			return (*v)[:0]
		}
	}
	if c < classes {
		return make([]byte, 0, 1<<c)
	}
	return make([]byte, 0, n)
}

// PutDecompressBytes keeps s (zeroed by the client) for a later batch.
func (p *Pools) PutDecompressBytes(s []byte) {
	c := bits.Len(uint(cap(s))) - 1
	if c < 0 || c >= classes {
		return
	}
	p.bytes[c].Put(&s)
}
