package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
)

// RawConfig selects the raw objects a backfill re-produces.
type RawConfig struct {
	Topic    string // the topic the raw objects were written from
	From, To time.Time
	Engine   query.Options
}

// RawRecords prepares the raw objects of cfg.Topic for Run: their records
// come out in partition and offset order, so every key keeps its order.
type RawRecords struct {
	eng   *query.Engine
	view  string
	where string
	total int64
}

// OpenRaw opens the raw objects of a topic.
func OpenRaw(ctx context.Context, snap *catalog.Snapshot, cache query.Fetcher, cfg RawConfig) (*RawRecords, error) {
	var objs []catalog.Object
	for _, o := range snap.Objects(catalog.Filter{Kind: lake.KindRaw, Topic: cfg.Topic, From: cfg.From, To: cfg.To}) {
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("the lake has no raw objects of topic %s in that time range (see `simtel lake ls --kind raw`)", cfg.Topic)
	}
	eo := cfg.Engine
	eo.NoHivePartitioning = true
	eng, err := query.OpenObjects(ctx, objs, cache, query.Filter{From: cfg.From, To: cfg.To}, eo)
	if err != nil {
		return nil, err
	}
	rr := &RawRecords{eng: eng, view: lake.KindRaw + "_" + cfg.Topic}
	if err := eng.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+query.Ident(rr.view)).Scan(&rr.total); err != nil {
		eng.Close()
		return nil, eng.Explain(fmt.Errorf("cannot count the raw records of %s: %w", cfg.Topic, err))
	}
	return rr, nil
}

// Total is how many records Run will emit.
func (rr *RawRecords) Total() int64 { return rr.total }

// Close releases the engine.
func (rr *RawRecords) Close() error { return rr.eng.Close() }

// Run calls emit with every record: original key, value, headers and
// timestamp (Topic, Partition and Offset are left for the producer; the
// source partition and offset are in the record's Partition and Offset
// fields until then).
func (rr *RawRecords) Run(ctx context.Context, emit func(*kgo.Record) error) error {
	rows, err := rr.eng.Query(ctx, "SELECT _partition, _offset, timestamp, key, value, headers FROM "+query.Ident(rr.view)+" ORDER BY _partition, _offset")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			p       int32
			off     int64
			ts      time.Time
			key     []byte
			val     []byte
			headers any
		)
		if err := rows.Scan(&p, &off, &ts, &key, &val, &headers); err != nil {
			return fmt.Errorf("cannot read a raw record: %w", err)
		}
		rec := &kgo.Record{Key: key, Value: val, Timestamp: ts, Partition: p, Offset: off}
		hs, _ := headers.([]any)
		for _, h := range hs {
			m, ok := h.(map[string]any)
			if !ok {
				return fmt.Errorf("raw record at partition %d offset %d: header is %T, want a struct of key and value", p, off, h)
			}
			k, _ := m["key"].(string)
			v, _ := m["value"].([]byte)
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: v})
		}
		if err := emit(rec); err != nil {
			return err
		}
	}
	return rr.eng.Explain(rows.Err())
}
