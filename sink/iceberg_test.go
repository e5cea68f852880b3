package sink_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake/iceberg"
)

func TestSinkIcebergKillFile(t *testing.T) { testSinkIcebergKill(t, false) }
func TestSinkIcebergKillS3(t *testing.T)   { testSinkIcebergKill(t, true) }

// testSinkIcebergKill SIGKILLs the sink between a flush's catalog commit
// and its Iceberg commit. The restarted sink reconciles the tables before
// it consumes: iceberg-go's scans of the current snapshots hold every
// produced record exactly once, telemetry or dead letter.
func testSinkIcebergKill(t *testing.T, s3 bool) {
	e := newEnv(t, s3, 2)
	cat := "sqlite:" + filepath.Join(e.dir, "iceberg.db")
	e.produce(12_000, 1_000, []string{"r1", "r2"}, 3)
	e.produceTypeConflicts(20)
	flags := []string{"--iceberg-catalog", cat, "--flush-rows", "4000", "--flush-age", "2s"}
	p := e.startSink(append(flags, "--iceberg-pause", "5m")...)
	waitLogFor(t, p, "iceberg commit paused", 2*time.Minute)
	p.Kill()
	st := e.store()
	before := e.icebergRows(cat)
	t.Logf("killed before an Iceberg commit: catalog holds %d records, the tables %d rows", e.committedRecords(st), before)
	p2 := e.startSink(flags...)
	e.waitCommitted(st, 4*time.Minute, p, p2)
	if err := p2.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v\n%s", err, tail(sinkLog(t, p2), 30))
	}
	if got := e.icebergRows(cat); got != len(e.produced) {
		t.Fatalf("the Iceberg tables hold %d rows, want %d", got, len(e.produced))
	}
}

// produceTypeConflicts writes n cpu samples whose value is an integer
// (produce's are floats, fixed first): they go to the dead letters.
func (e *env) produceTypeConflicts(n int) {
	e.t.Helper()
	cl := e.client()
	defer cl.Close()
	ns := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixNano()
	var recs []*kgo.Record
	for i := range n {
		v := fmt.Sprintf("cpu,host=n1,run=r1 value=%di %d", i, ns+int64(i))
		recs = append(recs, &kgo.Record{Value: []byte(v), Timestamp: time.Unix(0, ns)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		e.t.Fatalf("produce: %v", err)
	}
	for _, r := range res {
		e.produced[po{r.Record.Partition, r.Record.Offset}] = sample{ns: ns, bad: true}
	}
}

// icebergRows scans every table of the telemetry namespace with iceberg-go
// and returns the row count, failing on a record seen twice or never
// produced, and on a good record in the dead letters or a bad one outside.
func (e *env) icebergRows(catalogURL string) int {
	e.t.Helper()
	ctx := context.Background()
	opts := iceberg.Options{Catalog: catalogURL, Store: e.store()}
	if e.s3 != nil {
		opts.S3Endpoint = e.s3.Endpoint
	}
	lk, err := iceberg.Open(ctx, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	defer lk.Close()
	seen := map[po]bool{}
	for id, err := range lk.Catalog().ListTables(ctx, []string{iceberg.Namespace}) {
		if err != nil {
			e.t.Fatal(err)
		}
		name := id[len(id)-1]
		tbl, err := lk.Load(ctx, name)
		if err != nil {
			e.t.Fatal(err)
		}
		if tbl.CurrentSnapshot() == nil {
			continue
		}
		at, err := tbl.Scan().ToArrowTable(ctx)
		if err != nil {
			e.t.Fatalf("scan %s: %v", name, err)
		}
		pi, oi := at.Schema().FieldIndices("_partition"), at.Schema().FieldIndices("_offset")
		pc, oc := at.Column(pi[0]).Data().Chunks(), at.Column(oi[0]).Data().Chunks()
		for c := range pc {
			ps, os := pc[c].(*array.Int32), oc[c].(*array.Int64)
			for i := 0; i < ps.Len(); i++ {
				k := po{ps.Value(i), os.Value(i)}
				s, ok := e.produced[k]
				switch {
				case !ok:
					e.t.Fatalf("table %s has record %d/%d that was never produced", name, k.p, k.o)
				case seen[k]:
					e.t.Fatalf("record %d/%d is in the tables twice (again in %s)", k.p, k.o, name)
				case s.bad != (name == iceberg.DLQ):
					e.t.Fatalf("record %d/%d (malformed: %v) is in table %s", k.p, k.o, s.bad, name)
				}
				seen[k] = true
			}
		}
		at.Release()
	}
	return len(seen)
}
