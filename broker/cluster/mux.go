package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"
	"github.com/prometheus/client_golang/prometheus"
)

// Connection header: every connection to the raft listener starts with one
// kind byte and, for raft streams, the 8-byte big-endian group id. The
// controller is group 0; partition groups will use the ids after it.
const (
	kindRaft    byte = 1 // a hashicorp/raft transport stream for one group
	kindForward byte = 2 // one forwarded controller command (see forward.go)
	// kindHeartbeat (3, coalesced heartbeats, transport.go) and kindWatch
	// (4, failure detection, watch.go) and kindVote (6, votes.go) are
	// served by handlers; kindSession (5, session.go) carries streams of
	// all the other kinds.

	// headerTimeout bounds how long an accepted connection may take to
	// send its header, so a silent peer cannot pin an accept slot.
	headerTimeout = 10 * time.Second
)

// ErrMuxClosed is returned by a StreamLayer's Accept after Mux.Close.
var ErrMuxClosed = errors.New("raft mux closed")

// Mux shares one TCP listener between many raft groups and the controller's
// forwarding RPC. Each group gets a raft.StreamLayer from Group; accepted
// connections are routed by their header. Dialing writes the header.
type Mux struct {
	ln        net.Listener
	advertise raft.ServerAddress
	log       *slog.Logger
	// local is the listener's IP when it is a specific address (not a
	// wildcard): outgoing connections leave from it. See localAddrFor.
	local net.IP

	mu struct {
		sync.Mutex
		groups map[uint64]*StreamLayer
		closed bool
		// waiting has a channel per group id that connections wait for
		// (waitGroup), closed when the group is added. One per id, not
		// one for any group: a broker starting thousands of groups
		// while its peers' connections for them wait would otherwise
		// wake every waiter at every group it adds.
		waiting map[uint64]chan struct{}
		// detached holds the groups closed while the mux runs (a deleted
		// partition, a replica moved away) until they are added again:
		// a connection for one of them is closed at once instead of
		// held for unknownGroupWait, so a peer's raft still running the
		// group (its broker has not applied the deletion yet) gets an
		// error at once and its Shutdown is not held up by a blocked RPC.
		detached map[uint64]struct{}
		// out are the sessions dialed (or being dialed) by destination,
		// in the accepted ones with the peer's advertised address
		// (session.go).
		out map[raft.ServerAddress]*outSession
		in  map[*yamux.Session]string
		// voteSlots: see votesInFlight (votes.go).
		voteSlots map[raft.ServerAddress]chan struct{}
	}
	forward func(net.Conn) // handler of kindForward connections; nil: refuse
	// handlers serve the other connection kinds; set before Serve.
	handlers map[byte]func(net.Conn)
	// unknownGroupWait: see the constant.
	unknownGroupWait time.Duration
	// serverTLS and clientTLS, when set (before Serve), put every
	// connection on mutual TLS (tls.go); tlsFailures counts the
	// handshakes that failed, by side and reason (nil: not counted).
	serverTLS, clientTLS *tls.Config
	tlsFailures          *prometheus.CounterVec

	stats *muxStats

	closeOnce sync.Once
	done      chan struct{}
	// ctx ends with done (for the session dials).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewMux listens on addr. advertise is the address other nodes dial (the
// listener's address when empty).
func NewMux(addr, advertise string, log *slog.Logger) (*Mux, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen for raft on %s: %w", addr, err)
	}
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	m := &Mux{ln: ln, advertise: raft.ServerAddress(advertise), log: log, done: make(chan struct{}), handlers: map[byte]func(net.Conn){}, unknownGroupWait: unknownGroupWait}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			m.local = ip
		}
	}
	m.mu.groups = map[uint64]*StreamLayer{}
	m.mu.detached = map[uint64]struct{}{}
	m.mu.waiting = map[uint64]chan struct{}{}
	m.mu.out = map[raft.ServerAddress]*outSession{}
	m.mu.in = map[*yamux.Session]string{}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.stats = newMuxStats(m)
	return m, nil
}

// Addr is the address peers dial to reach this mux.
func (m *Mux) Addr() raft.ServerAddress { return m.advertise }

// SetForwardHandler installs the handler of forwarded commands. Call it
// before Serve.
func (m *Mux) SetForwardHandler(h func(net.Conn)) { m.forward = h }

