package learner

import (
	"errors"
	"io"
	"math/bits"
)

// Content-defined chunking for format 2: a chunk ends where a rolling
// "gear" hash of the last 64 bytes has its low bits zero, so boundaries
// depend on the bytes around them, not on their position. When a tensor
// grows or shifts, the chunks after it keep their bytes and their hashes,
// and a delta still finds them in the base. Chunks are at least max/16
// and at most max bytes, about max/4 on average.
//
// The table and the cut rule are part of the format in practice: changing
// them changes every boundary, and deltas against versions cut the old way
// would send nearly everything.

// gear maps a byte to a pseudo-random 64-bit value (splitmix64 of the byte
// and a fixed seed, computed once).
var gear = func() (t [256]uint64) {
	x := uint64(0x5eed_0f_5e_7e1)
	for i := range t {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		t[i] = z ^ z>>31
	}
	return t
}()

// chunker cuts a stream into content-defined chunks.
type chunker struct {
	r        io.Reader
	buf      []byte // holds up to max bytes not yet returned, at [lo, hi)
	lo, hi   int
	eof      bool
	min, max int
	mask     uint64
}

// newChunker cuts r into chunks of at most limit bytes.
func newChunker(r io.Reader, limit int) *chunker {
	limit = min(MaxChunkSize, max(1, limit))
	avg := limit / 4
	return &chunker{
		r:    r,
		buf:  make([]byte, limit),
		min:  max(1, limit/16),
		max:  limit,
		mask: 1<<max(0, bits.Len(uint(avg))-1) - 1,
	}
}

// next returns the next chunk, valid until the following call, or io.EOF
// after the last one.
func (c *chunker) next() ([]byte, error) {
	if c.hi-c.lo < c.max && !c.eof {
		n := copy(c.buf, c.buf[c.lo:c.hi])
		c.lo, c.hi = 0, n
		m, err := io.ReadFull(c.r, c.buf[c.hi:])
		c.hi += m
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			c.eof = true
		case err != nil:
			return nil, err
		}
	}
	n := c.hi - c.lo
	if n == 0 {
		return nil, io.EOF
	}
	cut := min(n, c.max)
	var h uint64
	b := c.buf[c.lo : c.lo+cut]
	for i, x := range b {
		h = h<<1 + gear[x]
		if i+1 >= c.min && h&c.mask == 0 {
			cut = i + 1
			break
		}
	}
	out := c.buf[c.lo : c.lo+cut]
	c.lo += cut
	return out, nil
}
