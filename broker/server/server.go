// Package server is the broker's connection server: the Kafka listeners
// (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), each connection's read and
// write loops, request decoding, dispatch through the API table
// (package kapi), and the APIs a connection answers itself: ApiVersions
// and the SASL exchange. The broker (package broker) builds the table
// and serves its partitions and coordinators behind it.
package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/storage"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// Config is what the server needs of the broker's configuration, already
// validated and given its defaults (broker.Config.Validate).
type Config struct {
	// Listeners are bound by New; AdvertisedListeners name the address
	// clients are told for each (see the broker's Config).
	Listeners           []ListenerSpec
	AdvertisedListeners []ListenerSpec
	// TLS, TLSPrincipalMapping and TLSReloadInterval serve the SSL and
	// SASL_SSL listeners.
	TLS                 tlsfiles.Files
	TLSPrincipalMapping string
	TLSReloadInterval   time.Duration
	// SASL configures the SASL listeners; its Credentials must be set
	// when it names mechanisms.
	SASL SASLConfig
	// MaxRequestBytes bounds one request frame, MaxInflightRequestBytes
	// the request bytes held by all connections, MaxInflightPerConn the
	// requests one connection has in flight.
	MaxRequestBytes         int32
	MaxInflightRequestBytes int64
	MaxInflightPerConn      int

	// APIs is the table requests are dispatched through; New adds the
	// APIs the server answers itself (ApiVersions, SaslHandshake,
	// SaslAuthenticate).
	APIs *kapi.Registry
	// Authorizer is handed to every request (nil: everything allowed).
	Authorizer auth.Authorizer
	// Metrics is where the server's series are registered.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
}

// Server serves Kafka connections on the broker's listeners.
type Server struct {
	cfg      Config
	log      *slog.Logger
	apis     *kapi.Registry
	metrics  *metrics
	reqBytes *semaphore.Weighted // request bytes in flight, all connections
	sasl     *saslState

	// listeners are the bound listeners (listeners.go), bound their
	// public view; tls serves the certificate of the TLS ones,
	// principals names their clients.
	listeners  []*listener
	bound      []Bound
	tls        *tlsfiles.Server
	principals *auth.PrincipalMapping

	connsMu sync.Mutex
	conns   map[net.Conn]struct{}
}

// New builds the SASL mechanisms and binds every listener, so a caller
// knows the addresses before Run. Close releases the listeners of a server
// that is not run.
func New(cfg Config) (*Server, error) {
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		apis:     cfg.APIs,
		metrics:  newMetrics(cfg.Metrics),
		reqBytes: semaphore.NewWeighted(cfg.MaxInflightRequestBytes),
		conns:    make(map[net.Conn]struct{}),
	}
	s.apis.Add(apis.Bind(s)...)
	var err error
	if s.sasl, err = newSASL(cfg.SASL, s.log); err != nil {
		return nil, err
	}
	if err := s.openListeners(); err != nil {
		s.CloseListeners()
		return nil, err
	}
	return s, nil
}

// Run accepts connections on every listener, and watches the TLS files,
// until ctx ends and the listeners are closed (CloseListeners); it returns
// once every connection it accepted has ended.
func (s *Server) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, l := range s.listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serve(ctx, l)
		}()
	}
	if s.tls != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.tls.Watch(ctx, s.cfg.TLSReloadInterval)
		}()
	}
	wg.Wait()
}

func (s *Server) trackConn(nc net.Conn, add bool) {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	if add {
		s.conns[nc] = struct{}{}
	} else {
		delete(s.conns, nc)
	}
}

// CloseConns closes every open client connection.
func (s *Server) CloseConns() {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	for nc := range s.conns {
		nc.Close()
	}
}

// A conn serves one client connection with two goroutines:
//
//  1. readLoop decodes request frames in order and dispatches each one.
//     Handlers that only touch in-memory state answer inline; Produce
//     appends inline (so a connection's appends keep request order, which
//     idempotent sequence numbers rely on) and waits for durability in a
//     goroutine; Fetch long-polls and group joins run in a goroutine.
//  2. writeLoop takes the Slot responses in request order and writes
//     each once it is complete, so pipelined requests are answered in the
//     order they arrived even when a later one finishes first.
//
// The out channel bounds how many requests one connection may have in
// flight; a client that pipelines more is back-pressured by TCP.
type conn struct {
	s        *Server
	nc       net.Conn
	remote   string
	host     string // remote without the port, as Kafka reports it in DescribeGroups
	out      chan *Slot
	ctx      context.Context
	cancel   context.CancelFunc
	clientID string

	// listener is the name of the listener the connection came in on and
	// proto its security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
	// SASL_SSL); principal is who it authenticated as: auth.Anonymous
	// until then, or the subject of its TLS client certificate.
	listener  string
	proto     string
	principal auth.Principal
	// sasl is the connection's SASL exchange and session (sasl.go).
	sasl saslConn
}

