package cluster

// One session per broker pair and direction. Every connection kind the
// mux serves (raft streams of every group, forwarded controller commands,
// watches; not the coalesced heartbeats, see below) is dialed as a yamux
// stream inside one
// session per destination broker: a session is one TCP connection (one
// TLS handshake with cluster TLS) that starts with the kindSession byte
// and the dialer's advertised raft address, then carries yamux frames.
// Each stream then starts with the same header a connection of its kind
// had before. With hundreds of raft groups each dialing its own pool,
// that was hundreds of connections (and handshakes, when leaders move or
// a broker restarts) per pair; now it is two, one dialed by each side.
// Each side dials its own session rather than reusing the one it
// accepted, so a fault between two brokers stays directional, as with
// separate connections (see internal/faultproxy).
//
// A session is dialed by one goroutine per destination while the groups
// that want it wait, each within its own Dial timeout; the dial has its
// own bound (sessionDialTimeout), so a half-open TLS handshake with one
// broker holds up only the streams to that broker, and only that long.
// A session whose peer stops answering is closed by yamux's keepalive
// (sessionKeepAlive, then the write timeout for the answer); the next
// Dial makes a new one. Raw connections of the other kinds are accepted
// too; a broker dials one of its own for its coalesced heartbeats to each
// peer (transport.go), whose frames and answers go a few times a second
// on an idle cluster: as a stream, each also woke the session's sender
// and reader on both sides.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	kindSession byte = 5 // a yamux session; each stream starts with a header

	// sessionDialTimeout bounds a session's TCP connect and TLS
	// handshake, whatever the timeouts of the Dials waiting for it.
	sessionDialTimeout = 10 * time.Second
	// sessionKeepAlive is how often a session pings its peer; a ping
	// unanswered within sessionWriteTimeout closes the session.
	sessionKeepAlive = 10 * time.Second
	// sessionWriteTimeout is yamux's bound on queueing a frame and on a
	// ping's answer. Closing a session fails the RPCs of every group
	// between the two brokers at once, so it is kept well above raft's
	// own RPC timeout (10 s): a peer starved of CPU answers late, and
	// its groups' own timeouts deal with it; only a peer that answers
	// nothing for this long (a silent network, a host gone without a
	// reset) loses the session.
	sessionWriteTimeout = 30 * time.Second
	// sessionStreamWindow is the most a stream may have in flight
	// unread: raft sends AppendEntries of up to 64 batches, and a
	// window of a few MiB keeps a stream from waiting on window updates
	// for each of them.
	sessionStreamWindow = 4 << 20
	// maxPeerName bounds the advertised address a peer sends.
	maxPeerName = 255
)

func (m *Mux) sessionConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	// Streams are accepted at once (routed on their own goroutines),
	// but a broker restart opens one per group and peer at once.
	c.AcceptBacklog = 1024
	c.KeepAliveInterval = sessionKeepAlive
	c.ConnectionWriteTimeout = sessionWriteTimeout
	c.MaxStreamWindowSize = sessionStreamWindow
	// A stream the peer has not acknowledged by then means a stuck
	// session (keepalive normally finds it first).
	c.StreamOpenTimeout = 30 * time.Second
	// A stream closed here whose peer never closes its side is freed
	// after this.
	c.StreamCloseTimeout = time.Minute
	c.LogOutput = nil
	c.Logger = yamuxLogger{m.log}
	return c
}

// yamuxLogger sends yamux's log lines to slog: a failed keepalive and a
// full accept backlog as warnings, the rest (mostly connections closed
// under it) for debugging.
type yamuxLogger struct{ log *slog.Logger }

func (l yamuxLogger) Print(v ...any) { l.line(fmt.Sprint(v...)) }
func (l yamuxLogger) Printf(format string, v ...any) {
	l.line(fmt.Sprintf(format, v...))
}
func (l yamuxLogger) Println(v ...any) { l.line(fmt.Sprint(v...)) }

func (l yamuxLogger) line(s string) {
	lvl := slog.LevelDebug
	if strings.Contains(s, "keepalive") || strings.Contains(s, "backlog") {
		lvl = slog.LevelWarn
	}
	l.log.Log(context.Background(), lvl, "raft mux session: "+strings.TrimSpace(s))
}

