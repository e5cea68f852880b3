package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

func TestAgentLoadConfigValidate(t *testing.T) {
	ok := AgentLoadConfig{Addr: "127.0.0.1:8089", Rate: 1000}
	checkRefusals(t, ok, []refusal[AgentLoadConfig]{
		{"no address", func(c *AgentLoadConfig) { c.Addr = "" }, "address"},
		{"unknown transport", func(c *AgentLoadConfig) { c.Transport = "quic" }, "udp, tcp or http"},
		{"negative rate", func(c *AgentLoadConfig) { c.Rate = -1 }, "rate"},
		{"datagram too large", func(c *AgentLoadConfig) { c.DatagramBytes = 70000 }, "datagram"},
		{"brokers without metrics", func(c *AgentLoadConfig) { c.Brokers = []string{"b:9092"} }, "HTTP address"},
		{"profile without metrics", func(c *AgentLoadConfig) { c.Profile = "p" }, "HTTP address"},
		{"path without slash", func(c *AgentLoadConfig) { c.Transport, c.HTTPPath = "http", "write" }, "http path"},
	})
}

// TestAgentLoadPacing sends to a plain UDP socket and an HTTP server that
// count what arrives: the rate is held and every line is counted once.
func TestAgentLoadPacing(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	// A large socket buffer keeps a reader that a loaded machine
	// deschedules from losing datagrams; what the kernel still drops is
	// read from /proc below.
	_ = pc.(*net.UDPConn).SetReadBuffer(8 << 20)
	var udpLines atomic.Int64
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			udpLines.Add(int64(strings.Count(string(buf[:n]), "\n")))
		}
	}()
	var httpLines, posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("db") != "bench" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		httpLines.Add(int64(bytes.Count(b, []byte{'\n'})))
		posts.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	for _, c := range []struct {
		transport, addr string
		got             *atomic.Int64
	}{
		{"udp", pc.LocalAddr().String(), &udpLines},
		{"http", strings.TrimPrefix(srv.URL, "http://"), &httpLines},
	} {
		cfg := AgentLoadConfig{Transport: c.transport, Addr: c.addr, Rate: 20_000, Duration: 1500 * time.Millisecond,
			Warmup: 200 * time.Millisecond, Batch: 1000} // no agent to measure: the generator alone
		res, err := AgentLoad(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.transport, err)
		}
		// Wait for the reader.
		deadline := time.Now().Add(2 * time.Second)
		for c.got.Load() < res.WarmupLines+res.Lines && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		got, want := c.got.Load(), res.WarmupLines+res.Lines
		if got > want+int64(cfg.Batch) {
			t.Errorf("%s: %d lines arrived, the generator made %d (+ at most one batch after the window)", c.transport, got, want)
		}
		var drops int64
		if c.transport == "udp" {
			drops = udpDrops(t, pc.LocalAddr())
		}
		switch {
		case got < want && drops > 0:
			t.Logf("udp: %d of %d lines arrived; the kernel dropped %d datagrams on a loaded machine", got, want, drops)
		case got < want:
			t.Errorf("%s: %d lines arrived, the generator made %d", c.transport, got, want)
		}
		// The pacer never sends faster than asked; a loaded machine may
		// make it send slower.
		if res.LinesPerS > 21_000 {
			t.Errorf("%s: achieved %.0f lines/s, want at most 20,000 + 5%%", c.transport, res.LinesPerS)
		}
		if res.Errors != 0 || res.Aborted != "" || res.Agent != nil || res.Delivery != nil {
			t.Errorf("%s: %+v", c.transport, res)
		}
	}
	if p, full := posts.Load(), (httpLines.Load()+999)/1000; p < full || p > full+1 {
		t.Errorf("http: %d POSTs for %d lines in batches of 1000", p, httpLines.Load())
	}
}

// TestAgentLoadAgent runs the generator against a real broker and agent,
// over each transport: every line must be received, spooled, shipped and
// found in the topic, and the agent's process must be measured.
func TestAgentLoadAgent(t *testing.T) {
	broker := brokertest.Start(t, brokertest.SkipShort(), brokertest.GroupDelay(0)).Addr
	dir := t.TempDir()
	httpAddr, tcpAddr := testutil.FreePort(t), testutil.FreePort(t)
	udpAddr := testutil.FreePort(t) // a TCP port free a moment ago; UDP's is almost surely free too
	agent := testutil.Start(t, dir, "agent", "--brokers", broker, "--spool-dir", filepath.Join(dir, "spool"),
		"--listen-udp", udpAddr, "--listen-tcp", tcpAddr, "--listen-http", httpAddr,
		"--collect-interval", "-1s", "--log-level", "warn")
	testutil.WaitPort(t, httpAddr, agent)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, c := range []struct{ transport, addr string }{{"udp", udpAddr}, {"tcp", tcpAddr}, {"http", httpAddr}} {
		res, err := AgentLoad(ctx, AgentLoadConfig{Transport: c.transport, Addr: c.addr, Rate: 5000,
			Duration: time.Second, Warmup: 300 * time.Millisecond, Batch: 500,
			AgentPID: agent.Cmd.Process.Pid, AgentHTTP: httpAddr, Client: Client{Brokers: []string{broker}, Logger: testLogger(t)},
			DrainTimeout: 30 * time.Second, SampleInterval: 250 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s: %v", c.transport, err)
		}
		d := res.Delivery
		if d == nil || !d.Complete || !d.Idle || d.Sent != res.WarmupLines+res.Lines || d.Delivered != d.Sent {
			t.Errorf("%s: delivery %+v for %d + %d lines", c.transport, d, res.WarmupLines, res.Lines)
		}
		if c.transport == "udp" && d != nil && d.UDPSocketDrops != 0 {
			t.Errorf("udp: %d socket drops at 5000 lines/s (the socket was not found if -1)", d.UDPSocketDrops)
		}
		a := res.Agent
		if a == nil || a.CPUSeconds <= 0 || a.RSSMiB <= 1 || a.PeakMiB < a.RSSMiB || a.Threads < 2 ||
			a.PeakSince != "run" || a.ReceivedPerS < 4000 || a.MicrosPerLine <= 0 {
			t.Errorf("%s: agent %+v", c.transport, a)
		}
		if c.transport == "http" && res.HTTPStatus["204"] == 0 {
			t.Errorf("http: statuses %v", res.HTTPStatus)
		}
		t.Logf("%s: %.0f lines/s, agent %.1f%% of a core, %.1f MiB, delivered %d of %d",
			c.transport, res.LinesPerS, a.CPUPct, a.RSSMiB, d.Delivered, d.Sent)
	}

	// The agent gone: the run stops and says so.
	agent.Kill()
	_, err := AgentLoad(ctx, AgentLoadConfig{Transport: "udp", Addr: udpAddr, Rate: 1000, Duration: time.Second,
		AgentPID: agent.Cmd.Process.Pid})
	if !errors.Is(err, ErrProcessGone) {
		t.Errorf("after the agent exited: got %v, want ErrProcessGone", err)
	}
}

// udpDrops is the kernel's count of datagrams dropped on the socket bound
// to addr (Linux; 0 where /proc/net/udp is not there).
func udpDrops(t *testing.T, addr net.Addr) int64 {
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return 0
	}
	port := fmt.Sprintf(":%04X", addr.(*net.UDPAddr).Port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 13 || !strings.HasSuffix(f[1], port) {
			continue
		}
		n, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if err != nil {
			t.Logf("/proc/net/udp: %q: %v", line, err)
			return 0
		}
		return n
	}
	return 0
}
