// Package querytest writes lake objects with the sink's schema (telemetry,
// raw and dead-letter Parquet) and commits catalog entries for them, so the
// tests and benchmarks of lake readers can build a lake without running a
// sink. The objects follow the schema in docs/lake.md exactly.
package querytest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/sink"
)

// EncodeTelemetry writes samples (all of one measurement) as one telemetry
// object: time TIMESTAMP(MICROS, UTC), one optional STRING column per tag,
// one optional typed column per field, _partition, _offset and _time_ns,
// rows sorted by (time, offset), zstd. It returns the column names.
func EncodeTelemetry(w io.Writer, samples []replay.Sample) ([]string, error) {
	tags := map[string]bool{}
	fields := map[string]parquet.Node{}
	for i := range samples {
		for k := range samples[i].Tags {
			tags[k] = true
		}
		for k, v := range samples[i].Fields {
			n, err := fieldNode(v)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", k, err)
			}
			if old, ok := fields[k]; ok && old.Type().Kind() != n.Type().Kind() {
				return nil, fmt.Errorf("field %q has two types in one object", k)
			}
			fields[k] = n
		}
	}
	group := parquet.Group{
		"time":       parquet.Timestamp(parquet.Microsecond),
		"_partition": parquet.Int(32),
		"_offset":    parquet.Int(64),
		"_time_ns":   parquet.Int(64),
	}
	for k := range tags {
		if _, dup := group[k]; dup {
			return nil, fmt.Errorf("tag %q collides with a reserved column", k)
		}
		group[k] = parquet.Optional(parquet.Encoded(parquet.String(), &parquet.RLEDictionary))
	}
	for k, n := range fields {
		if _, dup := group[k]; dup {
			return nil, fmt.Errorf("field %q collides with a tag or reserved column", k)
		}
		group[k] = parquet.Optional(n)
	}
	schema := parquet.NewSchema("telemetry", group)
	cols := schema.Columns()
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c[0]
	}

	order := make([]int, len(samples))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(samples[a].Time, samples[b].Time), cmp.Compare(samples[a].Offset, samples[b].Offset))
	})
	rows := make([]parquet.Row, 0, len(samples))
	for _, i := range order {
		s := &samples[i]
		row := make(parquet.Row, len(names))
		for c, name := range names {
			var v parquet.Value
			switch {
			case name == "time":
				v = parquet.Int64Value(s.Time/1000).Level(0, 0, c)
			case name == "_partition":
				v = parquet.Int32Value(s.Partition).Level(0, 0, c)
			case name == "_offset":
				v = parquet.Int64Value(s.Offset).Level(0, 0, c)
			case name == "_time_ns":
				v = parquet.Int64Value(s.Time).Level(0, 0, c)
			case tags[name]:
				if t, ok := s.Tags[name]; ok {
					v = parquet.ByteArrayValue([]byte(t)).Level(0, 1, c)
				} else {
					v = parquet.NullValue().Level(0, 0, c)
				}
			default:
				if f, ok := s.Fields[name]; ok {
					v = fieldValue(f).Level(0, 1, c)
				} else {
					v = parquet.NullValue().Level(0, 0, c)
				}
			}
			row[c] = v
		}
		rows = append(rows, row)
	}
	pw := parquet.NewWriter(w, schema, parquet.Compression(&parquet.Zstd))
	if _, err := pw.WriteRows(rows); err != nil {
		return nil, fmt.Errorf("cannot write telemetry rows: %w", err)
	}
	if err := pw.Close(); err != nil {
		return nil, fmt.Errorf("cannot finish telemetry object: %w", err)
	}
	return names, nil
}

func fieldNode(v any) (parquet.Node, error) {
	switch v.(type) {
	case float64:
		return parquet.Leaf(parquet.DoubleType), nil
	case int64:
		return parquet.Int(64), nil
	case uint64:
		return parquet.Uint(64), nil
	case bool:
		return parquet.Leaf(parquet.BooleanType), nil
	case string:
		return parquet.String(), nil
	}
	return nil, fmt.Errorf("unsupported field type %T", v)
}

func fieldValue(v any) parquet.Value {
	switch x := v.(type) {
	case float64:
		return parquet.DoubleValue(x)
	case int64:
		return parquet.Int64Value(x)
	case uint64:
		return parquet.Int64Value(int64(x))
	case bool:
		return parquet.BooleanValue(x)
	case string:
		return parquet.ByteArrayValue([]byte(x))
	}
	panic(fmt.Sprintf("unsupported field type %T", v))
}

// Lake writes objects into a store and commits them to its catalog.
type Lake struct {
	Store   store.Store
	Catalog *catalog.Catalog
}