// Slot is one request's response slot: the server's kapi.Request.Slot,
// through which the handlers declared with AddServe answer.
type Slot struct {
	key     int16
	version int16
	corr    int32
	start   time.Time
	done    chan struct{}

	// Set by the handler before done is closed.
	resp       kmsg.Response
	noResponse bool       // acks=0 produce
	fetch      *FetchWire // zero-copy fetch body instead of resp
	closeConn  bool       // handler asks to drop the connection after this
	// raw answers a v0 SASL exchange's token: rawToken is written with a
	// size prefix only (sasl.go).
	raw      bool
	rawToken []byte
	// conn is the connection, for the SASL handlers, which change its
	// state.
	conn *conn

	frameBytes int64               // request size held in sem until answered
	sem        *semaphore.Weighted // nil once released
}

func (p *Slot) finish(resp kmsg.Response) {
	p.resp = resp
	close(p.done)
}

// Corr is the request's correlation id.
func (p *Slot) Corr() int32 { return p.corr }

// Finish answers the request with resp.
func (p *Slot) Finish(resp kmsg.Response) { p.finish(resp) }

// FinishFetch answers a Fetch with its zero-copy body; the slot releases
// w's read results once written.
func (p *Slot) FinishFetch(w *FetchWire) {
	p.fetch = w
	close(p.done)
}

// Refuse answers nothing and closes the connection, as Kafka does with a
// request it cannot answer.
func (p *Slot) Refuse() {
	p.closeConn = true
	p.finish(nil)
}

// FinishNoResponse ends a request that gets no response (an acks=0
// Produce); closeConn drops the connection once it is the request's turn,
// so the client refreshes its metadata instead of sending into a void.
func (p *Slot) FinishNoResponse(closeConn bool) {
	p.noResponse = true
	p.closeConn = closeConn
	close(p.done)
}

// protocolError makes the connection close after one log line.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

func protoErrorf(format string, args ...any) error {
	return &protocolError{msg: fmt.Sprintf(format, args...)}
}

func (s *Server) serveConn(ctx context.Context, nc net.Conn, l *listener, principal auth.Principal) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	cctx, cancel := context.WithCancel(ctx)
	c := &conn{
		s:         s,
		nc:        nc,
		remote:    nc.RemoteAddr().String(),
		host:      remoteHost(nc.RemoteAddr().String()),
		out:       make(chan *Slot, s.cfg.MaxInflightPerConn),
		ctx:       cctx,
		cancel:    cancel,
		listener:  l.Name,
		proto:     l.Proto,
		principal: principal,
	}
	s.metrics.connections.Inc()
	defer s.metrics.connections.Dec()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.writeLoop()
	}()
	err := c.readLoop()
	var pe *protocolError
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, context.Canceled):
	case errors.As(err, &pe):
		s.log.Warn("closing connection after bad request", "remote", c.remote, "client_id", c.clientID, "err", err)
	default:
		s.log.Debug("connection read ended", "remote", c.remote, "err", err)
	}
	close(c.out)
	wg.Wait()
	cancel()
	nc.Close()
}

// frameReader reads a connection's frames. Between requests it holds no
// read buffer: with nothing buffered it waits in a read of the next
// frame's 4-byte size prefix alone, and takes a buffer from readBufs for
// the rest of the frame, which goes back once everything buffered was
// read. An idle connection (an agent sends once a second) then costs no
// buffer, and a client that pipelines keeps its buffer between frames.
type frameReader struct {
	nc net.Conn
	r  *bufio.Reader // from readBufs; nil while idle
}

// size waits for the next frame and returns its size prefix.
func (f *frameReader) size() (uint32, error) {
	var sz [4]byte
	if f.r != nil && f.r.Buffered() == 0 {
		f.release()
	}
	if f.r == nil {
		if _, err := io.ReadFull(f.nc, sz[:]); err != nil {
			return 0, err
		}
		f.r = readBufs.Get().(*bufio.Reader)
		f.r.Reset(f.nc)
	} else if _, err := io.ReadFull(f.r, sz[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(sz[:]), nil
}

// Read reads the frame whose size was read last.
func (f *frameReader) Read(p []byte) (int, error) { return f.r.Read(p) }

// release gives the buffer back; what it holds is dropped.
func (f *frameReader) release() {
	if f.r != nil {
		f.r.Reset(nil)
		readBufs.Put(f.r)
		f.r = nil
	}
}

var readBufs = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufBytes) }}

