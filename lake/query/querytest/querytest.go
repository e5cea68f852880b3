// Package querytest writes lake objects (telemetry, raw and dead-letter
// Parquet) through lake/schema, the writer the sink uses, and commits
// catalog entries for them, so the tests and benchmarks of lake readers
// can build a lake without running a sink.
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
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/schema"
	"github.com/simtel/simtel/lake/store"
)

// EncodeTelemetry writes samples (all of one measurement, of flush o) as
// one telemetry object, exactly as the sink writes the same samples (see
// lake/schema). It returns the object's column names.
func EncodeTelemetry(w io.Writer, o schema.Origin, samples []replay.Sample) ([]string, error) {
	if len(samples) == 0 {
		return nil, fmt.Errorf("no samples")
	}
	rows := make([]schema.Row, len(samples))
	for i, s := range samples {
		rows[i] = schema.Row{TimeNS: s.Time, Partition: s.Partition, Offset: s.Offset, Tags: s.Tags, Fields: s.Fields}
	}
	l, err := schema.Encode(w, samples[0].Measurement, o, rows)
	if err != nil {
		return nil, fmt.Errorf("cannot write telemetry object: %w", err)
	}
	return l.Names(), nil
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
		cols, err := EncodeTelemetry(&buf, schema.Origin{Topic: topic, Partition: partition, First: first, Last: last}, ss)
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
	origin := schema.Origin{Topic: topic, Partition: partition, First: first, Last: last}
	var data []byte
	var cols []string
	var err error
	if kind == lake.KindRaw {
		rows := make([]schema.RawRow, len(recs))
		for i, r := range recs {
			rows[i] = schema.RawRow{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				rows[i].Headers = append(rows[i].Headers, schema.Header{Key: h.Key, Value: h.Value})
			}
		}
		cols = schema.RawColumns
		data, err = schema.EncodeRecords(rows, origin)
	} else {
		rows := make([]schema.DeadLetterRow, len(recs))
		for i, r := range recs {
			rows[i] = schema.DeadLetterRow{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Key: r.Key, Value: r.Value, Reason: reasons[i]}
		}
		cols = schema.DeadLetterColumns
		data, err = schema.EncodeRecords(rows, origin)
	}
	if err != nil {
		return e, fmt.Errorf("cannot write rows: %w", err)
	}
	date := lake.Date(recs[0].Timestamp)
	o := catalog.Object{Kind: kind, Date: date, Rows: int64(len(recs)), Bytes: int64(len(data)), Columns: cols,
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
	if err := l.Store.Put(ctx, o.Key, bytes.NewReader(data), o.Bytes); err != nil {
		return e, err
	}
	e.Objects = []catalog.Object{o}
	return e, l.Catalog.Commit(ctx, e)
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

// QueryAll runs q on e and returns every row's values as the driver gives
// them, failing the test on an error.
func QueryAll(t testing.TB, e *query.Engine, q string) [][]any {
	t.Helper()
	rows, err := e.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
