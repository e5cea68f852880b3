package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The transports of `simtel bench agent`. The generator fills a lineBatch
// and hands it to a lineSender: a datagram for UDP, one write for TCP, one
// POST body for HTTP.

// lineBatch is one datagram, write or request body of whole lines.
type lineBatch struct {
	buf   []byte
	lines int
	first time.Time // when its first line was added
}

func (b *lineBatch) reset() {
	b.buf, b.lines = b.buf[:0], 0
}

// lineSender sends batches. next and send are called from the generator's
// goroutine only.
type lineSender interface {
	// next returns an empty batch to fill. It blocks while every batch
	// is in flight (HTTP), which is how the agent's backpressure reaches
	// the generator.
	next(ctx context.Context) (*lineBatch, error)
	// send sends b and gives it back to the sender. For UDP and TCP the
	// batch has been written when send returns; for HTTP it is queued for
	// a request. An error ends the run.
	send(ctx context.Context, b *lineBatch) error
	// close waits for the batches in flight and releases the connections.
	close()
	// counts reports what was sent; call it after close, or for progress.
	counts() senderCounts
}

// senderCounts is what a sender has done. For HTTP a line counts as sent
// when its request was answered, whatever the status.
type senderCounts struct {
	Lines, Batches int64
	Errors         int64 // failed writes or requests (no answer)
	FirstErr       string
	Status         map[string]int64 // HTTP: answers by status code
	OKLines        int64            // HTTP: lines of requests answered 2xx
}

// errRecorder keeps the count and the first of a sender's errors.
type errRecorder struct {
	n     atomic.Int64
	mu    sync.Mutex
	first string
}

// add counts err and keeps it if it is the first.
func (e *errRecorder) add(err error) {
	e.n.Add(1)
	e.note(err)
}

// note keeps err if it is the first, without counting it.
func (e *errRecorder) note(err error) {
	e.mu.Lock()
	if e.first == "" {
		e.first = err.Error()
	}
	e.mu.Unlock()
}

func (e *errRecorder) fill(c *senderCounts) {
	c.Errors = e.n.Load()
	e.mu.Lock()
	c.FirstErr = e.first
	e.mu.Unlock()
}

// connSender writes each batch to one connection: a connected UDP socket
// (a datagram per batch) or a TCP stream.
type connSender struct {
	conn    net.Conn
	udp     bool
	batch   lineBatch
	lines   atomic.Int64
	batches atomic.Int64
	errs    errRecorder
}

func newConnSender(network, addr string, batchBytes int) (*connSender, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the agent on %s %s: %w", network, addr, err)
	}
	return &connSender{conn: c, udp: network == "udp", batch: lineBatch{buf: make([]byte, 0, batchBytes)}}, nil
}

func (s *connSender) next(context.Context) (*lineBatch, error) {
	s.batch.reset()
	return &s.batch, nil
}

func (s *connSender) send(_ context.Context, b *lineBatch) error {
	if _, err := s.conn.Write(b.buf); err != nil {
		if s.udp {
			// A datagram the kernel refuses (ENOBUFS, or ECONNREFUSED
			// from an earlier datagram nobody read) is lost, as it is
			// for any UDP sender; count it and go on.
			s.errs.add(err)
			return nil
		}
		return fmt.Errorf("cannot write to the agent: %w", err)
	}
	s.lines.Add(int64(b.lines))
	s.batches.Add(1)
	return nil
}

func (s *connSender) close() { s.conn.Close() }

func (s *connSender) counts() senderCounts {
	c := senderCounts{Lines: s.lines.Load(), Batches: s.batches.Load()}
	s.errs.fill(&c)
	return c
}

// httpSender POSTs batches from a few goroutines, each with its own
// keep-alive connection, as several Telegraf outputs or client threads
// would. The generator fills one batch while the others are in flight.
type httpSender struct {
	ctx    context.Context // the run's: cancelling it ends the requests in flight
	url    string
	client *http.Client
	todo   chan *lineBatch
	free   chan *lineBatch
	wg     sync.WaitGroup

	lines, batches, okLines atomic.Int64
	errs                    errRecorder
	mu                      struct {
		sync.Mutex
		status map[string]int64
	}
}

func newHTTPSender(ctx context.Context, url string, senders, batchBytes int) *httpSender {
	s := &httpSender{
		ctx: ctx,
		url: url,
		client: &http.Client{
			Timeout: time.Minute, // the agent waits up to 30 s for spool space
			Transport: &http.Transport{
				MaxIdleConnsPerHost: senders,
				DisableCompression:  true,
				DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			},
		},
		todo: make(chan *lineBatch, senders),
		free: make(chan *lineBatch, senders+1),
	}
	s.mu.status = map[string]int64{}
	for range senders + 1 {
		s.free <- &lineBatch{buf: make([]byte, 0, batchBytes)}
	}
	for range senders {
		s.wg.Go(s.post)
	}
	return s
}

func (s *httpSender) next(ctx context.Context) (*lineBatch, error) {
	select {
	case b := <-s.free:
		b.reset()
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *httpSender) send(ctx context.Context, b *lineBatch) error {
	select {
	case s.todo <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// post runs on each sending goroutine until close.
func (s *httpSender) post() {
	for b := range s.todo {
		s.do(b)
		s.free <- b
	}
}

func (s *httpSender) do(b *lineBatch) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.url, bytes.NewReader(b.buf))
	if err != nil {
		s.errs.add(err)
		return
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := s.client.Do(req)
	if err != nil {
		s.errs.add(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.lines.Add(int64(b.lines))
	s.batches.Add(1)
	if resp.StatusCode/100 == 2 {
		s.okLines.Add(int64(b.lines))
	} else {
		// Keep the first refusal's reason: the agent says what was wrong.
		// A refusal is counted by its status, not as an error.
		s.errs.note(fmt.Errorf("%s: %s %s", s.url, resp.Status, resp.Header.Get("X-Influxdb-Error")))
	}
	s.mu.Lock()
	s.mu.status[strconv.Itoa(resp.StatusCode)]++
	s.mu.Unlock()
}

func (s *httpSender) close() {
	close(s.todo)
	s.wg.Wait()
	s.client.CloseIdleConnections()
}

func (s *httpSender) counts() senderCounts {
	c := senderCounts{Lines: s.lines.Load(), Batches: s.batches.Load(), OKLines: s.okLines.Load(), Status: map[string]int64{}}
	s.errs.fill(&c)
	s.mu.Lock()
	for k, v := range s.mu.status {
		c.Status[k] = v
	}
	s.mu.Unlock()
	return c
}

// errUnknownTransport is returned by Validate for a transport other than
// udp, tcp and http.
var errUnknownTransport = errors.New("transport is not udp, tcp or http")
