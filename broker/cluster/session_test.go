package cluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// heldConn is one end of a pipe whose Close does not wake a blocked Read
// until release: a session's Close then stays where it waits for its
// reader (it closed the session for its streams already), as it may on
// a loaded machine.
type heldConn struct {
	net.Conn
	once sync.Once
}

func (c *heldConn) Close() error { return nil }
func (c *heldConn) release()     { c.once.Do(func() { _ = c.Conn.Close() }) }

// TestSessionCloseEndsReads: the Reads waiting on the streams of a
// session return as soon as it begins to close, without waiting for its
// Close to reach each stream (yamux's Read spins until then, see
// sessionStreams).
func TestSessionCloseEndsReads(t *testing.T) {
	a, b := net.Pipe()
	ha, hb := &heldConn{Conn: a}, &heldConn{Conn: b}
	defer ha.release()
	defer hb.release()
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = false
	cfg.LogOutput = io.Discard
	client, err := yamux.Client(ha, cfg)
	if err != nil {
		t.Fatal(err)
	}
	server, err := yamux.Server(hb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	watchSession(client)
	watchSession(server)
	const streams = 8
	errs := make(chan error, 2*streams)
	for range streams {
		st, err := client.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		c := trackStream(client, st)
		if _, err := c.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		sst, err := server.AcceptStream()
		if err != nil {
			t.Fatal(err)
		}
		sc := trackStream(server, sst)
		var one [1]byte
		if _, err := io.ReadFull(sc, one[:]); err != nil {
			t.Fatal(err)
		}
		for _, conn := range []net.Conn{c, sc} {
			go func() {
				var buf [1]byte
				_, err := conn.Read(buf[:])
				errs <- err
			}()
		}
	}
	// Both sides begin to close; neither Close can finish while the
	// pipe holds their readers.
	go client.Close()
	go server.Close()
	// Without the fix the Reads spin until the Closes finish: never
	// here. The bound only turns that hang into a failure.
	limit := time.After(time.Minute)
	for range 2 * streams {
		select {
		case err := <-errs:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("a Read on a closing session returned %v, want net.ErrClosed", err)
			}
		case <-limit:
			t.Fatal("Reads on the streams of a closing session have not returned")
		}
	}
}