// outSession is the session to one destination: being dialed until ready
// is closed, then sess (nil and err set when the dial failed).
type outSession struct {
	addr  raft.ServerAddress
	ready chan struct{}
	sess  *yamux.Session
	err   error
}

// session returns the open session to addr, dialing one if there is none
// (one dial at a time per destination), and whether it was open before
// the call. It waits at most timeout (0: no bound but the dial's own).
func (m *Mux) session(addr raft.ServerAddress, timeout time.Duration) (sess *yamux.Session, reused bool, err error) {
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return nil, false, ErrMuxClosed
	}
	o := m.mu.out[addr]
	if o != nil {
		select {
		case <-o.ready:
			if o.sess == nil || o.sess.IsClosed() {
				o = nil
			} else {
				reused = true
			}
		default:
		}
	}
	if o == nil {
		o = &outSession{addr: addr, ready: make(chan struct{})}
		m.mu.out[addr] = o
		m.wg.Go(func() { m.runSession(o) })
	}
	m.mu.Unlock()
	select {
	case <-o.ready:
	case <-expired:
		return nil, false, fmt.Errorf("no session with the raft mux at %s within %s: %w", addr, timeout, os.ErrDeadlineExceeded)
	case <-m.done:
		return nil, false, ErrMuxClosed
	}
	if o.err != nil {
		return nil, false, o.err
	}
	return o.sess, reused, nil
}

// runSession dials o and, when that works, owns the session until it
// closes (or the mux does), then forgets it.
func (m *Mux) runSession(o *outSession) {
	sess, err := m.dialSession(o.addr)
	m.mu.Lock()
	switch {
	case err != nil:
		o.err = err
	case m.mu.closed:
		sess.Close()
		o.err = ErrMuxClosed
	default:
		o.sess = sess
	}
	if o.sess == nil && m.mu.out[o.addr] == o {
		delete(m.mu.out, o.addr)
	}
	m.mu.Unlock()
	close(o.ready)
	if o.sess == nil {
		return
	}
	select {
	case <-sess.CloseChan():
	case <-m.done:
	}
	sess.Close()
	m.mu.Lock()
	if m.mu.out[o.addr] == o {
		delete(m.mu.out, o.addr)
	}
	m.mu.Unlock()
}

// dialSession connects to addr (TLS when configured), sends the session
// header and starts the yamux client.
func (m *Mux) dialSession(addr raft.ServerAddress) (*yamux.Session, error) {
	name := string(m.advertise)
	if len(name) > maxPeerName {
		name = name[:maxPeerName]
	}
	c, err := m.connect(addr, sessionDialTimeout, append([]byte{kindSession, byte(len(name))}, name...))
	if err != nil {
		return nil, err
	}
	sess, err := yamux.Client(c, m.sessionConfig())
	if err != nil {
		c.Close()
		return nil, err
	}
	watchSession(sess)
	return sess, nil
}

