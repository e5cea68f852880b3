package agent

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"reflect"
	"sync"
	"syscall"

	"github.com/simtel/simtel/agent/lineproto"
)

// udpReadBuffer is the receive buffer asked for UDP listeners: at high
// rates the kernel default (about 200 KiB, 2 ms of traffic at 1M lines/s)
// overflows whenever the agent is descheduled for a moment.
const udpReadBuffer = 16 << 20

func listenPacket(addr string) (net.PacketConn, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	if uc, ok := pc.(*net.UDPConn); ok {
		// SetReadBuffer is capped by net.core.rmem_max; as root,
		// SO_RCVBUFFORCE goes past the cap.
		_ = uc.SetReadBuffer(udpReadBuffer)
		if rc, err := uc.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, udpReadBuffer)
			})
		}
	}
	return pc, nil
}

// listenUnix binds a stream socket, replacing a stale socket file left by
// a previous run (but not any other kind of file).
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, errors.New("another process is listening on it")
		}
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	_ = os.Chmod(path, 0o666) // simulation processes of any user on the node
	return ln, nil
}

func isNilCloser(c any) bool {
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil() || v.Kind() == reflect.Interface && v.IsNil()
}

// servePackets reads datagrams, each holding one or more lines. One
// goroutine only reads (so the socket buffer drains even while a batch is
// being spooled), another ingests; they share a ring of buffers. A
// datagram that cannot be spooled (spool full with the block policy) is
// dropped and counted: UDP senders cannot be slowed down.
func (a *Agent) servePackets(ctx context.Context, pc net.PacketConn, name string, statsd bool) {
	type dgram struct {
		buf []byte
		n   int
	}
	const ring = 64
	free := make(chan []byte, ring)
	for range ring {
		free <- make([]byte, 64<<10)
	}
	full := make(chan dgram, ring)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range full {
			var err error
			if statsd {
				err = a.ingestStatsD(ctx, d.buf[:d.n])
			} else {
				_, _, err = a.ingest(ctx, name, d.buf[:d.n], lineproto.Nanosecond)
			}
			free <- d.buf
			if err != nil && ctx.Err() == nil {
				a.metrics.dropped.WithLabelValues("spool_error").Inc()
				a.log.Warn("datagram dropped", "listener", name, "err", err)
			}
		}
	}()
	defer func() {
		close(full)
		<-done
	}()
	for {
		buf := <-free
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			free <- buf
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			a.log.Warn("datagram read failed", "listener", name, "err", err)
			continue
		}
		full <- dgram{buf, n}
	}
}

// serveStream accepts connections carrying newline-separated lines (TCP or
// a unix socket, as Telegraf's socket_writer sends). Lines are spooled in
// chunks; when the spool blocks, reading stops, which backs the sender up
// through the socket.
func (a *Agent) serveStream(ctx context.Context, ln net.Listener, name string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	go func() {
		<-ctx.Done()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			a.log.Warn("accept failed", "listener", name, "err", err)
			continue
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.serveStreamConn(ctx, c, name)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
			c.Close()
		}()
	}
}

func (a *Agent) serveStreamConn(ctx context.Context, c net.Conn, name string) {
	r := bufio.NewReaderSize(c, 64<<10)
	chunk := make([]byte, 0, 256<<10)
	flush := func() bool {
		if len(chunk) == 0 {
			return true
		}
		_, lerr, err := a.ingest(ctx, name, chunk, lineproto.Nanosecond)
		chunk = chunk[:0]
		if lerr != nil {
			a.log.Debug("bad line", "listener", name, "remote", c.RemoteAddr().String(), "err", lerr)
		}
		if err != nil {
			a.log.Warn("closing stream: cannot spool", "listener", name, "err", err)
			return false
		}
		return true
	}
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the reader's buffer: count it and skip
			// to its end rather than buffering without bound.
			a.metrics.received.WithLabelValues(name).Inc()
			a.metrics.parseErrors.WithLabelValues(name).Inc()
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			if err != nil {
				flush()
				return
			}
			continue
		}
		chunk = append(chunk, line...)
		if err != nil {
			flush()
			return
		}
		// Spool when nothing more is buffered or the chunk is large, so a
		// slow sender's lines do not wait and a fast one's are batched.
		if r.Buffered() == 0 || len(chunk) >= cap(chunk)-(64<<10) {
			if !flush() {
				return
			}
		}
	}
}
