package agent

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

func TestPacketSocketReadsAndCloses(t *testing.T) {
	src, err := listenPacket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(*packetSocket); !ok {
		t.Fatalf("got %T, want *packetSocket on Linux", src)
	}
	if n, err := src.read(false); n != 0 || err != nil {
		t.Fatalf("read of an empty socket without blocking: got %d, %v; want 0, nil", n, err)
	}
	if rb := src.receiveBuffer(); rb <= 0 {
		t.Errorf("receive buffer: got %d, want > 0", rb)
	}
	c, err := net.Dial("udp", src.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent = 20 // more than one read takes
	for i := range sent {
		if _, err := fmt.Fprintf(c, "m v=%di", i); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < sent {
		n, err := src.read(true)
		if err != nil {
			t.Fatalf("read after %d datagrams: %v", len(got), err)
		}
		if n > packetsPerRead {
			t.Fatalf("read returned %d datagrams, more than the %d it has room for", n, packetsPerRead)
		}
		for i := range n {
			got = append(got, string(src.datagram(i)))
		}
	}
	for i, g := range got {
		if want := fmt.Sprintf("m v=%di", i); g != want {
			t.Fatalf("datagram %d: got %q, want %q", i, g, want)
		}
	}

	// A read blocked on an empty socket returns once the socket is closed.
	done := make(chan error, 1)
	go func() {
		_, err := src.read(true)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read block (the test passes either way)
	if err := src.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked read after close: got %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read blocked on the socket did not return after Close")
	}
	if _, err := src.read(false); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: got %v, want net.ErrClosed", err)
	}
	if err := src.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}
