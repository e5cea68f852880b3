package bench

import (
	"context"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

// TestFanoutEndToEnd publishes 2 MiB to 3 nodes × 2 workers and to 6
// direct subscribers through a real broker; every worker must compare
// every byte it read with the published version (VerifyReads), and the
// egress must account for one copy per fetcher.
func TestFanoutEndToEnd(t *testing.T) {
	b := inproc.Start(t, brokertest.HTTP())
	addr, metrics := b.Addr, b.MetricsURL()
	const size = 2 << 20
	for _, run := range []struct{ mode, load string }{{FanoutNode, WorkerMap}, {FanoutNode, WorkerRead}, {FanoutDirect, ""}} {
		mode := run.mode
		t.Run(mode+"-"+run.load, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := FanoutConfig{
				Client:         Client{Brokers: []string{addr}, Logger: testLogger(t)},
				Mode:           mode,
				Nodes:          3,
				WorkersPerNode: 2,
				Size:           size,
				Policy:         "e2e-" + mode + run.load,
				WorkerLoad:     run.load,
				BrokerMetrics:  metrics,
				Dir:            t.TempDir(),
				PollInterval:   50 * time.Millisecond,
				LoopbackTime:   100 * time.Millisecond,
				VerifyReads:    true,
				Timeout:        time.Minute,
			}
			res, err := Fanout(ctx, cfg)
			if err != nil {
				t.Fatalf("fanout: %v (result %+v)", err, res)
			}
			fetchers := 3
			if mode == FanoutDirect {
				fetchers = 6
			}
			if res.Held != 6 || res.Failures != 0 || res.FromStart.Count != 6 || res.Version != 2 {
				t.Fatalf("held %d, failures %d (%s), %d times, version %d; want 6, 0, 6, 2",
					res.Held, res.Failures, res.FirstErr, res.FromStart.Count, res.Version)
			}
			if res.Settings.Fetchers != fetchers {
				t.Errorf("fetchers %d, want %d", res.Settings.Fetchers, fetchers)
			}
			if s := res.FromStart; s.MinS <= 0 || s.P50S < s.MinS || s.P99S < s.P50S || s.MaxS < s.P99S {
				t.Errorf("times from the publish start are not ordered: %+v", s)
			}
			if res.FromReturn.MaxS >= res.FromStart.MaxS {
				t.Errorf("from return %+v is not shorter than from start %+v", res.FromReturn, res.FromStart)
			}
			e := res.Egress
			if e == nil {
				t.Fatal("no egress")
			}
			// Every fetcher got the version once; chunks carry headers and
			// batch framing, and the subscribers' and pollers' Latest
			// calls read a record or two, but nobody read it twice.
			if e.FetchedBytes < int64(fetchers*size) || e.ResponseBytes < e.FetchResponseBytes || e.FetchResponseBytes < e.FetchedBytes {
				t.Errorf("egress %+v: want fetched ≥ %d ≤ fetch responses ≤ all responses", e, fetchers*size)
			}
			if e.ResponseBytes > int64(fetchers*size)*3/2+(4<<20) {
				t.Errorf("egress %d bytes for %d fetchers of %d bytes: some read it more than once", e.ResponseBytes, fetchers, size)
			}
			if res.Loopback == nil || res.Targets == nil || res.Targets.LimitS <= 0 || res.Targets.LastOverLimit <= 0 {
				t.Errorf("loopback %+v, targets %+v: want both measured", res.Loopback, res.Targets)
			}
			if mode == FanoutNode {
				if n := res.NodeInstall; n == nil || n.Count != 3 || n.MaxS > res.FromStart.MaxS {
					t.Errorf("node installs %+v: want 3, each before its workers", n)
				}
				if res.Subscribers == nil || res.Subscribers.Corrupt != 0 {
					t.Errorf("subscriber stats %+v: want no corrupt version", res.Subscribers)
				}
			} else if res.Polls < 6 {
				t.Errorf("%d Latest polls, want at least one per subscriber", res.Polls)
			}
		})
	}
}