// readFrame reads one size-prefixed frame. The buffer grows as bytes arrive
// so a forged 2 GB length prefix costs nothing until the bytes are sent.
func (c *conn) readFrame(r *frameReader) ([]byte, error) {
	size, err := r.size()
	if err != nil {
		return nil, err
	}
	n := int32(size)
	if n < 8 || n > c.s.cfg.MaxRequestBytes {
		c.s.metrics.badFrames.Inc()
		return nil, protoErrorf("request frame of %d bytes is outside [8, %d] (socket.request.max.bytes)", n, c.s.cfg.MaxRequestBytes)
	}
	// Bound the request bytes held by all connections together
	// (queued.max.request.bytes): a reader waits here rather than letting
	// many large requests exhaust memory. Released once answered.
	if err := c.s.reqBytes.Acquire(c.ctx, int64(n)); err != nil {
		return nil, err
	}
	buf, err := c.readBody(r, n)
	if err != nil {
		c.s.reqBytes.Release(int64(n))
	}
	return buf, err
}

func (c *conn) readBody(r io.Reader, n int32) ([]byte, error) {
	const step = 1 << 20
	if n <= step {
		buf := make([]byte, n)
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	buf := make([]byte, 0, step)
	for len(buf) < int(n) {
		chunk := min(int(n)-len(buf), max(step, len(buf)))
		if cap(buf)-len(buf) < chunk {
			nb := make([]byte, len(buf), len(buf)+chunk)
			copy(nb, buf)
			buf = nb
		}
		if _, err := io.ReadFull(r, buf[len(buf):len(buf)+chunk]); err != nil {
			return nil, err
		}
		buf = buf[:len(buf)+chunk]
	}
	return buf, nil
}

func (c *conn) readLoop() error {
	r := &frameReader{nc: c.nc}
	defer r.release()
	for {
		if c.sasl.raw {
			if err := c.readRawSASL(r); err != nil {
				return err
			}
			continue
		}
		frame, err := c.readFrame(r)
		if err != nil {
			return err
		}
		req, hdr, err := decodeRequest(c.s.apis, frame)
		if hdr.clientID != nil {
			c.clientID = *hdr.clientID
		}
		p := &Slot{key: hdr.key, version: hdr.version, corr: hdr.corr, start: time.Now(), done: make(chan struct{}), frameBytes: int64(len(frame)), sem: c.s.reqBytes, conn: c}
		if errors.Is(err, errTooNewAPIVersions) {
			// KIP-511: answer a too-new ApiVersions with a v0 body that
			// carries UNSUPPORTED_VERSION and our ranges so the client can
			// retry with a version we speak.
			p.version = 0
			c.out <- p
			p.finish(c.s.apiVersionsResponse(0, true))
			continue
		}
		if err != nil {
			p.release()
			c.s.metrics.badFrames.Inc()
			return err
		}
		if err := c.admit(hdr.key); err != nil {
			p.release()
			return err
		}
		c.s.metrics.bytesIn.WithLabelValues(c.s.apis.Name(hdr.key)).Add(float64(len(frame) + 4))
		select {
		case c.out <- p:
		case <-c.ctx.Done():
			p.release()
			return c.ctx.Err()
		}
		c.s.dispatch(c, req, p)
		if c.sasl.failed != nil {
			return c.sasl.failed // after the failure's answer
		}
		if p.closeConn {
			<-p.done
			return protoErrorf("%s v%d request was refused", c.s.apis.Name(hdr.key), hdr.version)
		}
	}
}

func (c *conn) writeLoop() {
	var w *bufio.Writer // from writeBufs while responses are queued
	var buf []byte
	broken := false
	for p := range c.out {
		select {
		case <-p.done:
		case <-c.ctx.Done():
			<-p.done // handlers observe ctx and finish promptly
		}
		c.s.metrics.observeRequest(p, c.s.apis.Name(p.key))
		c.logSlow(p)
		if p.closeConn || (!p.noResponse && p.resp == nil && p.fetch == nil && !p.raw) {
			// The handler refused the request (or acks=0 failed): drop the
			// connection without answering, as Kafka does.
			p.release()
			if !broken {
				if w != nil {
					_ = w.Flush()
				}
				broken = true
				c.cancel()
				c.nc.Close()
			}
			continue
		}
		if p.noResponse || broken {
			p.release()
			continue
		}
		if w == nil {
			w = writeBufs.Get().(*bufio.Writer)
			w.Reset(c.nc)
		}
		var err error
		switch {
		case p.fetch != nil:
			err = p.fetch.writeTo(c, w)
		case p.raw:
			buf = binary.BigEndian.AppendUint32(buf[:0], uint32(len(p.rawToken)))
			_, err = w.Write(append(buf, p.rawToken...))
		default:
			buf = appendResponse(buf[:0], p)
			c.s.metrics.bytesOut.WithLabelValues(c.s.apis.Name(p.key)).Add(float64(len(buf)))
			_, err = w.Write(buf)
		}
		p.release()
		if err == nil && len(c.out) == 0 {
			if err = w.Flush(); err == nil {
				putWriteBuf(w) // idle until the next request
				w = nil
				if cap(buf) > readBufBytes {
					buf = nil // a large response's (Metadata of many partitions)
				}
			}
		}
		if err != nil {
			c.s.log.Debug("connection write failed", "remote", c.remote, "err", err)
			broken = true
			c.cancel()
			c.nc.Close()
		}
	}
	if w != nil {
		if !broken {
			_ = w.Flush()
		}
		putWriteBuf(w)
	}
}

// A connection lives as long as its client, mostly idle (an agent sends
// once a second), so its buffers are what thousands of clients cost a
// broker: with 64 KiB each way per connection they were most of its
// heap (simtel bench agents). Both are taken from pools only while in
// use: the read buffer while a frame is read or more bytes are buffered
// (frameReader), the write buffer while responses are queued. The read
// buffer is small: a frame larger than it is read straight into the
// frame's own buffer. Write buffers stay as large as sendfileMin, below
// which fetched file ranges are copied into them.
const readBufBytes = 4 << 10

var writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, sendfileMin) }}

