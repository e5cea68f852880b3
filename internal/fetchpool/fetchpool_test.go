package fetchpool

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCapacities: a slice from the pools holds what was asked for, whether
// new or put back before, and a slice put back is handed out only for
// sizes it holds.
func TestCapacities(t *testing.T) {
	var p Pools
	for _, n := range []int{0, 1, 2, 3, 5, 64, 100, 1000, 4097, 1 << 20} {
		for round := range 3 {
			recs := p.GetRecords(n)
			if len(recs) != 0 || cap(recs) < n {
				t.Fatalf("GetRecords(%d), round %d: len %d cap %d", n, round, len(recs), cap(recs))
			}
			b := p.GetDecompressBytes(make([]byte, n), kgo.CodecSnappy)
			if len(b) != 0 || cap(b) < 2*n {
				t.Fatalf("GetDecompressBytes(%d bytes), round %d: len %d cap %d", n, round, len(b), cap(b))
			}
			p.PutRecords(recs[:cap(recs)])
			p.PutDecompressBytes(b[:cap(b)])
		}
	}
	// A slice of 3,000 records stands for the class of 2,048: never given
	// out for more.
	p.PutRecords(make([]kgo.Record, 3000))
	if got := p.GetRecords(2049); cap(got) < 2049 {
		t.Fatalf("GetRecords(2049) has capacity %d", cap(got))
	}
}
