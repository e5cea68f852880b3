package cluster

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestMuxDialsFromListenIP: a mux listening on a specific IP dials its
// peers from that IP (a peer can tell brokers apart by source address),
// and one on a wildcard address lets the kernel choose.
func TestMuxDialsFromListenIP(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	// Linux routes all of 127.0.0.0/8 to the loopback interface.
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	for _, tc := range []struct{ listen, want string }{
		{"127.0.0.23:0", "127.0.0.23"},
		{"127.0.0.1:0", "127.0.0.1"},
		{"0.0.0.0:0", ""}, // any source is fine
	} {
		m, err := NewMux(tc.listen, "", log)
		if err != nil {
			t.Fatalf("listen on %s: %v", tc.listen, err)
		}
		c, err := m.Group(7).Dial(raft.ServerAddress(peer.Addr().String()), 2*time.Second)
		if err != nil {
			m.Close()
			t.Fatalf("mux on %s: dial: %v", tc.listen, err)
		}
		in, err := peer.Accept()
		if err != nil {
			t.Fatal(err)
		}
		src := in.RemoteAddr().(*net.TCPAddr).IP.String()
		in.Close()
		c.Close()
		m.Close()
		if tc.want != "" && src != tc.want {
			t.Errorf("mux listening on %s dialed from %s, want %s", tc.listen, src, tc.want)
		}
	}
	// A loopback listener does not bind when dialing a non-loopback
	// address (that would fail with a loopback source).
	m, err := NewMux("127.0.0.23:0", "", log)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if la := m.localAddrFor("192.0.2.1:9192"); la != nil {
		t.Errorf("loopback mux dialing 192.0.2.1 binds to %v, want no binding", la)
	}
	if la := m.localAddrFor("[::1]:9192"); la != nil {
		t.Errorf("IPv4 loopback mux dialing ::1 binds to %v, want no binding", la)
	}
	if la := m.localAddrFor("127.0.0.5:9192"); la == nil || la.IP.String() != "127.0.0.23" {
		t.Errorf("loopback mux dialing 127.0.0.5 binds to %v, want 127.0.0.23", la)
	}
}