// Flush writes the samples of one flush of one partition of topic — one
// telemetry object per (measurement, run, date), all named after the
// flush's offset range [first, last] — and commits the catalog entry.
// Every sample must have the given partition and an offset in the range.
func (l *Lake) Flush(ctx context.Context, topic string, partition int32, first, last int64, samples []replay.Sample) (catalog.Entry, error) {
	type group struct{ m, run, date string }
	groups := map[group][]replay.Sample{}
	for _, s := range samples {
		if s.Partition != partition || s.Offset < first || s.Offset > last {
			return catalog.Entry{}, fmt.Errorf("sample %s at partition %d offset %d is outside flush %d:[%d,%d]", s.Measurement, s.Partition, s.Offset, partition, first, last)
		}
		g := group{s.Measurement, s.Tags["run"], lake.Date(time.Unix(0, s.Time))}
		groups[g] = append(groups[g], s)
	}
	e := catalog.Entry{Topic: topic, Partition: partition, FirstOffset: first, LastOffset: last,
		Records: int64(len(samples)), Written: time.Now().UTC(), Sink: "querytest"}
	keys := slices.SortedFunc(maps.Keys(groups), func(a, b group) int {
		return cmp.Or(cmp.Compare(a.m, b.m), cmp.Compare(a.run, b.run), cmp.Compare(a.date, b.date))
	})
	for _, g := range keys {
		ss := groups[g]
		var buf bytes.Buffer
		cols, err := EncodeTelemetry(&buf, ss)
		if err != nil {
			return e, err
		}
		o := catalog.Object{
			Key:  lake.TelemetryKey(g.m, g.run, g.date, topic, partition, first, last),
			Kind: lake.KindTelemetry, Measurement: g.m, Run: g.run, Date: g.date,
			Rows: int64(len(ss)), Bytes: int64(buf.Len()), Columns: cols,
		}
		o.MinTime, o.MaxTime = timeRange(ss)
		if err := l.Store.Put(ctx, o.Key, &buf, o.Bytes); err != nil {
			return e, err
		}
		e.Objects = append(e.Objects, o)
	}
	if err := l.Catalog.Commit(ctx, e); err != nil {
		return e, err
	}
	return e, nil
}

func timeRange(ss []replay.Sample) (lo, hi time.Time) {
	for i, s := range ss {
		t := time.Unix(0, s.Time).UTC()
		if i == 0 || t.Before(lo) {
			lo = t
		}
		if i == 0 || t.After(hi) {
			hi = t
		}
	}
	return lo, hi
}

// RawFlush writes records (all of partition, offsets within [first,
// last], one UTC date) as a raw object of topic and commits the entry.
func (l *Lake) RawFlush(ctx context.Context, topic string, partition int32, first, last int64, recs []*kgo.Record) (catalog.Entry, error) {
	return l.recordFlush(ctx, lake.KindRaw, topic, partition, first, last, recs, nil)
}

// DeadLetterFlush writes records that could not be decoded, with reasons,
// as a dead-letter object of topic and commits the entry.
func (l *Lake) DeadLetterFlush(ctx context.Context, topic string, partition int32, first, last int64, recs []*kgo.Record, reasons []string) (catalog.Entry, error) {
	return l.recordFlush(ctx, lake.KindDeadLetter, topic, partition, first, last, recs, reasons)
}

func (l *Lake) recordFlush(ctx context.Context, kind, topic string, partition int32, first, last int64, recs []*kgo.Record, reasons []string) (catalog.Entry, error) {
	e := catalog.Entry{Topic: topic, Partition: partition, FirstOffset: first, LastOffset: last,
		Records: int64(len(recs)), Written: time.Now().UTC(), Sink: "querytest"}
	if len(recs) == 0 {
		return e, l.Catalog.Commit(ctx, e)
	}
	var buf bytes.Buffer
	var cols []string
	var err error
	if kind == lake.KindRaw {
		rows := make([]sink.RawRow, len(recs))
		for i, r := range recs {
			rows[i] = sink.RawRow{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				rows[i].Headers = append(rows[i].Headers, sink.Header{Key: h.Key, Value: h.Value})
			}
		}
		cols = []string{"_partition", "_offset", "timestamp", "key", "value", "headers"}
		err = writeAll(&buf, rows)
	} else {
		rows := make([]sink.DeadLetterRow, len(recs))
		for i, r := range recs {
			rows[i] = sink.DeadLetterRow{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Key: r.Key, Value: r.Value, Reason: reasons[i]}
		}
		cols = []string{"_partition", "_offset", "timestamp", "key", "value", "reason"}
		err = writeAll(&buf, rows)
	}
	if err != nil {
		return e, err
	}
	date := lake.Date(recs[0].Timestamp)
	o := catalog.Object{Kind: kind, Date: date, Rows: int64(len(recs)), Bytes: int64(buf.Len()), Columns: cols,
		MinTime: recs[0].Timestamp.UTC(), MaxTime: recs[0].Timestamp.UTC()}
	for _, r := range recs {
		if t := r.Timestamp.UTC(); t.Before(o.MinTime) {
			o.MinTime = t
		} else if t.After(o.MaxTime) {
			o.MaxTime = t
		}
	}
	if kind == lake.KindRaw {
		o.Key = lake.RawKey(topic, date, partition, first, last)
	} else {
		o.Key = lake.DeadLetterKey(topic, date, partition, first, last)
	}
	if err := l.Store.Put(ctx, o.Key, &buf, o.Bytes); err != nil {
		return e, err
	}
	e.Objects = []catalog.Object{o}
	return e, l.Catalog.Commit(ctx, e)
}

func writeAll[T any](w io.Writer, rows []T) error {
	pw := parquet.NewGenericWriter[T](w, parquet.Compression(&parquet.Zstd))
	if _, err := pw.Write(rows); err != nil {
		return fmt.Errorf("cannot write rows: %w", err)
	}
	return pw.Close()
}

// LocalFetcher gives the path of objects in a file store and records which
// keys were asked for, so tests can check what a reader fetched.
type LocalFetcher struct {
	Store store.Store
	mu    sync.Mutex
	keys  []string
}

// Path implements query.Fetcher.
func (f *LocalFetcher) Path(ctx context.Context, key string) (string, error) {
	f.mu.Lock()
	f.keys = append(f.keys, key)
	f.mu.Unlock()
	p, ok := store.LocalPath(f.Store, key)
	if !ok {
		return "", fmt.Errorf("%s is not a file store", f.Store)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("object %s: %w", key, store.ErrNotFound)
	}
	return p, nil
}

// Keys returns the keys fetched so far, sorted.
func (f *LocalFetcher) Keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(slices.Values(f.keys))
}
