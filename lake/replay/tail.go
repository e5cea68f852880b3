package replay

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// readTail reads, from every partition p of the telemetry topic, the
// records after the lake's last committed offset Last(p) up to the high
// watermark seen now, keeps those of the run (key "<run>/…"), decodes them
// and returns them sorted. A record that does not decode is skipped with a
// warning: the sink sends it to the dead-letter object, not the lake's
// telemetry, so the lake would not replay it either.
func (r *Replay) readTail(ctx context.Context) ([]Sample, error) {
	log := r.cfg.Logger
	topic := r.cfg.Topic
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(r.cfg.Brokers...)}, r.cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot create a client for %v: %w", r.cfg.Brokers, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// Ask for the topic first: listing offsets of a topic the cluster does
	// not have retries for a long time before it fails.
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the brokers %v to read the unflushed tail of topic %s (is the broker running?): %w", r.cfg.Brokers, topic, err)
	}
	if td, ok := tds[topic]; !ok || td.Err != nil {
		return nil, fmt.Errorf("topic %s does not exist on brokers %v, so the part of the run the sink has not flushed cannot be read there: check --brokers and --topic, or leave out --brokers to replay the lake only", topic, r.cfg.Brokers)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("cannot read the end offsets of topic %s from %v (is the broker running?): %w", topic, r.cfg.Brokers, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("cannot read the end offsets of topic %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("cannot read the start offsets of topic %s: %w", topic, err)
	}
	want := map[int32]kgo.Offset{}
	stop := map[int32]int64{} // exclusive end per partition
	ends.Each(func(o kadm.ListedOffset) {
		from := int64(0)
		if l, ok := r.last[o.Partition]; ok {
			from = l + 1
		}
		if s, ok := starts.Lookup(topic, o.Partition); ok && s.Offset > from {
			log.Warn("records neither in the lake nor in the broker: the broker deleted them before the sink flushed them",
				"topic", topic, "partition", o.Partition, "from", from, "to", s.Offset-1)
			from = s.Offset
		}
		if from < o.Offset {
			want[o.Partition] = kgo.NewOffset().At(from)
			stop[o.Partition] = o.Offset
		}
	})
	for p := range r.last {
		if _, ok := ends.Lookup(topic, p); !ok {
			return nil, fmt.Errorf("the lake has partition %d of topic %s but the broker does not: wrong --brokers or --topic?", p, topic)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	log.Debug("reading the broker tail", "topic", topic, "partitions", len(want))
	cons, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(r.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted())}, r.cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot create a consumer for %v: %w", r.cfg.Brokers, err)
	}
	defer cons.Close()
	prefix := []byte(r.cfg.Run + "/")
	var out []Sample
	next := map[int32]int64{}
	for p, o := range want {
		next[p] = o.EpochOffset().Offset
	}
	for len(stop) > 0 {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("cannot fetch %s partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			end, ok := stop[rec.Partition]
			if !ok || rec.Offset >= end {
				return
			}
			next[rec.Partition] = rec.Offset + 1
			if rec.Offset+1 >= end {
				delete(stop, rec.Partition)
			}
			if r.cfg.Run != "" && !bytes.HasPrefix(rec.Key, prefix) {
				return
			}
			s, err := ParseLine(rec.Value)
			if err != nil {
				log.Warn("record of the broker tail skipped: not a line-protocol sample", "partition", rec.Partition, "offset", rec.Offset, "err", err)
				return
			}
			s.Partition, s.Offset = rec.Partition, rec.Offset
			if len(r.cfg.Measurements) > 0 && !slices.Contains(r.cfg.Measurements, s.Measurement) {
				return
			}
			out = append(out, s)
		})
		// A partition whose last records were transaction markers or
		// compacted away never delivers its end offset: stop when the
		// consumer's position passed it.
		for p, end := range stop {
			if next[p] >= end {
				delete(stop, p)
			}
		}
	}
	slices.SortFunc(out, func(a, b Sample) int {
		switch {
		case Less(&a, &b):
			return -1
		case Less(&b, &a):
			return 1
		}
		return 0
	})
	return out, nil
}