// Group returns the stream layer of raft group id, creating it on first use.
func (m *Mux) Group(id uint64) *StreamLayer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.mu.groups[id]; ok {
		return s
	}
	s := &StreamLayer{mux: m, group: id, accept: make(chan net.Conn, 16), closed: make(chan struct{})}
	m.mu.groups[id] = s
	delete(m.mu.detached, id)
	if ch := m.mu.waiting[id]; ch != nil {
		close(ch)
		delete(m.mu.waiting, id)
	}
	return s
}

// Serve accepts connections until Close. Each connection's header is read
// on its own goroutine (owned by the mux's WaitGroup) so a slow peer does
// not hold up the others.
func (m *Mux) Serve() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.log.Error("raft listener failed", "err", err)
			return
		}
		if !m.serveConn(c, func() { m.route(c) }) {
			return
		}
	}
}

// serveConn runs serve on a goroutine Close waits for, or closes c and
// returns false once the mux is closed. The goroutine is added under the
// lock Close takes before it waits, so no Add races with Close's Wait.
func (m *Mux) serveConn(c io.Closer, serve func()) bool {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		c.Close()
		return false
	}
	m.wg.Go(serve)
	m.mu.Unlock()
	return true
}

func (m *Mux) route(c net.Conn) {
	if m.serverTLS != nil {
		tc, err := m.handshake(tls.Server(c, m.serverTLS), headerTimeout)
		if err != nil {
			m.tlsFailed("accept", c.RemoteAddr(), err)
			return
		}
		c = tc
	}
	m.routeConn(c, true)
}

// routeConn reads c's header and hands it on: c is an accepted
// connection (top) or a stream of a session.
func (m *Mux) routeConn(c net.Conn, top bool) {
	_ = c.SetReadDeadline(time.Now().Add(headerTimeout))
	var kind [1]byte
	if _, err := io.ReadFull(c, kind[:]); err != nil {
		c.Close()
		return
	}
	switch kind[0] {
	case kindRaft:
		var gid [8]byte
		if _, err := io.ReadFull(c, gid[:]); err != nil {
			c.Close()
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		id := binary.BigEndian.Uint64(gid[:])
		s := m.waitGroup(id)
		if s == nil {
			m.log.Debug("raft connection for unknown group", "group", id, "remote", c.RemoteAddr().String())
			c.Close()
			return
		}
		select {
		case s.accept <- c:
		case <-s.closed:
			c.Close()
		case <-m.done:
			c.Close()
		}
	case kindSession:
		if !top {
			c.Close()
			return
		}
		m.serveSession(c)
	case kindForward:
		_ = c.SetReadDeadline(time.Time{})
		if m.forward == nil {
			c.Close()
			return
		}
		m.forward(c)
	default:
		if h := m.handlers[kind[0]]; h != nil {
			_ = c.SetReadDeadline(time.Time{})
			h(c)
			return
		}
		m.log.Warn("raft connection with unknown header", "kind", kind[0], "remote", c.RemoteAddr().String())
		c.Close()
	}
}

// localAddrFor is the local address to dial addr from: the raft
// listener's IP when --raft-listen names a specific one, so that on a
// multi-homed host raft traffic leaves from the address the broker was
// told to use for raft, and a peer (or a fault-injecting proxy in tests,
// where each broker has its own loopback IP) sees which broker connects.
// nil (the kernel chooses) when listening on a wildcard address, or when
// the listener is on loopback and addr is not a loopback IP literal (a
// loopback source cannot reach another host).
func (m *Mux) localAddrFor(addr raft.ServerAddress) *net.TCPAddr {
	if m.local == nil {
		return nil
	}
	if m.local.IsLoopback() {
		host, _, err := net.SplitHostPort(string(addr))
		ip := net.ParseIP(host)
		if err != nil || ip == nil || !ip.IsLoopback() || (ip.To4() == nil) != (m.local.To4() == nil) {
			return nil
		}
	}
	return &net.TCPAddr{IP: m.local}
}

// unknownGroupWait is how long, by default (Mux.unknownGroupWait), a raft
// connection for a group that is not (yet) registered here is held before
// it is closed. A restarted broker
// opens its partitions a few seconds after its listener; a leader whose
// AppendEntries fail counts each failure and backs off exponentially (to
// about 10 s in hashicorp/raft), so a connection held until the group
// exists lets the follower catch up at once.
const unknownGroupWait = 10 * time.Second

// waitGroup returns group id's stream layer, waiting up to
// unknownGroupWait for it to be added; nil if it is not, and nil at once
// for a group detached here (see Mux.mu.detached).
func (m *Mux) waitGroup(id uint64) *StreamLayer {
	timer := time.NewTimer(m.unknownGroupWait)
	defer timer.Stop()
	for {
		m.mu.Lock()
		s := m.mu.groups[id]
		_, detached := m.mu.detached[id]
		var added chan struct{}
		if s == nil && !detached {
			if added = m.mu.waiting[id]; added == nil {
				added = make(chan struct{})
				m.mu.waiting[id] = added
			}
		}
		m.mu.Unlock()
		if s != nil || detached {
			return s
		}
		select {
		case <-added:
		case <-timer.C:
			return nil
		case <-m.done:
			return nil
		}
	}
}

// dial opens a stream to a peer's mux, in the session with it (dialed
// first if there is none), and writes a header.
func (m *Mux) dial(addr raft.ServerAddress, timeout time.Duration, header []byte) (net.Conn, error) {
	for {
		sess, reused, err := m.session(addr, timeout)
		if err != nil {
			return nil, err
		}
		st, err := sess.OpenStream()
		if err != nil {
			if reused && sess.IsClosed() {
				// It broke since it was dialed (the peer restarted):
				// dial a new one. One dialed for this call that
				// closed at once is the peer's answer.
				continue
			}
			return nil, fmt.Errorf("cannot open a stream to the raft mux at %s: %w", addr, err)
		}
		c := trackStream(sess, st)
		if timeout > 0 {
			_ = c.SetWriteDeadline(time.Now().Add(timeout))
		}
		if _, err := c.Write(header); err != nil {
			c.Close()
			return nil, fmt.Errorf("cannot send raft header to %s: %w", addr, err)
		}
		_ = c.SetWriteDeadline(time.Time{})
		return c, nil
	}
}

// handshake runs c's TLS handshake within timeout (0: no bound); c is
// closed when it fails.
func (m *Mux) handshake(c *tls.Conn, timeout time.Duration) (*tls.Conn, error) {
	if timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(timeout))
	}
	if err := c.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// tlsFailed counts a failed handshake and logs it (a refused peer with a
