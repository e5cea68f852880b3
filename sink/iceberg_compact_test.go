package sink_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/compact"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/store"
)

// TestSinkIcebergCompactionKill SIGKILLs a sink that compacts with
// --iceberg-catalog right after a compaction's catalog commit, before its
// Iceberg rewrite. The restarted sink's compactor rewrites the table for
// it, and iceberg-go's scans hold every produced record exactly once.
func TestSinkIcebergCompactionKill(t *testing.T) {
	e := newEnv(t, false, 2)
	st := e.store()
	cat := "sqlite:" + filepath.Join(e.dir, "iceberg.db")
	flags := append([]string{"--iceberg-catalog", cat}, compactArgs...)
	p := e.startSink(append(flags, "--compact-pause", "20s")...)
	e.produce(6_000, 1_001, []string{"c"}, 301)
	waitLogFor(t, p, "compaction paused after commit", 4*time.Minute)
	p.Kill()
	t.Logf("killed after a compaction's catalog commit: the tables hold %d rows", e.icebergRows(cat))
	p2 := e.startSink(flags...)
	e.waitCommitted(st, 4*time.Minute, p, p2)
	waitLogFor(t, p2, "iceberg_reconciled=1", 2*time.Minute)
	if err := p2.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v\n%s", err, tail(sinkLog(t, p2), 30))
	}
	if got := e.icebergRows(cat); got != len(e.produced) {
		t.Fatalf("the Iceberg tables hold %d rows, want %d", got, len(e.produced))
	}
}

func TestIcebergCompactFile(t *testing.T) { testIcebergCompact(t, false) }
func TestIcebergCompactS3(t *testing.T)   { testIcebergCompact(t, true) }