func putWriteBuf(w *bufio.Writer) {
	w.Reset(nil) // drop the connection and any write error
	writeBufs.Put(w)
}

// remoteHost is a client's address without the port: what ACLs name as
// their host and what the authorizer compares with.
func remoteHost(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// release returns what the request held: its fetch file ranges and its
// share of the broker's in-flight request bytes. Called exactly once.
func (p *Slot) release() {
	if p.fetch != nil {
		p.fetch.release()
	}
	if p.sem != nil {
		p.sem.Release(p.frameBytes)
		p.sem = nil
	}
}

// appendResponse frames a response: size, correlation id, header tags for
// flexible responses (ApiVersions always uses header v0), body.
func appendResponse(dst []byte, p *Slot) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(p.corr))
	if p.resp.IsFlexible() && p.key != 18 {
		dst = append(dst, 0)
	}
	dst = p.resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst
}

// serve accepts connections on one listener until ctx ends.
func (s *Server) serve(ctx context.Context, l *listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("accept failed", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.trackConn(nc, true)
			defer s.trackConn(nc, false)
			s.accept(ctx, l, nc)
		}()
	}
}

type requestHeader struct {
	key, version int16
	corr         int32
	clientID     *string
}

var errTooNewAPIVersions = errors.New("ApiVersions request newer than supported")

// decodeRequest parses one request frame (without its size prefix). Any
// error but errTooNewAPIVersions is a *protocolError: the connection closes.
// kmsg bounds every allocation by the bytes actually present, so a forged
// array length cannot make it allocate more than the frame holds.
func decodeRequest(reg *kapi.Registry, frame []byte) (kmsg.Request, requestHeader, error) {
	var h requestHeader
	rd := kbin.Reader{Src: frame}
	h.key = rd.Int16()
	h.version = rd.Int16()
	h.corr = rd.Int32()
	h.clientID = rd.NullableString()
	if !rd.Ok() {
		return nil, h, protoErrorf("request header is truncated")
	}
	req := kmsg.RequestForKey(h.key)
	api, supported := reg.Get(h.key)
	if req == nil || !supported {
		return nil, h, protoErrorf("unsupported api key %d", h.key)
	}
	if h.key == 18 && h.version > api.Max {
		return nil, h, errTooNewAPIVersions
	}
	if h.version < api.Min || h.version > api.Max {
		return nil, h, protoErrorf("%s v%d is not supported (supported v%d-v%d)", api.Name(), h.version, api.Min, api.Max)
	}
	req.SetVersion(h.version)
	if req.IsFlexible() {
		kmsg.SkipTags(&rd)
	}
	if !rd.Ok() {
		return nil, h, protoErrorf("%s v%d request header tags are malformed", api.Name(), h.version)
	}
	if err := req.ReadFrom(rd.Src); err != nil {
		return nil, h, protoErrorf("%s v%d request body is malformed: %v", api.Name(), h.version, err)
	}
	return req, h, nil
}