// warning, a failed dial for debugging). A connection closed before
// its first byte (a port probe, see Node.Refused) is neither.
func (m *Mux) tlsFailed(side string, remote net.Addr, err error) {
	if errors.Is(err, io.EOF) {
		return
	}
	reason := tlsFailureReason(err)
	if m.tlsFailures != nil {
		m.tlsFailures.WithLabelValues(side, reason).Inc()
	}
	lvl := slog.LevelWarn
	if side == "dial" {
		// The caller reports it (and may retry every tick).
		lvl = slog.LevelDebug
	}
	m.log.Log(context.Background(), lvl, "raft mux refused a TLS connection", "side", side, "remote", remote.String(), "reason", reason, "err", err)
}

// Close stops accepting and waits for routing goroutines to finish. Stream
// layers return ErrMuxClosed from Accept afterwards.
func (m *Mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.done)
		m.cancel()
		err = m.ln.Close()
		m.mu.Lock()
		m.mu.closed = true
		var sessions []*yamux.Session
		for s := range m.mu.in {
			sessions = append(sessions, s)
		}
		m.mu.Unlock()
		// Dialed sessions are closed by their goroutines (runSession).
		for _, s := range sessions {
			s.Close()
		}
		m.wg.Wait()
	})
	return err
}

// StreamLayer is one raft group's view of the mux: a raft.StreamLayer.
type StreamLayer struct {
	mux       *Mux
	group     uint64
	accept    chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}

	// dialed are the connections this group opened and has not closed:
	// Close closes them, so RPCs in flight (a vote request a peer holds
	// while it has not opened the group yet) fail at once instead of
	// keeping the group's raft from shutting down.
	dialedMu sync.Mutex
	dialed   map[*dialedConn]struct{}

	// used is when a connection of the group last carried bytes (unix
	// nanoseconds), 0 if none did since closeIdleStreams last closed its
	// idle ones (idle.go).
	used atomic.Int64
}

