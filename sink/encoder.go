package sink

import (
	"time"

	"github.com/simtel/simtel/lake/catalog"
)

// Encoder turns the records of one partition into the Parquet objects of
// one flush. It is the sink's hot path, exported for benchmarks and tools;
// the connector uses the same code. An Encoder is used by one goroutine.
type Encoder struct {
	b  *buffer
	sc encodeScratch
}

// Object is one encoded object of a flush.
type Object struct {
	Key   string
	Data  []byte
	Entry catalog.Object
}

// NewEncoder returns an encoder for a partition of topic. With telemetry
// false, records are kept raw.
func NewEncoder(topic string, partition int32, telemetry bool) *Encoder {
	return &Encoder{b: newBuffer(topic, partition, telemetry)}
}

// Add buffers a record; records must come in offset order.
func (e *Encoder) Add(r *Record) { e.b.add(r, time.Now) }

// Encode returns the objects of everything added since the last Reset,
// sorted by key. It does not reset the encoder.
func (e *Encoder) Encode() ([]Object, error) {
	enc, err := e.b.encode(&e.sc)
	if err != nil {
		return nil, err
	}
	out := make([]Object, len(enc))
	for i, x := range enc {
		out[i] = Object{Key: x.key, Data: x.data, Entry: x.obj}
	}
	return out, nil
}

// Reset forgets the buffered records, keeping allocated memory.
func (e *Encoder) Reset() { e.b.reset() }
