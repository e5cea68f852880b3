package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// openTestdata opens testdata/name for the test, which closes it at its end.
func openTestdata(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestParseAgentMetrics(t *testing.T) {
	got, err := parseAgentMetrics(openTestdata(t, "agent-metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := agentCounters{
		Received:    map[string]int64{"http": 6640395, "udp": 3741495, "collector": 1320},
		ParseErrors: map[string]int64{"http": 12},
		Spooled:     10381890,
		Sent:        10381890,
		Dropped:     85,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}

	// An agent that has not received anything exposes no vectors; that is
	// zeros, not an error.
	fresh := "simtel_agent_samples_spooled_total 0\nsimtel_agent_samples_sent_total 0\nsimtel_agent_spool_pending_samples 0\n"
	if c, err := parseAgentMetrics(strings.NewReader(fresh)); err != nil || c.Received["udp"] != 0 {
		t.Errorf("fresh agent: got %+v, %v", c, err)
	}
	// Not an agent's metrics (a broker's, say): an error naming the metric.
	if _, err := parseAgentMetrics(strings.NewReader("go_goroutines 12\n")); err == nil || !strings.Contains(err.Error(), metricSpooled) {
		t.Errorf("no agent metrics: got %v, want an error about %s", err, metricSpooled)
	}
	if _, err := parseAgentMetrics(strings.NewReader("simtel_agent_samples_spooled_total{ 1\n")); err == nil {
		t.Error("malformed exposition: got no error")
	}
}

func TestAgentDelivery(t *testing.T) {
	snap := func(recv, spooled, sent, dropped, offsets, drops int64) agentSnapshot {
		return agentSnapshot{
			Counters: agentCounters{Received: map[string]int64{"udp": recv, "http": 7}, Spooled: spooled, Sent: sent, Dropped: dropped},
			Offsets:  offsets, UDP: udpSocket{Found: true, Drops: drops},
		}
	}
	before := snap(1000, 1000, 1000, 0, 5000, 3)
	for _, c := range []struct {
		name         string
		after        agentSnapshot
		sent         int64
		udp, offsets bool
		wantDrops    int64
		complete     bool
	}{
		{"all there", snap(2000, 2000, 2000, 0, 6000, 3), 1000, true, true, 0, true},
		{"kernel dropped datagrams", snap(1900, 1900, 1900, 0, 5900, 5), 1000, true, true, 2, false},
		{"shipped but not in the topic", snap(2000, 2000, 2000, 0, 5999, 3), 1000, true, true, 0, false},
		{"no broker to ask", snap(2000, 2000, 2000, 0, 0, 3), 1000, true, false, 0, true},
		{"agent dropped samples", snap(2000, 2000, 1990, 10, 5990, 3), 1000, true, true, 0, false},
	} {
		d := newAgentDelivery(before, c.after, "udp", c.sent, 0, c.udp, c.offsets)
		if d.Complete != c.complete || d.UDPSocketDrops != c.wantDrops {
			t.Errorf("%s: got complete %v, socket drops %d; want %v, %d (%+v)", c.name, d.Complete, d.UDPSocketDrops, c.complete, c.wantDrops, d)
		}
		if !c.offsets && d.Delivered != -1 {
			t.Errorf("%s: delivered %d without a broker, want -1", c.name, d.Delivered)
		}
	}
	after := snap(2000, 2000, 2000, 0, 6000, 0)
	after.UDP.Found = false
	if d := newAgentDelivery(before, after, "udp", 1000, 0, true, true); d.UDPSocketDrops != -1 {
		t.Errorf("socket not found: drops %d, want -1", d.UDPSocketDrops)
	}
}

// TestWaitIdleWaitsForSocket: an agent whose counters stand still while
// datagrams wait in its UDP socket is not idle until the socket is empty.
func TestWaitIdleWaitsForSocket(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s 10\n%s 10\n%s 0\n%s{listener=\"udp\"} 10\n", metricSpooled, metricSent, metricPending, metricReceived)
	}))
	defer srv.Close()
	p := &agentProbe{metricsURL: srv.URL, http: srv.Client()}
	ctx := context.Background()

	if _, idle, err := p.waitIdle(ctx, agentCounters{}, -1, 5*time.Second, nil); err != nil || !idle {
		t.Fatalf("without a socket to check: idle %v, err %v", idle, err)
	}
	checks := 0
	queued := func() bool { checks++; return checks > 3 } // three polls with datagrams waiting
	if _, idle, err := p.waitIdle(ctx, agentCounters{}, -1, 10*time.Second, queued); err != nil || !idle || checks != 4 {
		t.Fatalf("idle %v after %d socket checks (err %v), want idle once the fourth finds it empty", idle, checks, err)
	}
	if _, idle, err := p.waitIdle(ctx, agentCounters{}, -1, 600*time.Millisecond, func() bool { return false }); err != nil || idle {
		t.Fatalf("datagrams never read: idle %v, err %v; want not idle at the timeout", idle, err)
	}
}

// TestWaitIdleWaitsForMissingLines: counts that stand still while fewer
// lines than were sent have arrived are not idle at once (the agent may
// hold lines it read and has not counted yet); they are after idleShort.
func TestWaitIdleWaitsForMissingLines(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s 10\n%s 10\n%s 0\n# TYPE %s counter\n%s{listener=\"udp\"} 10\n", metricSpooled, metricSent, metricPending, metricReceived, metricReceived)
	}))
	defer srv.Close()
	p := &agentProbe{metricsURL: srv.URL, http: srv.Client()}
	ctx := context.Background()

	start := time.Now()
	if _, idle, err := p.waitIdle(ctx, agentCounters{}, 10, 10*time.Second, nil); err != nil || !idle {
		t.Fatalf("every line arrived: idle %v, err %v", idle, err)
	}
	if d := time.Since(start); d >= idleShort {
		t.Errorf("every line arrived, yet idle only after %v", d)
	}
	start = time.Now()
	if _, idle, err := p.waitIdle(ctx, agentCounters{}, 20, 10*time.Second, nil); err != nil || !idle {
		t.Fatalf("lines missing: idle %v, err %v; want idle after %v", idle, err, idleShort)
	}
	if d := time.Since(start); d < idleShort {
		t.Errorf("10 of 20 lines arrived: idle after %v, want at least %v", d, idleShort)
	}
	if _, idle, err := p.waitIdle(ctx, agentCounters{}, 20, time.Second, nil); err != nil || idle {
		t.Fatalf("lines missing, timeout before idleShort: idle %v, err %v; want not idle", idle, err)
	}
}