// markUsed records that one of the group's connections carried bytes.
func (s *StreamLayer) markUsed() { s.used.Store(time.Now().UnixNano()) }

// usedConn is one of the group's connections: it records its use in the
// stream layer, so closeIdleStreams leaves a busy group's connections open.
type usedConn struct {
	net.Conn
	s *StreamLayer
}

func (c *usedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.s.markUsed()
	return n, err
}

func (c *usedConn) Write(b []byte) (int, error) {
	c.s.markUsed()
	return c.Conn.Write(b)
}

// dialedConn is a connection the group opened: it also forgets itself in
// its stream layer when closed.
type dialedConn struct {
	usedConn
	once sync.Once
}

func (c *dialedConn) Close() error {
	c.once.Do(func() {
		c.s.dialedMu.Lock()
		delete(c.s.dialed, c)
		c.s.dialedMu.Unlock()
	})
	return c.Conn.Close()
}

var _ raft.StreamLayer = (*StreamLayer)(nil)

// Dial opens a stream to the same group on the peer at addr.
func (s *StreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	var h [9]byte
	h[0] = kindRaft
	binary.BigEndian.PutUint64(h[1:], s.group)
	return s.dial(addr, timeout, h[:])
}

// dial opens a stream of the group (closed with it) that starts with
// header.
func (s *StreamLayer) dial(addr raft.ServerAddress, timeout time.Duration, header []byte) (net.Conn, error) {
	c, err := s.mux.dial(addr, timeout, header)
	if err != nil {
		return nil, err
	}
	dc := &dialedConn{usedConn: usedConn{Conn: c, s: s}}
	s.markUsed()
	s.dialedMu.Lock()
	select {
	case <-s.closed:
		s.dialedMu.Unlock()
		c.Close()
		return nil, ErrMuxClosed
	default:
	}
	if s.dialed == nil {
		s.dialed = map[*dialedConn]struct{}{}
	}
	s.dialed[dc] = struct{}{}
	s.dialedMu.Unlock()
	return dc, nil
}

// Accept returns the next connection routed to this group.
func (s *StreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.accept:
		s.markUsed()
		return &usedConn{Conn: c, s: s}, nil
	case <-s.closed:
		return nil, ErrMuxClosed
	case <-s.mux.done:
		return nil, ErrMuxClosed
	}
}

// Close detaches the group: Accept returns ErrMuxClosed and connections
// still arriving for it are refused. The mux's listener stays open.
func (s *StreamLayer) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.mux.mu.Lock()
		if s.mux.mu.groups[s.group] == s {
			delete(s.mux.mu.groups, s.group)
			s.mux.mu.detached[s.group] = struct{}{}
			if ch := s.mux.mu.waiting[s.group]; ch != nil {
				close(ch)
				delete(s.mux.mu.waiting, s.group)
			}
		}
		s.mux.mu.Unlock()
		s.dialedMu.Lock()
		conns := s.dialed
		s.dialed = nil
		s.dialedMu.Unlock()
		for c := range conns {
			c.Conn.Close()
		}
	})
	return nil
}

// Addr is the mux's advertised address (raft uses it as this server's).
func (s *StreamLayer) Addr() net.Addr { return muxAddr(s.mux.advertise) }

type muxAddr string

func (a muxAddr) Network() string { return "tcp" }
func (a muxAddr) String() string  { return string(a) }

// writeFrame and readFrame carry one length-prefixed message of the
// forwarding RPC. maxFrame bounds what a peer can make us allocate.
const maxFrame = 16 << 20

func writeFrame(w io.Writer, b []byte) error {
	// One Write: on a mux stream each Write is a frame of its own, a
	// wake-up of the session's sender and of the peer's reader.
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err := w.Write(buf)
	return err
}

func readFrame(r *bufio.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes is over the %d byte limit", size, maxFrame)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}

// dialForward opens a forwarding connection to the peer at addr.
func (m *Mux) dialForward(ctx context.Context, addr raft.ServerAddress) (net.Conn, error) {
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	return m.dial(addr, timeout, []byte{kindForward})
}
