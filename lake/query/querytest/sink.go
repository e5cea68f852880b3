package querytest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/sink"
)

// SinkFlush encodes samples (all of one partition, in any order) with the
// sink's own encoder — as records whose value is the sample's line and key
// "<run>/<host>", as the agent ships them — writes the objects and commits
// one catalog entry for the offset range [first, last].
func (l *Lake) SinkFlush(ctx context.Context, topic string, partition int32, first, last int64, samples []replay.Sample) (catalog.Entry, error) {
	ss := slices.Clone(samples)
	slices.SortFunc(ss, func(a, b replay.Sample) int { return int(a.Offset - b.Offset) })
	enc := sink.NewEncoder(topic, partition, true)
	for i := range ss {
		s := &ss[i]
		if s.Partition != partition || s.Offset < first || s.Offset > last {
			return catalog.Entry{}, fmt.Errorf("sample at partition %d offset %d is outside flush %d:[%d,%d]", s.Partition, s.Offset, partition, first, last)
		}
		line, err := replay.AppendLine(nil, s)
		if err != nil {
			return catalog.Entry{}, err
		}
		enc.Add(&sink.Record{Offset: s.Offset, Timestamp: time.Unix(0, s.Time), Key: []byte(s.Tags["run"] + "/" + s.Tags["host"]), Value: line})
	}
	objs, err := enc.Encode()
	if err != nil {
		return catalog.Entry{}, err
	}
	e := catalog.Entry{Topic: topic, Partition: partition, FirstOffset: first, LastOffset: last,
		Records: int64(len(ss)), Written: time.Now().UTC(), Sink: "querytest"}
	for _, o := range objs {
		if err := l.Store.Put(ctx, o.Key, bytes.NewReader(o.Data), int64(len(o.Data))); err != nil {
			return e, err
		}
		e.Objects = append(e.Objects, o.Entry)
	}
	return e, l.Catalog.Commit(ctx, e)
}

// SinkWriteSamples is WriteSamples through the sink's encoder.
func (l *Lake) SinkWriteSamples(ctx context.Context, topic string, ss []replay.Sample, flushSize int) error {
	byPart := map[int32][]replay.Sample{}
	for _, s := range ss {
		byPart[s.Partition] = append(byPart[s.Partition], s)
	}
	for p, list := range byPart {
		slices.SortFunc(list, func(a, b replay.Sample) int { return int(a.Offset - b.Offset) })
		for lo := 0; lo < len(list); lo += flushSize {
			chunk := list[lo:min(lo+flushSize, len(list))]
			if _, err := l.SinkFlush(ctx, topic, p, chunk[0].Offset, chunk[len(chunk)-1].Offset, chunk); err != nil {
				return err
			}
		}
	}
	return nil
}
