package sink_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/store"
)

// compactArgs make many small flushes and compact them quickly.
var compactArgs = []string{"--flush-rows", "400", "--flush-age", "200ms",
	"--compact-interval", "1s", "--compact-settle", "1ms", "--compact-min-files", "4",
	"--compact-delete-delay", "2s", "--compact-target-size", "64MiB"}

// lakeState is what readers of the catalog see.
type lakeState struct {
	flushed   int // telemetry objects written by flushes
	visible   int // telemetry objects the catalog shows now
	maxGroup  int // most visible objects in one measurement/run/day/partition
	stored    int // telemetry objects in the store (visible + not yet deleted)
	leftover  int // replaced objects still in the store
	merged    int // compactions applied
	committed int64
}

// snapshot loads the catalog of st.
func (e *env) snapshot(st store.Store) *catalog.Snapshot {
	e.t.Helper()
	snap, err := catalog.New(st).Load(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return snap
}

func (e *env) lakeState(st store.Store) lakeState {
	e.t.Helper()
	ctx := context.Background()
	snap := e.snapshot(st)
	var s lakeState
	for _, en := range snap.Entries {
		s.committed += en.Records
		for _, o := range en.Objects {
			if o.Kind == lake.KindTelemetry {
				s.flushed++
			}
		}
	}
	groups := map[string]int{}
	for _, o := range snap.Objects(catalog.Filter{Kind: lake.KindTelemetry}) {
		s.visible++
		g := o.Key[:strings.LastIndexByte(o.Key, '/')] + "/" + strings.Join(strings.Split(o.Key[strings.LastIndexByte(o.Key, '/')+1:], "-")[:2], "-")
		groups[g]++
		s.maxGroup = max(s.maxGroup, groups[g])
	}
	objs, err := st.List(ctx, "telemetry/")
	if err != nil {
		e.t.Fatal(err)
	}
	s.stored = len(objs)
	s.merged = len(snap.Compactions)
	inStore := map[string]bool{}
	for _, o := range objs {
		inStore[o.Key] = true
	}
	for _, cp := range snap.Compactions {
		for _, k := range cp.Replaced {
			if inStore[k] {
				s.leftover++
			}
		}
	}
	return s
}

// verifyCatalog reads every object the catalog shows (not a listing: the
// store may still hold replaced objects) and checks each produced record
// is in exactly one row, then counts the same through DuckDB.
func (e *env) verifyCatalog(st store.Store) {
	e.t.Helper()
	snap := e.snapshot(st)
	seen := map[po]string{}
	for _, o := range snap.Objects(catalog.Filter{}) {
		for _, row := range e.objectRows(st, o.Key) {
			k, s := e.see(seen, o.Key, row)
			if o.Kind == lake.KindTelemetry && (s.bad || row["_time_ns"].(int64) != s.ns || row["value"].(float64) != s.value) {
				e.t.Fatalf("record %d/%d in %s: row %v, want time %d value %v (bad %v)", k.p, k.o, o.Key, row, s.ns, s.value, s.bad)
			}
		}
	}
	if len(seen) != len(e.produced) {
		e.t.Fatalf("the catalog's objects hold %d records, want %d", len(seen), len(e.produced))
	}
	e.t.Logf("the catalog's objects hold all %d records exactly once", len(seen))
	e.verifyDuckDB(st)
}

// waitCompacted waits until compaction has merged the flushes into at
// most maxGroup objects per group and deleted every replaced object. (A
// merged object whose compaction was killed before its commit stays in
// the store as an orphan no reader is shown.)
func (e *env) waitCompacted(st store.Store, maxGroup int, d time.Duration, procs ...*testutil.Proc) lakeState {
	e.t.Helper()
	defer e.logTailOnFailure(procs...)
	var s lakeState
	testutil.WaitFor(e.t, d, "lake compacted", func() error {
		s = e.lakeState(st)
		if s.committed != int64(len(e.produced)) || s.maxGroup > maxGroup || s.leftover != 0 || s.merged == 0 {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	return s
}

func TestSinkCompactsFile(t *testing.T) { testSinkCompacts(t, false) }
func TestSinkCompactsS3(t *testing.T)   { testSinkCompacts(t, true) }

// testSinkCompacts: many small flushes, compacted in the background while
// samples keep coming, to a few objects holding every record once.
func testSinkCompacts(t *testing.T, s3 bool) {
	e := newEnv(t, s3, 2)
	httpAddr := testutil.FreePort(t)
	p := e.startSink(append(compactArgs, "--http-listen", httpAddr)...)
	st := e.store()
	for round := range 6 {
		e.produce(4_000, 997, []string{"r1", "r2"}, uint64(100+round))
		time.Sleep(700 * time.Millisecond)
	}
	e.waitCommitted(st, 4*time.Minute, p)
	s := e.waitCompacted(st, 3, 4*time.Minute, p)
	t.Logf("%d telemetry objects flushed, %d after compaction (at most %d per group), %d compactions applied",
		s.flushed, s.visible, s.maxGroup, s.merged)
	if s.flushed < 5*s.visible {
		t.Errorf("compaction left %d of %d objects; want far fewer", s.visible, s.flushed)
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"simtel_sink_compaction_objects_replaced_total", "simtel_sink_compaction_objects_written_total", "simtel_sink_compaction_objects_deleted_total"} {
		if !strings.Contains(string(body), m+" ") || strings.Contains(string(body), m+" 0\n") {
			t.Errorf("metric %s missing or zero", m)
		}
	}
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v", err)
	}
	if !strings.Contains(sinkLog(t, p), "msg=compacted") {
		t.Errorf("no compaction log line:\n%s", tail(sinkLog(t, p), 20))
	}
	e.verifyCatalog(st)
}

// TestSinkCompactionCrash SIGKILLs the sink just before and just after a
// compaction's catalog commit; readers never see a record twice or miss
// one, and the restarted sink finishes the work.
func TestSinkCompactionCrash(t *testing.T) {
	e := newEnv(t, false, 2)
	st := e.store()
	paused := append(append([]string{}, compactArgs...), "--compact-pause", "8s")
	var procs []*testutil.Proc
	for i, point := range []string{"compaction paused before commit", "compaction paused after commit"} {
		p := e.startSink(paused...)
		procs = append(procs, p)
		e.produce(6_000, 1_001, []string{"c"}, uint64(200+i))
		waitLogFor(t, p, point, 4*time.Minute)
		p.Kill()
		// What the catalog shows right after the kill: every committed
		// record exactly once.
		s := e.lakeState(st)
		e.verifyCommitted(st, s.committed)
		t.Logf("killed at %q: %d records committed, %d compactions applied, %d objects visible, %d stored", point, s.committed, s.merged, s.visible, s.stored)
	}
	p := e.startSink(compactArgs...)
	procs = append(procs, p)
	e.waitCommitted(st, 4*time.Minute, procs...)
	s := e.waitCompacted(st, 3, 4*time.Minute, procs...)
	t.Logf("after restarts: %d objects flushed, %d visible, %d compactions applied", s.flushed, s.visible, s.merged)
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v", err)
	}
	e.verifyCatalog(st)
}

// verifyCommitted counts through the catalog and DuckDB: as many rows as
// committed records, and no (partition, offset) twice.
func (e *env) verifyCommitted(st store.Store, want int64) {
	e.t.Helper()
	snap := e.snapshot(st)
	var rows int64
	seen := map[po]bool{}
	for _, o := range snap.Objects(catalog.Filter{}) {
		for _, row := range e.objectRows(st, o.Key) {
			k := po{row["_partition"].(int32), row["_offset"].(int64)}
			if seen[k] {
				e.t.Fatalf("record %d/%d is visible twice", k.p, k.o)
			}
			seen[k] = true
			rows++
		}
	}
	if rows != want {
		e.t.Fatalf("the catalog shows %d rows, %d records committed", rows, want)
	}
}

// waitLogFor is waitLog with a deadline of d.
func waitLogFor(t *testing.T, p *testutil.Proc, substr string, d time.Duration) {
	t.Helper()
	testutil.WaitFor(t, d, fmt.Sprintf("%q logged", substr), func() error {
		if log := sinkLog(t, p); !strings.Contains(log, substr) {
			return fmt.Errorf("log tail:\n%s", tail(log, 30))
		}
		return nil
	})
}
