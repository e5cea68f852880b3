package scheduler

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

// TestRegistryConcurrentEpilogs publishes a job's events the way its
// nodes do, concurrently, and checks that the cache on the runs topic, the
// fold of the jobs topic and the expected Run agree.
func TestRegistryConcurrentEpilogs(t *testing.T) {
	addr := inproc.Start(t).Addr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := mustOpen(t, addr)
	defer g.Close()

	nodes := []string{"n1", "n2", "n3"}
	since := time.Now().Add(-time.Minute)
	for run := 1; run <= 4; run++ {
		id := fmt.Sprint(100 + run)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for _, n := range nodes {
			wg.Go(func() {
				if _, err := g.Record(ctx, Event{Type: EventNodeUp, Run: id, JobID: id, Nodes: nodes, Node: n}, since); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		for i, n := range nodes {
			wg.Go(func() {
				e := Event{Type: EventNodeDown, Run: id, JobID: id, Node: n}
				if i == 0 {
					e = Event{Type: EventFailed, Run: id, JobID: id, Node: n, ExitCode: code(run), Reason: "NonZeroExitCode"}
				}
				if _, err := g.Record(ctx, e, since); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}

	cached, err := g.Runs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	folded, err := g.FoldJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(folded) != 4 {
		t.Fatalf("jobs topic folds to %d runs, want 4", len(folded))
	}
	if !reflect.DeepEqual(cached, folded) {
		t.Fatalf("cache differs from the jobs topic:\ncache %+v\njobs  %+v", cached, folded)
	}
	// The newest cache record alone (what compaction keeps) is complete too.
	latest := latestRuns(t, addr)
	for _, r := range folded {
		if r.State != StateFailed || len(r.NodesUp) != 3 || r.ExitCode == nil || r.JobID != r.Run {
			t.Errorf("run %s: got %+v, want failed with 3 nodes up and an exit code", r.Run, r)
		}
		if !reflect.DeepEqual(latest[r.Run], r) {
			t.Errorf("newest runs record of %s:\ngot  %+v\nwant %+v", r.Run, latest[r.Run], r)
		}
	}

	// The runs topic is compacted.
	adm := kadm.NewClient(g.Client())
	rc, err := adm.DescribeTopicConfigs(ctx, RunsTopic)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rc.On(RunsTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	policy := ""
	for _, kv := range c.Configs {
		if kv.Key == "cleanup.policy" {
			policy = kv.MaybeValue()
		}
	}
	if policy != "compact" {
		t.Fatalf("runs topic cleanup.policy = %q, want compact", policy)
	}
}

// mustOpen opens a Registry on the broker at addr.
func mustOpen(t *testing.T, addr string) *Registry {
	t.Helper()
	g, err := Open(Config{Brokers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// latestRuns reads the runs topic and keeps only the newest record per run.
func latestRuns(t *testing.T, addr string) map[string]Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := mustOpen(t, addr)
	defer g.Close()
	starts, err := g.startOffsets(ctx, RunsTopic, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := g.endOffsets(ctx, RunsTopic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Run{}
	err = g.scan(ctx, RunsTopic, starts, ends, func(rec *kgo.Record) {
		r, err := DecodeRun(rec.Value)
		if err != nil {
			t.Errorf("offset %d: %v", rec.Offset, err)
			return
		}
		out[r.Run] = r
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPublishRejectsBadEvents(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = Publish(context.Background(), cl, Event{Type: "bogus", Run: "1"})
	if err == nil || err.Error() != `cannot publish job event: event type "bogus" is not one of submitted, started, node_up, node_down, completed, failed, cancelled` {
		t.Fatalf("got %v", err)
	}
}
