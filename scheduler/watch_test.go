package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

// TestWatcherRepairsTheCache: events published without a cache refresh,
// a garbage record, and a stale cache record written last all end up as
// the right fold on the runs topic.
func TestWatcherRepairsTheCache(t *testing.T) {
	t0 := time.Now()
	addr := inproc.Start(t).Addr
	t.Logf("broker up in %v", time.Since(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := mustOpen(t, addr)
	defer g.Close()
	nodes := []string{"n1", "n2"}
	evs := []Event{
		{Type: EventNodeUp, Run: "5", JobID: "5", Nodes: nodes, Node: "n1", Time: at(1)},
		{Type: EventNodeUp, Run: "5", JobID: "5", Nodes: nodes, Node: "n2", Time: at(1)},
		{Type: EventStarted, Run: "5", JobID: "5", Nodes: nodes, Node: "n1", Time: at(2)},
		{Type: EventNodeUp, Run: "6", JobID: "6", Nodes: nodes, Node: "n1", Time: at(3)},
	}
	for _, e := range evs {
		if err := g.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Client().ProduceSync(ctx, &kgo.Record{Topic: JobsTopic, Key: []byte("x"), Value: []byte("{not json")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	httpAddr := testutil.FreePort(t)
	w, err := NewWatcher(WatchConfig{Config: Config{Brokers: []string{addr}}, WriteInterval: 100 * time.Millisecond, HTTPListen: httpAddr})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	}()

	waitCache := func(want []Run) {
		t.Helper()
		testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("runs topic holds %+v", want), func() error {
			latest := latestRuns(t, addr)
			ok := len(latest) == len(want)
			for _, r := range want {
				ok = ok && reflect.DeepEqual(latest[r.Run], r)
			}
			if !ok {
				return fmt.Errorf("it holds %+v", latest)
			}
			return nil
		})
	}
	t0 = time.Now()
	fold := Fold(evs)
	waitCache(fold)
	t.Logf("cache repaired %v after the watcher started", time.Since(t0))

	// A hook writes a stale record last (it read before the newest events).
	stale := fold[0]
	stale.State, stale.NodesUp, stale.Started = StatePending, nil, time.Time{}
	if err := writeRun(ctx, g.Client(), stale); err != nil {
		t.Fatal(err)
	}
	// And the run ends.
	end := Event{Type: EventCompleted, Run: "5", JobID: "5", Node: "n1", Time: at(9), ExitCode: code(0), Source: SourceEpilog}
	if err := g.Publish(ctx, end); err != nil {
		t.Fatal(err)
	}
	evs = append(evs, end)
	t0 = time.Now()
	waitCache(Fold(evs))
	t.Logf("stale record and new event repaired in %v", time.Since(t0))

	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`simtel_scheduler_runs{state="completed"} 1`, `simtel_scheduler_runs{state="running"} 1`,
		`simtel_scheduler_invalid_events_total 1`, `simtel_scheduler_events_total{type="node_up"} 3`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if got := w.Runs(); len(got) != 2 || got[0].State != StateCompleted {
		b, _ := json.Marshal(got)
		t.Fatalf("watcher fold %s", b)
	}
}