// connect opens a connection of its own to addr (TLS when configured)
// within timeout and sends header.
func (m *Mux) connect(addr raft.ServerAddress, timeout time.Duration, header []byte) (net.Conn, error) {
	peer := string(addr)
	m.stats.dials.WithLabelValues(peer).Inc()
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	d := net.Dialer{}
	if la := m.localAddrFor(addr); la != nil {
		d.LocalAddr = la
	}
	c, err := d.DialContext(ctx, "tcp", peer)
	if err != nil {
		m.dialFailed(peer, err)
		return nil, err
	}
	if m.clientTLS != nil {
		tc := tls.Client(c, m.clientTLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			m.tlsFailed("dial", muxAddr(addr), err)
			m.stats.dialFailures.WithLabelValues(peer, "tls_"+tlsFailureReason(err)).Inc()
			return nil, fmt.Errorf("cannot open a TLS connection to the raft mux at %s: %w", addr, err)
		}
		c = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
	}
	if _, err := c.Write(header); err != nil {
		c.Close()
		m.dialFailed(peer, err)
		return nil, fmt.Errorf("cannot send the connection header to %s: %w", addr, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// dialFailed counts a dial that failed before or after TLS.
func (m *Mux) dialFailed(peer string, err error) {
	reason := "connect"
	var te interface{ Timeout() bool }
	switch {
	case isRefused(err):
		reason = "refused"
	case errors.As(err, &te) && te.Timeout():
		reason = "timeout"
	}
	m.stats.dialFailures.WithLabelValues(peer, reason).Inc()
}

// serveSession runs an accepted session (its kind byte read): each stream
// is routed like a connection, on its own goroutine.
func (m *Mux) serveSession(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(headerTimeout))
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		c.Close()
		return
	}
	name := make([]byte, n[0])
	if _, err := io.ReadFull(c, name); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	sess, err := yamux.Server(c, m.sessionConfig())
	if err != nil {
		c.Close()
		return
	}
	watchSession(sess)
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		sess.Close()
		return
	}
	m.mu.in[sess] = string(name)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.mu.in, sess)
		m.mu.Unlock()
		sess.Close()
	}()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		sc := trackStream(sess, st)
		if !m.serveConn(sc, func() { m.routeConn(sc, false) }) {
			return
		}
	}
}

// streamConn is a yamux stream whose Close ends it for this side at once
// (yamux's Close only half-closes: a blocked Read would go on until the
// peer closes too), as closing a TCP connection did: the mux and the raft
// transport close connections to abort RPCs in flight.
type streamConn struct {
	*yamux.Stream
	closed atomic.Bool
	// ended: its session closed (see watchSession).
	ended atomic.Bool
	of    *sessionStreams
}

func (c *streamConn) Read(b []byte) (int, error) {
	n, err := c.Stream.Read(b)
	if err != nil && (c.closed.Load() || c.ended.Load()) {
		err = net.ErrClosed
	}
	return n, err
}

func (c *streamConn) Write(b []byte) (int, error) {
	n, err := c.Stream.Write(b)
	if err != nil && c.closed.Load() {
		err = net.ErrClosed
	}
	return n, err
}

func (c *streamConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Stream.SetWriteDeadline(t)
}

// SetReadDeadline keeps the deadline Close or the session's end set.
func (c *streamConn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() || c.ended.Load() {
		return nil
	}
	return c.Stream.SetReadDeadline(t)
}

func (c *streamConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.of != nil {
		c.of.remove(c)
	}
	err := c.Stream.Close()
	// Wakes a blocked Read (and fails the next ones).
	_ = c.Stream.SetReadDeadline(time.Unix(1, 0))
	return err
}

// end fails the stream's Reads at once: its session has closed.
func (c *streamConn) end() {
	c.ended.Store(true)
	_ = c.Stream.SetReadDeadline(time.Unix(1, 0))
}

// sessionStreams are the open streams of one session. A yamux (v0.1.2)
// Read that waits for data on a session that has begun to close spins:
// it wakes for the closed session, finds its stream not closed yet and
// waits again, at once, until the session's Close has marked that
// stream closed. Close does so stream by stream under the session's
// lock, each time taking the stream's lock from its spinning reader;
// with many raft streams per session and the CPU shared, that took
// minutes (a broker stopped with SIGTERM was still closing a session
// when it was killed 30 s later, its raft readers spinning). A Read
// with a read deadline that has passed returns instead, so every
// stream of a closing session gets one as soon as the close begins.
type sessionStreams struct {
	mu    sync.Mutex
	m     map[*streamConn]struct{}
	ended bool
}

// sessions maps each open *yamux.Session to its *sessionStreams.
var sessions sync.Map

// watchSession tracks sess's streams (trackStream) and ends them when
// sess closes.
func watchSession(sess *yamux.Session) {
	ss := &sessionStreams{m: map[*streamConn]struct{}{}}
	sessions.Store(sess, ss)
	go func() {
		<-sess.CloseChan()
		sessions.Delete(sess)
		ss.mu.Lock()
		ss.ended = true
		open := make([]*streamConn, 0, len(ss.m))
		for c := range ss.m {
			open = append(open, c)
		}
		clear(ss.m)
		ss.mu.Unlock()
		for _, c := range open {
			c.end()
		}
	}()
}

