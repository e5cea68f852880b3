package sink_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
	"github.com/simtel/simtel/sink"
)

// lakeEnv is a lake (local directory or versitygw) with simtel's catalog
// and an Iceberg catalog on a SQLite file.
type lakeEnv struct {
	t    *testing.T
	ctx  context.Context
	st   store.Store
	cat  *catalog.Catalog
	ice  *iceberg.Lake
	next [2]int64 // next offset of partitions 0 and 1
	opts iceberg.Options
}

func newLakeEnv(t *testing.T, s3 bool) *lakeEnv {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	st, _, endpoint := storetest.Open(t, s3)
	e := &lakeEnv{t: t, ctx: ctx, st: st, cat: catalog.New(st)}
	// The types the sink fixes at first sight; Reconcile reads them.
	for m, fields := range types {
		for f, typ := range fields {
			if _, err := e.cat.ClaimFieldType(ctx, catalog.FieldType{Measurement: m, Field: f, Type: typ}); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.opts = iceberg.Options{Catalog: "sqlite:" + filepath.Join(dir, "iceberg.db"), Store: st, S3Endpoint: endpoint}
	e.reopen()
	return e
}

// restart is a sink restarting after it died between its catalog and
// Iceberg commits: the catalog opened again and partition 0 reconciled.
func (e *lakeEnv) restart() {
	e.t.Helper()
	e.reopen()
	if err := e.reconcile(); err != nil {
		e.t.Fatal(err)
	}
}

// reconcile reconciles partition 0 with simtel's catalog as it is now.
func (e *lakeEnv) reconcile() error {
	snap, err := e.cat.Load(e.ctx)
	if err != nil {
		return err
	}
	return e.ice.Reconcile(e.ctx, snap, "telemetry", []int32{0})
}

// reopen opens the Iceberg catalog again, as a restarted sink does.
func (e *lakeEnv) reopen() {
	e.t.Helper()
	if e.ice != nil {
		e.ice.Close()
	}
	ice, err := iceberg.Open(e.ctx, e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.ice = ice
	e.t.Cleanup(func() { ice.Close() })
}

var types = map[string]map[string]string{
	"cpu": {"value": catalog.TypeFloat, "count": catalog.TypeInteger, "big": catalog.TypeUnsigned, "extra": catalog.TypeFloat},
}

func typesOf(m string) map[string]string { return types[m] }

// flush writes lines as one flush of partition 0 into the lake and
// simtel's catalog (what the sink does before its Iceberg commit).
func (e *lakeEnv) flush(lines ...string) catalog.Entry {
	e.t.Helper()
	return e.flushPartition(0, lines...)
}

func (e *lakeEnv) flushPartition(p int32, lines ...string) catalog.Entry {
	e.t.Helper()
	enc := sink.NewEncoder("telemetry", p, true)
	first := e.next[p]
	for _, l := range lines {
		enc.Add(&sink.Record{Offset: e.next[p], Timestamp: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Value: []byte(l)})
		e.next[p]++
	}
	objs, err := enc.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	return e.store(catalog.Entry{Topic: "telemetry", Partition: p, FirstOffset: first, LastOffset: e.next[p] - 1, Records: int64(len(lines))}, objs)
}

// store puts a flush's objects into the lake and commits entry, which
// names them, to simtel's catalog: the sink's order, objects first, so
// that the catalog never names a missing object.
func (e *lakeEnv) store(entry catalog.Entry, objs []sink.Object) catalog.Entry {
	e.t.Helper()
	entry.Written = time.Now().UTC()
	for _, o := range objs {
		if err := e.st.Put(e.ctx, o.Key, bytes.NewReader(o.Data), int64(len(o.Data))); err != nil {
			e.t.Fatal(err)
		}
		entry.Objects = append(entry.Objects, o.Entry)
	}
	if err := e.cat.Commit(e.ctx, entry); err != nil {
		e.t.Fatal(err)
	}
	return entry
}

// samples are n cpu lines over two runs and two days.
func samples(n, from int, extra bool) []string {
	var out []string
	t0 := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC).UnixNano()
	for i := from; i < from+n; i++ {
		l := fmt.Sprintf("cpu,host=n%d,run=r%d value=%d.5,count=%di,big=%du", i%3, i%2, i, i, i)
		if extra {
			l += fmt.Sprintf(",extra=%d.25", i)
		}
		out = append(out, fmt.Sprintf("%s %d", l, t0+int64(i)*int64(10*time.Millisecond)))
	}
	return out
}

// scan reads the current snapshot of a table with iceberg-go.
func (e *lakeEnv) scan(name string) arrow.Table {
	e.t.Helper()
	tbl, err := e.ice.Load(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	at, err := tbl.Scan().ToArrowTable(e.ctx)
	if err != nil {
		e.t.Fatalf("scan %s: %v", name, err)
	}
	e.t.Cleanup(at.Release)
	return at
}

// offsets returns the _offset column of a scan, failing on a repeat.
func (e *lakeEnv) offsets(at arrow.Table) map[int64]int {
	e.t.Helper()
	idx := at.Schema().FieldIndices("_offset")
	if len(idx) != 1 {
		e.t.Fatalf("no _offset column in %v", at.Schema())
	}
	out := map[int64]int{}
	row := 0
	for _, ch := range at.Column(idx[0]).Data().Chunks() {
		for _, v := range ch.(*array.Int64).Int64Values() {
			if _, dup := out[v]; dup {
				e.t.Fatalf("offset %d appears twice in the table", v)
			}
			out[v] = row
			row++
		}
	}
	return out
}

func TestIcebergExactlyOnceFile(t *testing.T) { testIcebergExactlyOnce(t, false) }
func TestIcebergExactlyOnceS3(t *testing.T)   { testIcebergExactlyOnce(t, true) }

// testIcebergExactlyOnce: flushes committed to simtel's catalog, some of them
// never committed to Iceberg (the sink died in between); a restarted
// sink's Reconcile adds exactly those, and a late commit of an entry the
// table holds (a sink that lost the partition) adds nothing.
func testIcebergExactlyOnce(t *testing.T, s3 bool) {
	e := newLakeEnv(t, s3)
	var entries []catalog.Entry
	for i := range 5 {
		entries = append(entries, e.flush(samples(40, i*40, false)...))
	}
	if err := e.ice.Commit(e.ctx, entries[:2], typesOf, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.scan("cpu").NumRows(); got != 80 {
		t.Fatalf("after two commits the table has %d rows, want 80", got)
	}
	// The sink dies after flushes 3-5 reached simtel's catalog only.
	e.restart()
	at := e.scan("cpu")
	if at.NumRows() != 200 {
		t.Fatalf("after reconciling the table has %d rows, want 200", at.NumRows())
	}
	if offs := e.offsets(at); len(offs) != 200 {
		t.Fatalf("%d distinct offsets, want 200", len(offs))
	}
	// Again, and the old owner's late commit: nothing added.
	if err := e.reconcile(); err != nil {
		t.Fatal(err)
	}
	if err := e.ice.Commit(e.ctx, entries[2:3], typesOf, nil); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if err := e.ice.Commit(e.ctx, entries, typesOf, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.scan("cpu").NumRows(); got != 200 {
		t.Fatalf("after repeated commits the table has %d rows, want 200", got)
	}
	tbl, err := e.ice.Load(e.ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	if r := tbl.CurrentSnapshot().Summary.Properties[iceberg.SummaryRanges]; r != "telemetry/0:80-119,telemetry/0:120-159,telemetry/0:160-199" {
		t.Errorf("the reconciling snapshot's ranges are %q", r)
	}
	if spec := tbl.Spec(); spec.NumFields() != 2 {
		n := spec.NumFields()
		t.Errorf("the table has %d partition fields, want 2 (run, day(time))", n)
	}
	if v := tbl.Metadata().Version(); v != 2 {
		t.Errorf("format version %d, want 2", v)
	}
}

// TestNewFieldAndDeadLetters: a field added later is a new column that
// older rows read as null; undecodable lines land in the dlq table with
// their reason and offset.
func TestIcebergNewFieldAndDeadLetters(t *testing.T) {
	e := newLakeEnv(t, false)
	first := e.flush(samples(10, 0, false)...)
	// A line cut short, and no line protocol at all. (A value of another
	// type than its field's is a dead letter only with the sink's field
	// types; sink's TestSinkIceberg* cover it.)
	lines := append(samples(10, 10, true), "cpu,host=a value=", "not line protocol")
	second := e.flush(lines...)
	if err := e.ice.Commit(e.ctx, []catalog.Entry{first, second}, typesOf, nil); err != nil {
		t.Fatal(err)
	}
	at := e.scan("cpu")
	if at.NumRows() != 20 {
		t.Fatalf("table has %d rows, want 20", at.NumRows())
	}
	idx := at.Schema().FieldIndices("extra")
	if len(idx) != 1 {
		t.Fatalf("no column extra in %v", at.Schema())
	}
	rowOf := e.offsets(at)
	var extra []*array.Float64
	for _, ch := range at.Column(idx[0]).Data().Chunks() {
		extra = append(extra, ch.(*array.Float64))
	}
	get := func(row int) (float64, bool) {
		for _, a := range extra {
			if row < a.Len() {
				return a.Value(row), a.IsValid(row)
			}
			row -= a.Len()
		}
		t.Fatalf("row %d out of range", row)
		return 0, false
	}
	for off, row := range rowOf {
		v, ok := get(row)
		switch {
		case off < 10 && ok:
			t.Errorf("offset %d (before the field existed) reads extra=%v, want null", off, v)
		case off >= 10 && (!ok || v != float64(off)+0.25):
			t.Errorf("offset %d reads extra=%v (valid %v), want %v", off, v, ok, float64(off)+0.25)
		}
	}
	dlq := e.scan(iceberg.DLQ)
	if dlq.NumRows() != 2 {
		t.Fatalf("dlq has %d rows, want 2", dlq.NumRows())
	}
	offs := e.offsets(dlq)
	for _, want := range []int64{20, 21} {
		if _, ok := offs[want]; !ok {
			t.Errorf("offset %d missing from the dlq: %v", want, offs)
		}
	}
	ri := dlq.Schema().FieldIndices("reason")
	if len(ri) != 1 {
		t.Fatalf("no reason column in the dlq: %v", dlq.Schema())
	}
	reasons := dlq.Column(ri[0]).Data().Chunk(0).(*array.String)
	if r := reasons.Value(offs[20]); !strings.Contains(r, "value") {
		t.Errorf("the reason of the line cut short is %q", r)
	}
}

// TestConcurrentSinks: two sinks (two catalog handles on one database)
// commit flushes of different partitions to the same table at the same
// time; commits that lose the race are rebuilt, and every row is there
// once.
func TestIcebergConcurrentSinks(t *testing.T) {
	e := newLakeEnv(t, false)
	other, err := iceberg.Open(e.ctx, e.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// Flushes of partitions 0 and 1, alternating.
	var byPart [2][]catalog.Entry
	for i := range 12 {
		p := int32(i % 2)
		byPart[p] = append(byPart[p], e.flushPartition(p, samples(15, i*15, i >= 6)...))
	}
	errs := make(chan error, 2)
	for p, lk := range []*iceberg.Lake{e.ice, other} {
		go func() {
			for _, en := range byPart[p] {
				if err := lk.Commit(e.ctx, []catalog.Entry{en}, typesOf, nil); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	at := e.scan("cpu")
	if at.NumRows() != 180 {
		t.Fatalf("the table has %d rows, want 180", at.NumRows())
	}
	seen := map[[2]int64]bool{}
	pi, oi := at.Schema().FieldIndices("_partition")[0], at.Schema().FieldIndices("_offset")[0]
	for c, ch := range at.Column(pi).Data().Chunks() {
		ps, os := ch.(*array.Int32), at.Column(oi).Data().Chunk(c).(*array.Int64)
		for i := range ps.Len() {
			k := [2]int64{int64(ps.Value(i)), os.Value(i)}
			if seen[k] {
				t.Fatalf("record %v twice", k)
			}
			seen[k] = true
		}
	}
	if len(seen) != 180 {
		t.Fatalf("%d distinct records, want 180", len(seen))
	}
}
