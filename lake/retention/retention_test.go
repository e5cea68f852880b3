package retention_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/retention"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
)

// now is the fake present of the tests: raw data (30 days by default)
// expires up to the day that ended by 2026-02-18T12:00.
var now = time.Date(2026, 3, 20, 12, 0, 0, 0, time.UTC)

// days of the test lake; the 17th ends exactly 30.5 days before now, the
// 18th half a day too late to go.
var days = []string{"2026-02-10", "2026-02-17", "2026-02-18", "2026-02-19", "2026-03-01", "2026-03-19"}

// tables are the measurements written, with the runs each has.
var tables = map[string][]string{
	"cpu":            {"r1", "r2"},
	"mem":            {"r1"},
	"rollup_1m.cpu":  {"r1", "r2"},
	"rollup_1m.mem":  {"r1"},
	"rollup_10s.cpu": {"r2"},
}

// writeLake writes, per day, 3+i samples per table and run (i the day's
// index), one flush per day, through the sink's own Parquet writer.
func writeLake(t *testing.T, st store.Store, cat *catalog.Catalog) {
	t.Helper()
	ctx := context.Background()
	l := &querytest.Lake{Store: st, Catalog: cat}
	var off int64
	for i, d := range days {
		day, _ := time.Parse(time.DateOnly, d)
		var ss []replay.Sample
		first := off
		for _, m := range slices.Sorted(maps.Keys(tables)) {
			for _, run := range tables[m] {
				for j := range 3 + i {
					ss = append(ss, replay.Sample{
						Measurement: m, Tags: map[string]string{"run": run, "host": "n1"},
						Fields: map[string]any{"value": float64(j)},
						// spread over the day, the last sample a second before midnight
						Time:      day.Add(time.Duration(j)*time.Hour + 23*time.Minute).UnixNano(),
						Partition: 0, Offset: off,
					})
					off++
				}
			}
		}
		if _, err := l.Flush(ctx, "telemetry", 0, first, off-1, ss); err != nil {
			t.Fatal(err)
		}
	}
}

// counts reads the rows per table and day with DuckDB.
func counts(t *testing.T, st store.Store, cat *catalog.Catalog) map[string]map[string]int64 {
	t.Helper()
	ctx := context.Background()
	e, err := query.Open(ctx, st, cat, store.NewCache(st, t.TempDir(), 0), query.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	out := map[string]map[string]int64{}
	for _, v := range e.Views() {
		rows, err := e.Query(ctx, "SELECT strftime(make_timestamp(_time_ns // 1000), '%Y-%m-%d') AS d, count(*) FROM "+query.Ident(v.Name)+" GROUP BY d")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var d string
			var n int64
			if err := rows.Scan(&d, &n); err != nil {
				t.Fatal(err)
			}
			if out[v.Name] == nil {
				out[v.Name] = map[string]int64{}
			}
			out[v.Name][d] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return out
}

// without returns c minus the days of table before (exclusive) cut.
func without(c map[string]map[string]int64, table, cut string) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for tb, byDay := range c {
		for d, n := range byDay {
			if tb == table && d < cut {
				continue
			}
			if out[tb] == nil {
				out[tb] = map[string]int64{}
			}
			out[tb][d] = n
		}
	}
	return out
}

func equalCounts(a, b map[string]map[string]int64) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]int64) bool { return maps.Equal(x, y) })
}

