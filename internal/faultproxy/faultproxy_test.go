package faultproxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"
)

// echoServer answers every byte it reads; Close waits for its goroutines.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// dialFrom connects to addr from the loopback IP src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes a message and reads it back within wait. It returns
// nil on an echo, os.ErrDeadlineExceeded when nothing came back, and
// the read error (EOF, reset) when the connection was closed.
func roundTrip(c net.Conn, msg string, wait time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(wait))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return errors.New("echo differs: " + string(buf))
	}
	return nil
}

func TestProxyModesBySource(t *testing.T) {
	target := echoServer(t)
	p, err := New("127.0.0.1:0", target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, b := netip.MustParseAddr("127.0.0.31"), netip.MustParseAddr("127.0.0.32")

	// Pass: both sources are forwarded.
	ca := dialFrom(t, a.String(), p.Addr())
	cb := dialFrom(t, b.String(), p.Addr())
	for _, c := range []net.Conn{ca, cb} {
		if err := roundTrip(c, "hello", 5*time.Second); err != nil {
			t.Fatalf("pass: %v", err)
		}
	}

	// Blackhole a: its forwarded connection is cut, its new ones get no
	// answer, b is untouched.
	p.Set(a, Blackhole)
	if got := p.Mode(a); got != Blackhole {
		t.Fatalf("mode of %v: got %v, want blackhole", a, got)
	}
	if err := roundTrip(ca, "x", 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackhole: existing connection of the cut source: got %v, want it closed", err)
	}
	held := dialFrom(t, a.String(), p.Addr())
	if err := roundTrip(held, "x", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackhole: new connection: got %v, want no answer (deadline exceeded)", err)
	}
	if err := roundTrip(cb, "still", 5*time.Second); err != nil {
		t.Fatalf("blackhole of %v broke %v: %v", a, b, err)
	}

	// Refuse a: new connections are reset at once (on loopback the reset
	// can arrive before the dial returns).
	p.Set(a, Refuse)
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(a.String())}}
	if ref, err := d.Dial("tcp", p.Addr()); err == nil {
		err = roundTrip(ref, "x", 5*time.Second)
		ref.Close()
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("refuse: got %v, want the connection closed", err)
		}
	}

	// Heal: new connections pass again; connections held while
	// blackholed are closed rather than suddenly delivered.
	p.Set(a, Blackhole)
	held2 := dialFrom(t, a.String(), p.Addr())
	if err := roundTrip(held2, "x", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackhole again: got %v, want no answer", err)
	}
	p.Set(a, Pass)
	if err := roundTrip(held2, "y", 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("heal: held connection: got %v, want it closed", err)
	}
	if err := roundTrip(dialFrom(t, a.String(), p.Addr()), "healed", 5*time.Second); err != nil {
		t.Fatalf("heal: new connection: %v", err)
	}

	st := p.Stats()
	if st.Forwarded != 3 || st.Refused != 1 || st.Blackholed != 2 || st.Cut < 3 {
		t.Errorf("stats: %+v, want 3 forwarded, 1 refused, 2 blackholed, at least 3 cut", st)
	}
}

// TestProxyTargetDown: a connection whose target does not answer is closed
// (the client sees what it would see dialing the dead server), and Close
// returns with connections still open.
func TestProxyTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p, err := New("127.0.0.1:0", dead, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := dialFrom(t, "127.0.0.33", p.Addr())
	if err := roundTrip(c, "x", 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("target down: got %v, want the connection closed", err)
	}
	p.Set(netip.MustParseAddr("127.0.0.34"), Blackhole)
	dialFrom(t, "127.0.0.34", p.Addr())
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a held connection open")
	}
}
