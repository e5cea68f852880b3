package sink_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/sink"
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

// TestSinkIcebergBatch: a sink holding several partitions commits their
// flushes of one interval to Iceberg together, one snapshot per table
// whose summary lists every partition's range. Killed after those flushes
// are in simtel's catalog and before their Iceberg commit, it has
// committed no Kafka offset for them, and the restarted sink leaves every
// record of every partition in the tables exactly once.
func TestSinkIcebergBatch(t *testing.T) {
	e := newEnv(t, false, 3)
	cat := "sqlite:" + filepath.Join(e.dir, "iceberg.db")
	e.produce(12_000, 1_000, []string{"r1", "r2"}, 5)
	flags := []string{"--iceberg-catalog", cat, "--flush-rows", "2000", "--flush-age", "2s"}
	p := e.startSink(append(flags, "--iceberg-pause", "5m")...)
	waitLogFor(t, p, "iceberg commit paused", 2*time.Minute)
	p.Kill()
	m := regexp.MustCompile(`iceberg commit paused.* partitions=(\d+)`).FindStringSubmatch(sinkLog(t, p))
	if m == nil || m[1] == "1" {
		t.Fatalf("the paused Iceberg commit does not cover several partitions: %v\n%s", m, tail(sinkLog(t, p), 30))
	}
	st := e.store()
	if n := e.committedRecords(st); n <= 0 {
		t.Fatalf("the catalog holds %d records at the kill, want the flushes of the paused commit", n)
	}
	if got := e.icebergRows(cat); got != 0 {
		t.Fatalf("the tables hold %d rows before the first Iceberg commit", got)
	}
	adm := kadm.NewClient(e.client())
	defer adm.Close()
	offs, err := adm.FetchOffsets(context.Background(), sink.DefaultGroup)
	if err != nil {
		t.Fatal(err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			t.Errorf("Kafka offset %d of partition %d committed before the Iceberg commit covering it", o.At, o.Partition)
		}
	})

	p2 := e.startSink(flags...)
	e.waitCommitted(st, 4*time.Minute, p, p2)
	// More records while p2 runs: its own batches.
	e.produce(6_000, 0, []string{"r3"}, 6)
	e.waitCommitted(st, 4*time.Minute, p, p2)
	if err := p2.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v\n%s", err, tail(sinkLog(t, p2), 30))
	}
	if got := e.icebergRows(cat); got != len(e.produced) {
		t.Fatalf("the Iceberg tables hold %d rows, want %d", got, len(e.produced))
	}
	// The reconcile of the killed sink's flushes and p2's own batches.
	if n := e.multiPartitionSnapshots(cat, "cpu"); n < 2 {
		t.Fatalf("%d snapshots of cpu add flushes of several partitions, want at least 2", n)
	}
}

// multiPartitionSnapshots counts the snapshots of a table whose summary
// lists flushes of more than one partition.
func (e *env) multiPartitionSnapshots(catalogURL, name string) int {
	e.t.Helper()
	ctx := context.Background()
	lk, err := iceberg.Open(ctx, iceberg.Options{Catalog: catalogURL, Store: e.store()})
	if err != nil {
		e.t.Fatal(err)
	}
	defer lk.Close()
	tbl, err := lk.Load(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, s := range tbl.Metadata().Snapshots() {
		if s.Summary == nil {
			continue
		}
		parts := map[string]bool{}
		for _, r := range strings.Split(s.Summary.Properties[iceberg.SummaryRanges], ",") {
			if tp, _, ok := strings.Cut(r, ":"); ok {
				parts[tp] = true
			}
		}
		e.t.Logf("snapshot %d: %s", s.SnapshotID, s.Summary.Properties[iceberg.SummaryRanges])
		if len(parts) > 1 {
			n++
		}
	}
	return n
}
