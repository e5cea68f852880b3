// Package faultproxy is a userspace TCP proxy that injects network faults
// for tests on machines where network namespaces and packet filters are
// not available (no NET_ADMIN in a container).
//
// Put one Proxy in front of each server and make the clients dial the
// proxy instead of the server. The proxy tells clients apart by their
// source IP, so each client must dial from its own address: on Linux all
// of 127.0.0.0/8 is routed to the loopback interface, so processes on one
// machine can bind 127.0.0.11, 127.0.0.12, ... and be told apart. Per
// source IP the proxy then passes, blackholes or refuses connections:
//
//   - Pass: forward bytes both ways between the client and the target.
//   - Blackhole: accept new connections and never forward a byte nor
//     answer; the client sees a silent link until its own timeouts fire,
//     as behind a real network partition (the TCP handshake does succeed,
//     which a real partition would not allow).
//   - Refuse: accept new connections and close them at once; the client
//     sees its connection reset or closed, as from a host that is up but
//     not listening.
//
// Switching a source to Blackhole or Refuse closes its connections that
// are being forwarded; switching it back to Pass closes its held
// (blackholed) connections, so healed clients start on new connections.
// A held connection is never read, so it stays held (one descriptor)
// until then even if its client has given up on it.
//
// A connection's direction is the direction of its TCP connect: cutting
// source A at B's proxy stops A's connections to B (and the answers that
// B would send back on them), not B's connections to A. Cut both for a
// symmetric partition.
//
// # Goroutines
//
// New starts the accept loop. Each forwarded connection has two copy
// goroutines (one per direction); a blackholed connection has none (it is
// only held). Close stops accepting, closes every connection and waits
// for all goroutines.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with a source's connections.
type Mode int

const (
	// Pass forwards connections to the target (the default).
	Pass Mode = iota
	// Blackhole holds connections open without forwarding or answering.
	Blackhole
	// Refuse closes connections as soon as they are accepted.
	Refuse
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Refuse:
		return "refuse"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// dialTimeout bounds the connect to the target of a forwarded connection.
const dialTimeout = 5 * time.Second

// Stats counts the proxy's connections since New.
type Stats struct {
	Accepted   int64 // connections accepted
	Forwarded  int64 // connected to the target and forwarded
	Blackholed int64 // held without forwarding
	Refused    int64 // closed at once (Refuse mode, or the target did not answer)
	Cut        int64 // forwarded or held connections closed by Set
}

// Proxy forwards TCP connections from its listener to one target address,
// passing, blackholing or refusing them by source IP.
type Proxy struct {
	ln     net.Listener
	target string
	log    *slog.Logger

	mu struct {
		sync.Mutex
		modes  map[netip.Addr]Mode
		conns  map[*conn]struct{}
		closed bool
	}
	accepted, forwarded, blackholed, refused, cut atomic.Int64

	wg sync.WaitGroup
}

// conn is one accepted client connection and, when forwarded, its
// connection to the target.
type conn struct {
	src      netip.Addr
	client   net.Conn
	server   net.Conn // nil while held (blackholed)
	closeOne sync.Once
}

func (c *conn) close() {
	c.closeOne.Do(func() {
		c.client.Close()
		if c.server != nil {
			c.server.Close()
		}
	})
}

// New listens on listen (host:port; port 0 picks one) and forwards to
// target. log may be nil.
func New(listen, target string, log *slog.Logger) (*Proxy, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("cannot listen for the proxy to %s on %s: %w", target, listen, err)
	}
	p := &Proxy{ln: ln, target: target, log: log.With("proxy", ln.Addr().String(), "target", target)}
	p.mu.modes = map[netip.Addr]Mode{}
	p.mu.conns = map[*conn]struct{}{}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.serve()
	}()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set changes what happens to connections from src from now on, and cuts
// its existing connections that the new mode does not allow: forwarded
// ones for Blackhole and Refuse, held ones for Pass.
func (p *Proxy) Set(src netip.Addr, m Mode) {
	src = src.Unmap()
	p.mu.Lock()
	if m == Pass {
		delete(p.mu.modes, src)
	} else {
		p.mu.modes[src] = m
	}
	var drop []*conn
	for c := range p.mu.conns {
		if c.src == src && (c.server == nil) == (m == Pass) {
			drop = append(drop, c)
			delete(p.mu.conns, c)
		}
	}
	p.mu.Unlock()
	for _, c := range drop {
		c.close()
	}
	p.cut.Add(int64(len(drop)))
	p.log.Info("fault mode set", "source", src.String(), "mode", m.String(), "cut", len(drop))
}

// Mode is the current mode of src.
func (p *Proxy) Mode(src netip.Addr) Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.modes[src.Unmap()]
}

// Stats returns the connection counters.
func (p *Proxy) Stats() Stats {
	return Stats{Accepted: p.accepted.Load(), Forwarded: p.forwarded.Load(), Blackholed: p.blackholed.Load(),
		Refused: p.refused.Load(), Cut: p.cut.Load()}
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.closed = true
	conns := p.mu.conns
	p.mu.conns = map[*conn]struct{}{}
	p.mu.Unlock()
	err := p.ln.Close()
	for c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	for {
		cl, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			p.log.Error("proxy accept failed", "err", err)
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(cl)
		}()
	}
}

// handle decides the fate of one accepted connection and, if it is
// forwarded, copies until either side closes or it is cut.
func (p *Proxy) handle(cl net.Conn) {
	var src netip.Addr
	if ta, ok := cl.RemoteAddr().(*net.TCPAddr); ok {
		src = ta.AddrPort().Addr().Unmap()
	}
	c := &conn{src: src, client: cl}
	switch p.Mode(src) {
	case Refuse:
		p.refused.Add(1)
		if tc, ok := cl.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not an orderly close
		}
		cl.Close()
		return
	case Blackhole:
		if !p.track(c, Blackhole) {
			return
		}
		p.blackholed.Add(1)
		return // held until Set(src, Pass) or Close
	}
	sv, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		p.refused.Add(1)
		p.log.Debug("proxy cannot reach its target", "source", src.String(), "err", err)
		cl.Close()
		return
	}
	c.server = sv
	// The mode may have changed while dialing: track checks it again
	// under the lock, so a Set that ran meanwhile is not missed.
	if !p.track(c, Pass) {
		return
	}
	p.forwarded.Add(1)
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		c.close() // either direction ending ends both
	}
	go pipe(sv, cl)
	go pipe(cl, sv)
	wg.Wait()
	p.mu.Lock()
	delete(p.mu.conns, c)
	p.mu.Unlock()
}

// track registers c if the proxy is open and src's mode is still want;
// otherwise it closes c and reports false.
func (p *Proxy) track(c *conn, want Mode) bool {
	p.mu.Lock()
	ok := !p.mu.closed && p.mu.modes[c.src] == want
	if ok {
		p.mu.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	if !ok {
		if want == Pass {
			p.refused.Add(1)
		}
		c.close()
	}
	return ok
}