// slowRequest is how long a request other than the ones that wait by
// design (Fetch, JoinGroup, SyncGroup) may take before it is logged.
const slowRequest = 3 * time.Second

// logSlow logs a request answered after slowRequest. Responses go out in
// request order, so the time includes waiting behind earlier requests of
// the same connection; those are logged too.
func (c *conn) logSlow(p *Slot) {
	switch p.key {
	case 1, 11, 14:
		return
	}
	if d := time.Since(p.start); d > slowRequest {
		c.s.log.Warn("slow request", "api", c.s.apis.Name(p.key), "version", p.version,
			"seconds", d.Round(time.Millisecond).Seconds(), "client", c.clientID, "remote", c.host)
	}
}

// A Fetch answer (the broker's 01_fetch.go, "Zero-copy responses") is
// written as its encoded bytes and the segment file ranges holding its
// records.

// sendfileMin is the size from which a chunk goes out with sendfile; smaller
// chunks are read into the write buffer, which costs fewer syscalls.
const sendfileMin = 64 << 10

type wirePiece struct {
	data  []byte
	chunk storage.Chunk
}

// FetchWire is an encoded fetch response body made of bytes and file
// ranges.
type FetchWire struct {
	pieces  []wirePiece
	size    int64 // bytes after the 4-byte size prefix
	results []*storage.ReadResult
}

// NewFetchWire starts a body whose file ranges are those of results,
// released once the body is written.
func NewFetchWire(results []*storage.ReadResult) *FetchWire {
	return &FetchWire{results: results}
}

// AddBytes appends encoded bytes (held, not copied).
func (f *FetchWire) AddBytes(data []byte) {
	if len(data) == 0 {
		return // a piece without data is a file range
	}
	f.pieces = append(f.pieces, wirePiece{data: data})
	f.size += int64(len(data))
}

// AddChunk appends a file range of one of the results.
func (f *FetchWire) AddChunk(c storage.Chunk) {
	f.pieces = append(f.pieces, wirePiece{chunk: c})
	f.size += c.Size
}

func (f *FetchWire) release() {
	for _, r := range f.results {
		r.Release()
	}
	f.results = nil
}

func (f *FetchWire) writeTo(c *conn, w *bufio.Writer) error {
	var sz [4]byte
	binary.BigEndian.PutUint32(sz[:], uint32(f.size))
	if _, err := w.Write(sz[:]); err != nil {
		return err
	}
	c.s.metrics.bytesOut.WithLabelValues("Fetch").Add(float64(f.size + 4))
	for _, p := range f.pieces {
		if p.data != nil {
			if _, err := w.Write(p.data); err != nil {
				return err
			}
			continue
		}
		ch := p.chunk
		if ch.Size < sendfileMin {
			if w.Available() < int(ch.Size) {
				if err := w.Flush(); err != nil {
					return err
				}
			}
			if int(ch.Size) <= w.Available() {
				buf := w.AvailableBuffer()[:ch.Size]
				if _, err := ch.File.ReadAt(buf, ch.Pos); err != nil {
					return fmt.Errorf("cannot read segment for fetch: %w", err)
				}
				if _, err := w.Write(buf); err != nil {
					return err
				}
				continue
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if err := sendFile(c.nc, ch.File, ch.Pos, ch.Size); err != nil {
			return err
		}
	}
	return nil
}

// sendFile copies n bytes at off of f to the socket with sendfile(2),
// which takes an explicit offset, so concurrent fetches of one segment do
// not race on the file position.
func sendFile(nc net.Conn, f *os.File, off, n int64) error {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		_, err := io.Copy(nc, io.NewSectionReader(f, off, n))
		return err
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	fc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	cerr := fc.Control(func(ffd uintptr) {
		werr := rc.Write(func(cfd uintptr) bool {
			for n > 0 {
				w, err := unix.Sendfile(int(cfd), int(ffd), &off, int(min(n, 1<<30)))
				if w > 0 {
					n -= int64(w)
				}
				switch {
				case err == unix.EAGAIN:
					return false // wait until the socket is writable
				case err == unix.EINTR:
					continue
				case err != nil:
					serr = fmt.Errorf("sendfile: %w", err)
					return true
				case w == 0:
					serr = fmt.Errorf("sendfile: segment ended %d bytes early", n)
					return true
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	if cerr != nil {
		return cerr
	}
	return serr
}
