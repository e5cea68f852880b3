package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

// TestFanoutDelta measures a delta with 3% of a 64 MiB version changed on
// two nodes through a real broker: every worker reads exactly the new
// version (VerifyReads), the publisher writes a small part of it, and each
// node receives at most 10% of the version's bytes.
func TestFanoutDelta(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 64 MiB twice")
	}
	b := inproc.Start(t, brokertest.HTTP())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const size = 64 << 20
	res, err := Fanout(ctx, FanoutConfig{
		Client: Client{Brokers: []string{b.Addr}, Logger: testLogger(t)}, Mode: FanoutNode, Nodes: 2, WorkersPerNode: 1, Size: size, Delta: 0.03,
		Policy: "delta", BrokerMetrics: b.MetricsURL(), Dir: t.TempDir(), LoopbackTime: -1, VerifyReads: true,
		Timeout: 2 * time.Minute,
	})
	if err != nil {
		t.Fatalf("fanout: %v (result %+v)", err, res)
	}
	if res.Held != 2 || res.Failures != 0 {
		t.Fatalf("held %d, failures %d (%s)", res.Held, res.Failures, res.FirstErr)
	}
	d := res.Delta
	if d == nil || d.Base != 1 || d.Sent == 0 || d.SentBytes > size/10 {
		t.Fatalf("delta: %+v", d)
	}
	if d.NodeReceivedMax > size/10 || d.NodeReceivedMean < float64(d.SentBytes) {
		t.Errorf("nodes received %.0f bytes on average, at most %d, for a delta that wrote %d bytes of %d", d.NodeReceivedMean, d.NodeReceivedMax, d.SentBytes, size)
	}
	var out bytes.Buffer
	PrintFanout(&out, res)
	if !strings.Contains(out.String(), "delta against version 1 with 3.0% of the bytes changed") {
		t.Errorf("report lacks the delta:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}

func TestFanoutDeltaNeedsNodeMode(t *testing.T) {
	for _, c := range []FanoutConfig{
		{Client: Client{Brokers: []string{"x:1"}}, Mode: FanoutDirect, Delta: 0.03},
		{Client: Client{Brokers: []string{"x:1"}}, Delta: 1},
		{Client: Client{Brokers: []string{"x:1"}}, Delta: -0.1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s with delta %g accepted", c.Mode, c.Delta)
		}
	}
}
