package retention_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/retention"
	"github.com/simtel/simtel/lake/store"
)

// showLake commits (without data files: only the catalog is read) cpu with
// its 1m rollups from topic telemetry, reward from topic rl and the run
// summaries, and returns its snapshot.
func showLake(t *testing.T, st store.Store) *catalog.Snapshot {
	t.Helper()
	ctx := context.Background()
	cat := catalog.New(st)
	obj := func(m string) catalog.Object {
		return catalog.Object{Key: "k/" + m, Kind: lake.KindTelemetry, Measurement: m, Run: "r1", Date: "2026-11-29", Rows: 1}
	}
	for i, e := range []catalog.Entry{
		{Topic: "telemetry", Objects: []catalog.Object{obj("cpu"), obj("rollup_1m.cpu"), obj("summary.runs")}},
		{Topic: "rl", Objects: []catalog.Object{obj("reward")}},
	} {
		e.FirstOffset, e.LastOffset, e.Written = int64(i), int64(i), time.Now()
		if err := cat.Commit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestRowsAndCheckKnown(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "file://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap := showLake(t, st)

	for _, c := range []struct {
		scope, name, err string
	}{
		{retention.ScopeMeasurement, "cpu", ""},
		{retention.ScopeMeasurement, "rollup_1m.cpu", ""}, // Set names the base
		{retention.ScopeTopic, "rl", ""},
		{retention.ScopeMeasurement, "cpux", `no data of measurement "cpux" (it has: cpu, reward, runs)`},
		{retention.ScopeTopic, "nosuch", `no data of topic "nosuch" (it has: rl, telemetry)`},
	} {
		err := retention.CheckKnown(snap, c.scope, c.name)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("CheckKnown(%s %s) = %v, want %q", c.scope, c.name, err, c.err)
		}
	}

	p, err := retention.Set(ctx, st, retention.ScopeMeasurement, "cpu", map[retention.Tier]string{retention.TierRaw: "1d", retention.Tier1m: "2y"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Describe(); got != "measurement cpu: raw 1d, 1m 2y" {
		t.Errorf("Describe = %q", got)
	}
	if _, err := retention.Set(ctx, st, retention.ScopeTopic, "rl", map[retention.Tier]string{retention.TierRaw: "7d"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := (retention.Policy{Scope: retention.ScopeLake}).Describe(); got != "the lake: inherited" {
		t.Errorf("Describe of an empty lake policy = %q", got)
	}
	ps, err := retention.LoadPolicies(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	want := []retention.Row{
		{Scope: "default", Keep: map[string]string{"raw": "30d", "10s": "90d", "1m": "forever", "1h": "forever", "summary": "forever"}},
		{Scope: "topic", Name: "rl", Keep: map[string]string{"raw": "7d"}},
		{Scope: "measurement", Name: "cpu", Keep: map[string]string{"raw": "1d", "1m": "2y"}},
		{Scope: "effective", Name: "cpu", Keep: map[string]string{"raw": "1d", "1m": "2y"}},
		{Scope: "effective", Name: "reward", Keep: map[string]string{"raw": "7d"}},
		{Scope: "effective", Name: "runs", Keep: map[string]string{"summary": "forever"}},
	}
	if got := retention.Rows(snap, ps); !reflect.DeepEqual(got, want) {
		t.Errorf("Rows:\n got %+v\nwant %+v", got, want)
	}
}
