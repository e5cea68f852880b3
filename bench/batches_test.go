package bench

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// batch encodes a magic 2 record batch header with fake record bytes.
func batch(base int64, records int32, recordBytes int) []byte {
	b := kmsg.RecordBatch{
		FirstOffset:     base,
		Length:          int32(batchHeaderLen - batchLengthEnd + recordBytes),
		Magic:           2,
		LastOffsetDelta: records - 1,
		NumRecords:      records,
		ProducerID:      -1,
		ProducerEpoch:   -1,
		FirstSequence:   -1,
		Records:         make([]byte, recordBytes),
	}
	return b.AppendTo(nil)
}

func TestWalkBatches(t *testing.T) {
	one := batch(0, 10, 1000)
	two := batch(10, 5, 300)
	three := batch(15, 1, 20)
	if len(one) != batchHeaderLen+1000 {
		t.Fatalf("test batch encodes to %d bytes, want %d", len(one), batchHeaderLen+1000)
	}
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	for _, c := range []struct {
		name string
		in   []byte
		want BatchWalk
		err  error
	}{
		{"empty", nil, BatchWalk{NextOffset: -1}, nil},
		{"one", one, BatchWalk{1, 10, int64(len(one)), 10}, nil},
		{"three", cat(one, two, three), BatchWalk{3, 16, int64(len(one) + len(two) + len(three)), 16}, nil},
		{"partial trailing batch", cat(one, two, three[:30]), BatchWalk{2, 15, int64(len(one) + len(two)), 15}, nil},
		{"partial trailing length field", cat(one, three[:5]), BatchWalk{1, 10, int64(len(one)), 10}, nil},
		{"only a partial batch", one[:500], BatchWalk{NextOffset: -1}, ErrBatchTooLarge},
	} {
		got, err := WalkBatches(c.in)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: got error %v, want %v", c.name, err, c.err)
		}
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestWalkBatchesRejects(t *testing.T) {
	old := batch(0, 1, 10)
	old[offMagic] = 1
	if _, err := WalkBatches(old); err == nil {
		t.Error("magic 1 batch: got no error")
	}
	short := batch(0, 1, 10)
	short[8], short[9], short[10], short[11] = 0, 0, 0, 5
	if _, err := WalkBatches(short); err == nil {
		t.Error("batch length 5: got no error")
	}
	neg := batch(0, 1, 10)
	neg[offRecordCount] = 0xff
	if _, err := WalkBatches(neg); err == nil {
		t.Error("negative record count: got no error")
	}
}

// FuzzWalkBatches checks that any input is handled without panic, that
// counted bytes never exceed the input, and that a walk that succeeded
// over whole batches can be repeated on exactly those bytes.
func FuzzWalkBatches(f *testing.F) {
	f.Add([]byte{})
	f.Add(batch(0, 1, 0))
	f.Add(append(batch(7, 3, 40), batch(10, 2, 8)...))
	f.Add(batch(1<<40, 100, 64)[:70])
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := WalkBatches(b)
		if w.Bytes > int64(len(b)) {
			t.Fatalf("counted %d bytes of %d", w.Bytes, len(b))
		}
		if err != nil || w.Batches == 0 {
			return
		}
		again, err := WalkBatches(b[:w.Bytes])
		if err != nil || again != w {
			t.Fatalf("walk of the whole batches: got %+v, %v; want %+v", again, err, w)
		}
	})
}