func testApply(t *testing.T, st store.Store) {
	ctx := context.Background()
	cat := catalog.New(st)
	writeLake(t, st, cat)
	before := counts(t, st, cat)
	for _, m := range slices.Sorted(maps.Keys(tables)) {
		for i, d := range days {
			if got, want := before[m][d], int64((3+i)*len(tables[m])); got != want {
				t.Fatalf("before: %s on %s has %d rows, want %d", m, d, got, want)
			}
		}
	}
	// cpu's minute rollups keep 20 days; the rest the defaults (raw 30
	// days, 10 s rollups 90, minute rollups forever).
	if _, err := retention.Set(ctx, st, retention.ScopeMeasurement, "cpu", map[retention.Tier]string{retention.Tier1m: "20d"}, now); err != nil {
		t.Fatal(err)
	}
	want := without(without(without(before, "cpu", "2026-02-18"), "mem", "2026-02-18"), "rollup_1m.cpu", "2026-03-01")
	clock := testutil.NewClock(now)

	// A dry run lists exactly that and changes nothing.
	dry, err := retention.Apply(ctx, cat, retention.Config{Now: clock.Now, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, p := range dry.Expired {
		listed = append(listed, p.Measurement+"/"+p.Run+"/"+p.Date)
	}
	wantListed := []string{
		"cpu/r1/2026-02-10", "cpu/r1/2026-02-17", "cpu/r2/2026-02-10", "cpu/r2/2026-02-17",
		"mem/r1/2026-02-10", "mem/r1/2026-02-17",
		"rollup_1m.cpu/r1/2026-02-10", "rollup_1m.cpu/r1/2026-02-17", "rollup_1m.cpu/r1/2026-02-18", "rollup_1m.cpu/r1/2026-02-19",
		"rollup_1m.cpu/r2/2026-02-10", "rollup_1m.cpu/r2/2026-02-17", "rollup_1m.cpu/r2/2026-02-18", "rollup_1m.cpu/r2/2026-02-19",
	}
	if !slices.Equal(listed, wantListed) {
		t.Errorf("dry run lists\n%v\nwant\n%v", listed, wantListed)
	}
	var wantRows int64
	for tb, byDay := range before {
		for d, n := range byDay {
			if want[tb][d] != n {
				wantRows += n
			}
		}
	}
	if dry.Rows != wantRows || dry.Objects != int64(len(wantListed)) || dry.Bytes <= 0 {
		t.Errorf("dry run: %d rows, %d objects, %d bytes; want %d rows, %d objects", dry.Rows, dry.Objects, dry.Bytes, wantRows, len(wantListed))
	}
	if got := counts(t, st, cat); !equalCounts(got, before) {
		t.Errorf("after the dry run: %v, want %v", got, before)
	}
	if objs, _ := st.List(ctx, catalog.Prefix+"expire/"); len(objs) != 0 {
		t.Errorf("the dry run wrote %d expiration records", len(objs))
	}

	// Apply: exactly the expired days are gone, every other day has the
	// same rows; the objects stay in the store through the grace.
	res, err := retention.Apply(ctx, cat, retention.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Expired) != len(wantListed) || res.Rows != wantRows || res.Deleted != 0 || res.Pending != int64(len(wantListed)) {
		t.Errorf("apply: %d partitions, %d rows, %d deleted, %d pending; want %d, %d, 0, %d",
			len(res.Expired), res.Rows, res.Deleted, res.Pending, len(wantListed), wantRows, len(wantListed))
	}
	if got := counts(t, st, cat); !equalCounts(got, want) {
		t.Errorf("after apply:\n%v\nwant\n%v", got, want)
	}
	expired := res.Expired[0].Objects[0]
	if _, err := st.Stat(ctx, expired); err != nil {
		t.Errorf("expired object %s deleted within the grace: %v", expired, err)
	}
	// Applying again expires nothing more.
	again, err := retention.Apply(ctx, cat, retention.Config{Now: clock.Now})
	if err != nil || len(again.Expired) != 0 {
		t.Errorf("second apply: %d partitions, %v; want none", len(again.Expired), err)
	}

	// After the grace the objects are deleted, once; readers see the same.
	clock.Advance(retention.DefaultGrace + time.Minute)
	res, err = retention.Apply(ctx, cat, retention.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != int64(len(wantListed)) || len(res.Expired) != 0 {
		t.Errorf("after the grace: %d deleted, %d expired; want %d, 0", res.Deleted, len(res.Expired), len(wantListed))
	}
	if _, err := st.Stat(ctx, expired); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("expired object %s still there after the grace: %v", expired, err)
	}
	if got := counts(t, st, cat); !equalCounts(got, want) {
		t.Errorf("after the deletes:\n%v\nwant\n%v", got, want)
	}
	if res, err := retention.Apply(ctx, cat, retention.Config{Now: clock.Now}); err != nil || res.Deleted != 0 || res.Pending != 0 {
		t.Errorf("third apply: %d deleted, %d pending, %v; want nothing to do", res.Deleted, res.Pending, err)
	}
}

func TestApplyFile(t *testing.T) { testApply(t, storetest.Dir(t)) }

func TestApplyS3(t *testing.T) {
	st, _ := storetest.S3(t)
	testApply(t, st)
}

// A lake with Iceberg tables is refused, when their catalog is not given,
// before anything is written.
func TestApplyRefusesIceberg(t *testing.T) {
	ctx := context.Background()
	st := storetest.Dir(t)
	cat := catalog.New(st)
	writeLake(t, st, cat)
	if err := st.Put(ctx, retention.IcebergPrefix+"telemetry/cpu/metadata/v1.metadata.json", strings.NewReader("{}"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.Apply(ctx, cat, retention.Config{Now: func() time.Time { return now }}); !errors.Is(err, retention.ErrIceberg) {
		t.Fatalf("apply on an Iceberg lake: %v, want ErrIceberg", err)
	}
	if objs, _ := st.List(ctx, catalog.Prefix+"expire/"); len(objs) != 0 {
		t.Errorf("%d expiration records written", len(objs))
	}
}
