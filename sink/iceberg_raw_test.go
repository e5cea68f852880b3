package sink_test

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/sink"
)

// flushRaw writes records as one flush of partition 0 of a topic the sink
// keeps raw, into the lake and simtel's catalog.
func (e *lakeEnv) flushRaw(topic string, first int64, values ...string) catalog.Entry {
	e.t.Helper()
	enc := sink.NewEncoder(topic, 0, false)
	for i, v := range values {
		enc.Add(&sink.Record{Offset: first + int64(i), Timestamp: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Key: []byte("k"), Value: []byte(v)})
	}
	objs, err := enc.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, o := range objs {
		if o.Entry.Kind != lake.KindRaw {
			e.t.Fatalf("object %s of a raw topic is %s", o.Key, o.Entry.Kind)
		}
	}
	return e.store(catalog.Entry{Topic: topic, Partition: 0, FirstOffset: first, LastOffset: first + int64(len(values)) - 1, Records: int64(len(values))}, objs)
}

// A record of a raw topic lands in raw.<topic> exactly once, though its
// flush is committed, reconciled after a restart and committed again.
func TestIcebergRawTopicTable(t *testing.T) {
	e := newLakeEnv(t, false)
	entry := e.flushRaw("syslog", 0, "first line", "second line")
	if err := e.ice.Commit(e.ctx, []catalog.Entry{entry}, typesOf, nil); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	snap, err := e.cat.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ice.Reconcile(e.ctx, snap, "syslog", []int32{0}); err != nil {
		t.Fatal(err)
	}
	if err := e.ice.Commit(e.ctx, []catalog.Entry{entry}, typesOf, nil); err != nil {
		t.Fatal(err)
	}
	more := e.flushRaw("syslog", 2, "third line")
	if err := e.ice.Commit(e.ctx, []catalog.Entry{entry, more}, typesOf, nil); err != nil {
		t.Fatal(err)
	}

	tbl, err := e.ice.LoadRaw(e.ctx, "syslog")
	if err != nil {
		t.Fatal(err)
	}
	at, err := tbl.Scan().ToArrowTable(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	if at.NumRows() != 3 {
		t.Fatalf("raw.syslog has %d rows, want 3", at.NumRows())
	}
	got := map[string]int{}
	for _, ch := range at.Column(at.Schema().FieldIndices("value")[0]).Data().Chunks() {
		b := ch.(*array.Binary)
		for i := range b.Len() {
			got[string(b.Value(i))]++
		}
	}
	for _, v := range []string{"first line", "second line", "third line"} {
		if got[v] != 1 {
			t.Errorf("value %q appears %d times in raw.syslog, want once", v, got[v])
		}
	}
	// The telemetry namespace holds no table of the raw topic.
	if _, err := e.ice.Load(e.ctx, "syslog"); err == nil {
		t.Error("telemetry.syslog exists; raw records belong in raw.syslog only")
	}
}