// trackStream wraps st, a stream of sess.
func trackStream(sess *yamux.Session, st *yamux.Stream) *streamConn {
	c := &streamConn{Stream: st}
	v, ok := sessions.Load(sess)
	if !ok {
		// Closed already (watchSession forgot it): fail its Reads.
		c.end()
		return c
	}
	ss := v.(*sessionStreams)
	ss.mu.Lock()
	if ss.ended {
		ss.mu.Unlock()
		c.end()
		return c
	}
	ss.m[c] = struct{}{}
	c.of = ss
	ss.mu.Unlock()
	return c
}

func (ss *sessionStreams) remove(c *streamConn) {
	ss.mu.Lock()
	delete(ss.m, c)
	ss.mu.Unlock()
}

// muxStats are the mux's metrics per peer broker (by the raft address it
// advertises): session dials and their failures, and, at each scrape,
// the open sessions and streams by direction (out: dialed here).
type muxStats struct {
	dials        *prometheus.CounterVec
	dialFailures *prometheus.CounterVec
	sessions     *prometheus.Desc
	streams      *prometheus.Desc
	m            *Mux
}

func newMuxStats(m *Mux) *muxStats {
	return &muxStats{
		m:            m,
		dials:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_cluster_mux_session_dials_total", Help: "Sessions and heartbeat links (one TCP connection each, TLS with cluster TLS) this broker dialed to another broker's raft mux, by peer raft address."}, []string{"peer"}),
		dialFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_cluster_mux_session_dial_failures_total", Help: "Session and heartbeat link dials to another broker's raft mux that failed, by peer raft address and reason (refused, timeout, connect, tls_<reason of simtel_broker_cluster_tls_failures_total>)."}, []string{"peer", "reason"}),
		sessions:     prometheus.NewDesc("simtel_broker_cluster_mux_sessions", "Open sessions with other brokers' raft muxes, by peer raft address and direction (out: dialed by this broker, in: accepted).", []string{"peer", "direction"}, nil),
		streams:      prometheus.NewDesc("simtel_broker_cluster_mux_streams", "Open streams (raft connections of every group, heartbeat links, watches, forwarded commands) in the sessions with other brokers, by peer raft address and direction.", []string{"peer", "direction"}, nil),
	}
}

func (s *muxStats) Describe(ch chan<- *prometheus.Desc) {
	s.dials.Describe(ch)
	s.dialFailures.Describe(ch)
	ch <- s.sessions
	ch <- s.streams
}

func (s *muxStats) Collect(ch chan<- prometheus.Metric) {
	s.dials.Collect(ch)
	s.dialFailures.Collect(ch)
	type key struct{ peer, dir string }
	sessions, streams := map[key]int{}, map[key]int{}
	for _, o := range s.m.openSessions() {
		k := key{o.peer, o.dir}
		sessions[k]++
		streams[k] += o.sess.NumStreams()
	}
	for k, v := range sessions {
		ch <- prometheus.MustNewConstMetric(s.sessions, prometheus.GaugeValue, float64(v), k.peer, k.dir)
		ch <- prometheus.MustNewConstMetric(s.streams, prometheus.GaugeValue, float64(streams[k]), k.peer, k.dir)
	}
}

type openSession struct {
	peer, dir string
	sess      *yamux.Session
}

// openSessions lists the mux's open sessions, dialed and accepted.
func (m *Mux) openSessions() []openSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []openSession
	for addr, o := range m.mu.out {
		select {
		case <-o.ready:
			if o.sess != nil && !o.sess.IsClosed() {
				out = append(out, openSession{string(addr), "out", o.sess})
			}
		default:
		}
	}
	for sess, peer := range m.mu.in {
		if !sess.IsClosed() {
			out = append(out, openSession{peer, "in", sess})
		}
	}
	return out
}

// Collector is the mux's metrics (see muxStats).
func (m *Mux) Collector() prometheus.Collector { return m.stats }
