package pgwire_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/lake/pgwire"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
)

// grafanaMacros expands the macros of Grafana's PostgreSQL data source the
// way it does before it sends a query.
func grafanaMacros(sql, run string, from, to time.Time, interval time.Duration) string {
	sql = regexp.MustCompile(`\$__timeFilter\((\w+)\)`).ReplaceAllString(sql,
		fmt.Sprintf("$1 BETWEEN '%s' AND '%s'", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano)))
	sql = regexp.MustCompile(`\$__timeGroupAlias\((\w+),\s*\$__interval\)`).ReplaceAllString(sql,
		fmt.Sprintf(`floor(extract(epoch from $1)/%d)*%d AS "time"`, int(interval.Seconds()), int(interval.Seconds())))
	return strings.ReplaceAll(sql, "$run", run)
}

// TestRunDashboard runs every query of deploy/grafana/run-pg.json, macros
// expanded as Grafana does, over a lake with a run's reward, step time and
// GPU samples: each answers with rows.
func TestRunDashboard(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/run-pg.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RawSQL string `json:"rawSql"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	l := newTestLake(t)
	var ss []replay.Sample
	for i := range 300 {
		ts := querytest.Start.Add(time.Duration(i) * time.Second).UnixNano()
		tags := map[string]string{"run": "r7", "host": fmt.Sprintf("n%d", i%2)}
		ss = append(ss,
			replay.Sample{Measurement: "reward", Tags: tags, Fields: map[string]any{"value": float64(i) / 10}, Time: ts, Offset: int64(3 * i)},
			replay.Sample{Measurement: "step_time", Tags: tags, Fields: map[string]any{"value": 0.01}, Time: ts, Offset: int64(3*i + 1)},
			replay.Sample{Measurement: "gpu", Tags: map[string]string{"run": "r7", "host": tags["host"], "index": "0"},
				Fields: map[string]any{"utilization_gpu": int64(i % 100)}, Time: ts, Offset: int64(3*i + 2)})
	}
	if err := (&querytest.Lake{Store: l.st, Catalog: l.cat}).WriteSamples(context.Background(), "jobs", ss, 200); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, l, pgwire.Config{})
	c := connect(t, addr, "grafana", "")
	ctx := context.Background()
	from, to := querytest.Start.Add(-time.Hour), querytest.Start.Add(time.Hour)
	var queries []string
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok && v.Name == "run" {
			queries = append(queries, q)
		}
	}
	if len(queries) != 1 {
		t.Fatalf("the dashboard has no run variable query")
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries = append(queries, tg.RawSQL)
		}
	}
	if len(queries) < 4 {
		t.Fatalf("%d queries, want the run variable and three panels", len(queries))
	}
	for i, q := range queries {
		sql := grafanaMacros(q, "r7", from, to, time.Minute)
		rows, err := c.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		n := 0
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 && vals[0] != "r7" {
				t.Errorf("run variable: %v", vals)
			}
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if n == 0 {
			t.Errorf("%s: no rows", sql)
		}
	}
}