// testIcebergCompact: N samples in flushes committed to Iceberg; a
// compactor killed between its catalog commit and its Iceberg rewrite
// leaves the table's N rows as they were; run again, it rewrites the
// table for that compaction and merges the rest, each in one snapshot:
// still exactly N rows, in fewer files. The snapshots before the
// compaction and before the last flush read as they did. A flush after
// the compaction is added once.
func testIcebergCompact(t *testing.T, s3 bool) {
	e := newLakeEnv(t, s3)
	const perFlush, flushes = 40, 6
	var entries []catalog.Entry
	for i := range flushes {
		entries = append(entries, e.flush(samples(perFlush, i*perFlush, i >= 3)...))
	}
	const n = perFlush * flushes
	if err := e.ice.Commit(e.ctx, entries[:flushes-1], typesOf, nil); err != nil {
		t.Fatal(err)
	}
	beforeLast := e.current("cpu")
	if err := e.ice.Commit(e.ctx, entries[flushes-1:], typesOf, nil); err != nil {
		t.Fatal(err)
	}
	beforeCompaction := e.current("cpu")
	originals := e.dataFiles("cpu")

	// The compactor dies right after its first catalog commit.
	killed := errors.New("killed")
	cfg := compact.Config{MinFiles: 2, Iceberg: e.ice, AfterCommit: func(string) error { return killed }}
	cache := store.NewCache(e.st, t.TempDir(), 0)
	if _, err := compact.Run(e.ctx, e.st, e.cat, cache, cfg); !errors.Is(err, killed) {
		t.Fatalf("the killed compaction returned %v", err)
	}
	snap, err := e.cat.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Compactions) != 1 {
		t.Fatalf("the catalog has %d compactions, want 1", len(snap.Compactions))
	}
	if got := e.current("cpu"); got != beforeCompaction {
		t.Fatalf("the killed compaction changed the table's snapshot to %d", got)
	}
	e.exactly(e.scan("cpu"), n)

	// Run again, as a restarted compactor: the first compaction is
	// rewritten into the table, the other groups merged.
	e.reopen()
	cfg.Iceberg, cfg.AfterCommit = e.ice, nil
	res, err := compact.Run(e.ctx, e.st, e.cat, cache, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reconciled != 1 || res.Groups == 0 {
		t.Fatalf("the second run reconciled %d and merged %d groups, want 1 and some", res.Reconciled, res.Groups)
	}
	e.exactly(e.scan("cpu"), n)
	after := e.dataFiles("cpu")
	if len(after) >= len(originals) {
		t.Fatalf("the table has %d data files after compaction, %d before", len(after), len(originals))
	}
	snap, err = e.cat.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var visible []string
	for _, o := range snap.Objects(catalog.Filter{Kind: "telemetry"}) {
		visible = append(visible, o.Key)
	}
	slices.Sort(visible)
	if !slices.Equal(after, visible) {
		t.Fatalf("the table holds %v, simtel's catalog shows %v", after, visible)
	}
	// One snapshot per compaction, each a replace naming its record.
	tbl, err := e.ice.Load(e.ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	rewrites := 0
	for _, s := range table.AncestorsOf(tbl.CurrentSnapshot().SnapshotID, tbl.Metadata().SnapshotByID) {
		if s.SnapshotID == beforeCompaction {
			break
		}
		if s.Summary.Operation != table.OpReplace || s.Summary.Properties[iceberg.SummaryCompaction] == "" {
			t.Errorf("snapshot %d after the compaction is %s %v", s.SnapshotID, s.Summary.Operation, s.Summary.Properties)
		}
		rewrites++
	}
	if rewrites != len(snap.Compactions) {
		t.Errorf("%d rewrite snapshots for %d compactions", rewrites, len(snap.Compactions))
	}

	// Time travel: the older snapshots read their files, which are still
	// in the lake.
	if got := e.dataFilesAt("cpu", beforeCompaction); !slices.Equal(got, originals) {
		t.Errorf("the snapshot before the compaction holds %v, it held %v", got, originals)
	}
	e.exactly(e.scanAt("cpu", beforeCompaction), n)
	e.exactly(e.scanAt("cpu", beforeLast), n-perFlush)
	for _, k := range originals {
		if _, err := e.st.Stat(e.ctx, k); err != nil {
			t.Errorf("replaced object %s is gone while a snapshot names it: %v", k, err)
		}
	}

	// The sink goes on: a flush after the compaction is added once, and a
	// restart's reconcile adds nothing.
	last := e.flush(samples(perFlush, n, true)...)
	if err := e.ice.Commit(e.ctx, []catalog.Entry{last}, typesOf, nil); err != nil {
		t.Fatal(err)
	}
	e.restart()
	e.exactly(e.scan("cpu"), n+perFlush)
	// A compaction run with nothing left to merge changes nothing.
	cur := e.current("cpu")
	cfg.MinFiles, cfg.Iceberg = 100, e.ice
	if _, err := compact.Run(e.ctx, e.st, e.cat, cache, cfg); err != nil {
		t.Fatal(err)
	}
	if got := e.current("cpu"); got != cur {
		t.Errorf("an idle compaction run committed snapshot %d", got)
	}
}

// current is the id of a table's current snapshot.
func (e *lakeEnv) current(name string) int64 {
	e.t.Helper()
	tbl, err := e.ice.Load(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl.CurrentSnapshot().SnapshotID
}

// dataFiles lists the lake keys of a table's current data files, sorted.
func (e *lakeEnv) dataFiles(name string) []string {
	e.t.Helper()
	return e.dataFilesAt(name, e.current(name))
}

func (e *lakeEnv) dataFilesAt(name string, snapshot int64) []string {
	e.t.Helper()
	files, err := e.ice.FilesAt(e.ctx, name, snapshot)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		out = append(out, f.Key)
	}
	slices.Sort(out)
	return out
}

// scanAt reads a table as of a snapshot with iceberg-go.
func (e *lakeEnv) scanAt(name string, snapshot int64) arrow.Table {
	e.t.Helper()
	tbl, err := e.ice.Load(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	at, err := tbl.Scan(table.WithSnapshotID(snapshot)).ToArrowTable(e.ctx)
	if err != nil {
		e.t.Fatalf("scan %s at %d: %v", name, snapshot, err)
	}
	e.t.Cleanup(at.Release)
	return at
}

// exactly fails unless a scan has offsets 0..n-1, each once.
func (e *lakeEnv) exactly(at arrow.Table, n int) {
	e.t.Helper()
	offs := e.offsets(at)
	if len(offs) != n || at.NumRows() != int64(n) {
		e.t.Fatalf("%d rows with %d distinct offsets, want %d", at.NumRows(), len(offs), n)
	}
	for i := range int64(n) {
		if _, ok := offs[i]; !ok {
			e.t.Fatalf("offset %d is missing", i)
		}
	}
}
