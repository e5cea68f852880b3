package agent_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/agent"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// TestUDPBatchedDatagramsStaySeparate sends a burst of datagrams whose last
// line has no newline, so that the reader takes several per read and
// spools them in one append: every line must arrive once, whole, none
// glued to the next datagram's first line, and compressed with zstd.
func TestUDPBatchedDatagramsStaySeparate(t *testing.T) {
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	ta := startAgent(t, br, func(c *agent.Config) { c.PacketGather = 20 * time.Millisecond })
	c, err := net.Dial("udp", ta.addrs["udp"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const datagrams, perDatagram = 200, 3
	for d := range datagrams {
		var b []byte
		for l := range perDatagram {
			if l > 0 {
				b = append(b, '\n')
			}
			b = fmt.Appendf(b, "burst,d=%d l=%di %d", d, l, 1700000000000000000+d*10+l)
		}
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if d%50 == 49 {
			time.Sleep(5 * time.Millisecond) // stay inside the socket buffer
		}
	}
	counts, _ := readTopic(t, br, "telemetry", datagrams*perDatagram, 20*time.Second)
	for d := range datagrams {
		for l := range perDatagram {
			want := fmt.Sprintf("burst,d=%d,host=node7,job=4242,run=run-a l=%di %d", d, l, 1700000000000000000+d*10+l)
			if n := counts[want]; n != 1 {
				t.Fatalf("line %q arrived %d times, want once (got %d distinct lines)", want, n, len(counts))
			}
		}
	}
	if len(counts) != datagrams*perDatagram {
		t.Fatalf("got %d distinct lines, want %d", len(counts), datagrams*perDatagram)
	}
	checkCompressed(t, br)
}

// checkCompressed fails unless the telemetry topic's first batch is zstd
// compressed (the agent's own compressor).
func checkCompressed(t *testing.T, br string) {
	t.Helper()
	cl := topicReader(t, br, "telemetry")
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx)
	var codec int8 = -1
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 && codec < 0 {
			codec = int8(p.Records[0].Attrs.CompressionType())
		}
	})
	if codec != 4 {
		t.Fatalf("first batch compression type %d, want 4 (zstd)", codec)
	}
}

// TestBindNamesTheListenerThatFailed: an address another socket holds
// fails New with an error that names the listener and the address.
func TestBindNamesTheListenerThatFailed(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	sock := filepath.Join(t.TempDir(), "taken.sock")
	unix, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	tcpAddr, udpAddr := tcp.Addr().String(), udp.LocalAddr().String()
	for _, c := range []struct {
		name string
		set  func(*agent.Config)
		want string
	}{
		{"udp", func(c *agent.Config) { c.ListenUDP = udpAddr }, "cannot listen on udp " + udpAddr},
		{"statsd", func(c *agent.Config) { c.ListenStatsD = udpAddr }, "cannot listen for statsd on udp " + udpAddr},
		{"tcp", func(c *agent.Config) { c.ListenTCP = tcpAddr }, "cannot listen on tcp " + tcpAddr},
		{"unix", func(c *agent.Config) { c.ListenUnix = sock }, "cannot listen on unix socket " + sock},
		{"http", func(c *agent.Config) { c.ListenHTTP = tcpAddr }, "cannot listen for http on " + tcpAddr},
	} {
		cfg := testConfig("127.0.0.1:1", t.TempDir())
		c.set(&cfg)
		if _, err := agent.New(cfg); err == nil || !strings.HasPrefix(err.Error(), c.want+": ") {
			t.Errorf("%s: New returned %v, want an error beginning %q", c.name, err, c.want)
		}
	}
}
