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
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/simtel/simtel/internal/lineproto"
)

// udpReadBuffer is the receive buffer asked for UDP listeners: at high
// rates the kernel default (about 200 KiB, 2 ms of traffic at 1M lines/s)
// overflows whenever the agent is descheduled for a moment.
const udpReadBuffer = 16 << 20

func listenPacket(addr string) (packetSource, error) {
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
	src, err := newPacketSource(pc, packetsPerRead)
	if err != nil {
		pc.Close()
		return nil, err
	}
	return src, nil
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

// packetSource is a datagram socket read several datagrams at a time:
// packetSocket on Linux (outside Go's network poller, see
// packets_linux.go), batchReader elsewhere.
type packetSource interface {
	// read takes the datagrams waiting, up to packetsPerRead. With block
	// it waits for at least one; without, it may return 0 (a source that
	// cannot tell waits anyway).
	read(block bool) (int, error)
	// datagram returns the i-th datagram of the last read, valid until
	// the next read.
	datagram(i int) []byte
	// receiveBuffer is the socket's receive buffer as the kernel counts
	// it (SO_RCVBUF), or 0 if unknown.
	receiveBuffer() int
	LocalAddr() net.Addr
	Close() error
}

// servePackets reads datagrams, each holding one or more lines, and
// spools them. One goroutine does both: it takes every datagram already
// waiting in the socket (up to packetsPerRead, with one recvmmsg system
// call on Linux) and spools their samples with one append. At high rates
// that turns thousands of small reads and writes a second into a few
// large ones. While a batch is being spooled, new datagrams wait in the
// socket's receive buffer (udpReadBuffer), not in a ring of our own.
//
// At low and medium rates every datagram, or every few, would wake the
// agent on its own, and the wake-ups, not the lines, would be most of its
// CPU time (each wakes the Go scheduler's threads too). So after a read
// that found the socket drained, the reader sleeps up to PacketGather,
// letting datagrams gather in the kernel's buffer, and then reads until
// the socket is drained again, packetsPerRead at a time; the wait is cut
// so that, at the rate just seen, the buffer stays a quarter full at most
// (packetGatherWait): gathering must never make the kernel drop. A read
// after the wait that finds nothing means the senders went quiet: the
// next read blocks until a datagram comes, so an idle agent does not wake.
//
// A datagram that cannot be spooled (spool full with the block policy) is
// dropped and counted: UDP senders cannot be slowed down.
func (a *Agent) servePackets(ctx context.Context, r packetSource, name string, statsd bool) {
	rcvbuf := r.receiveBuffer()
	var wait *time.Timer
	if a.cfg.PacketGather > 0 {
		wait = time.NewTimer(0)
		defer wait.Stop()
		<-wait.C
	}
	// Line protocol datagrams are normalized as they are read (which
	// copies them out of the read buffers) and spooled together once the
	// socket is drained, or once packetBatchBytes of lines are waiting:
	// one append, and one wake-up of the shipper, for everything that
	// gathered.
	b := a.normalizers.Get().(*ingestBatch)
	defer a.normalizers.Put(b)
	b.reset()
	held := 0 // datagrams in b
	spool := func() {
		if held == 0 {
			return
		}
		if _, err := a.spoolBatch(ctx, name, b); err != nil && ctx.Err() == nil {
			a.metrics.dropped.WithLabelValues("spool_error").Add(float64(held))
			a.log.Warn("datagrams dropped", "listener", name, "datagrams", held, "err", err)
		}
		b.reset()
		held = 0
	}
	defer spool()
	// The datagrams and bytes read since the socket was last found
	// drained, and when: the rate the next wait is sized for.
	last := time.Now()
	gotN, gotSize := 0, 0
	block := true
	for {
		if block {
			spool() // nothing waits in the socket: do not hold lines back
		}
		n, err := r.read(block)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			a.log.Warn("datagram read failed", "listener", name, "err", err)
			block = true
			continue
		}
		if n == 0 {
			// Nothing came while the reader waited: block until
			// something does, and size the next wait afresh.
			block, last, gotN, gotSize = true, time.Now(), 0, 0
			continue
		}
		// A blocking read returns the first datagrams after the socket was
		// found empty. When they came says nothing about the rate (the
		// reader may have waited for seconds), so the rate is measured
		// from here on.
		woke := block
		size := 0
		now := time.Now()
		for i := range n {
			d := r.datagram(i)
			size += len(d)
			if statsd {
				if err := a.ingestStatsD(ctx, d); err != nil && ctx.Err() == nil {
					a.metrics.dropped.WithLabelValues("spool_error").Inc()
					a.log.Warn("datagrams dropped", "listener", name, "datagrams", 1, "err", err)
				}
				continue
			}
			b.add(d, lineproto.Nanosecond, now)
			held++
		}
		if len(b.lines) >= packetBatchBytes {
			spool()
		}
		if woke {
			last, gotN, gotSize = now, 0, 0
		} else {
			gotN, gotSize = gotN+n, gotSize+size
		}
		if n == packetsPerRead {
			block = false // more is waiting
			continue
		}
		if wait == nil {
			block = true
			continue
		}
		// The socket is drained: spool what was read, then size the wait
		// from what was read since it was last drained, which came in
		// since then.
		spool()
		d := packetGatherWait(a.cfg.PacketGather, rcvbuf, gotN, gotSize, now.Sub(last))
		if gotN == 0 {
			// Only the datagrams that ended an idle spell: wait briefly
			// and measure the rate over that. Gathering for the whole
			// PacketGather here, as if the rate were that of the idle
			// spell, let a burst of a million lines a second overflow
			// the socket's buffer.
			d = min(a.cfg.PacketGather, gatherProbe)
		}
		last, gotN, gotSize = now, 0, 0
		if d <= 0 {
			block = true
			continue
		}
		wait.Reset(d)
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		block = false
	}
}

// packetBatchBytes bounds the normalized lines of datagrams the reader
// holds before it spools them.
const packetBatchBytes = 1 << 20

// packetGatherWait is how long the reader may let datagrams gather after
// it read n datagrams of size bytes that came in over elapsed. It is at
// most gather; at most the time in which, at that rate, gatherDatagrams
// arrive (at high rates the wake-ups no longer matter, and a short wait
// leaves the buffer room for the agent being descheduled); and at most the
// time in which the socket's receive buffer (rcvbuf bytes as the kernel
// counts them, about 1 KiB of bookkeeping per datagram on top of its
// payload) fills to a quarter. The reader then drains the buffer
// packetsPerRead at a time. Zero means read again at once.
func packetGatherWait(gather time.Duration, rcvbuf, n, size int, elapsed time.Duration) time.Duration {
	if gather <= 0 || rcvbuf <= 0 || elapsed <= 0 || n <= 0 {
		return 0
	}
	sec := elapsed.Seconds()
	bufRate := float64(size+n*datagramOverhead) / sec // buffer bytes per second
	d := min(gather, time.Duration(gatherDatagrams/(float64(n)/sec)*float64(time.Second)))
	d = min(d, time.Duration(float64(rcvbuf/4)/bufRate*float64(time.Second)))
	if d < time.Millisecond {
		return 0
	}
	return d
}

// gatherDatagrams bounds the datagrams let gather in the socket between two
// wake-ups: 16 reads of packetsPerRead.
const gatherDatagrams = 256

// gatherProbe is the wait after the datagrams that end an idle spell, over
// which the reader measures the rate that sizes its next wait. At a
// million lines a second (about 12,000 datagrams of 8 KiB) it lets a few
// hundred datagrams gather, well within the receive buffer.
const gatherProbe = 20 * time.Millisecond

// datagramOverhead is what the kernel charges a socket's receive buffer
// per datagram beyond its payload (the socket buffer structures).
const datagramOverhead = 1024

// receiveBuffer returns the receive buffer size the kernel reports for
// the socket (SO_RCVBUF, which counts bookkeeping too), or 0 if unknown.
func (r *batchReader) receiveBuffer() int {
	sc, ok := r.pc.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	size := 0
	_ = rc.Control(func(fd uintptr) {
		if v, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF); err == nil {
			size = v
		}
	})
	return size
}

// packetsPerRead bounds the datagrams read and spooled at once: 16 of the
// largest size are 1 MiB of buffers.
const packetsPerRead = 16

// batchReader reads datagrams through Go's network poller, several per
// system call where the platform can (recvmmsg), one at a time elsewhere.
// It always blocks until a datagram comes.
type batchReader struct {
	pc   net.PacketConn
	bufs [][]byte
	msgs []ipv4.Message // nil: read one datagram at a time
	n0   int            // length of the single datagram read without msgs
	v4   *ipv4.PacketConn
	v6   *ipv6.PacketConn
}

func newBatchReader(pc net.PacketConn, n int) *batchReader {
	r := &batchReader{pc: pc}
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		n = 1
	}
	r.bufs = make([][]byte, n)
	for i := range r.bufs {
		r.bufs[i] = make([]byte, maxDatagram)
	}
	if !ok {
		return r
	}
	if la, _ := uc.LocalAddr().(*net.UDPAddr); la != nil && la.IP.To4() != nil && !la.IP.IsUnspecified() {
		r.v4 = ipv4.NewPacketConn(uc)
	} else {
		// IPv6 and dual-stack sockets (":8089" binds [::]).
		r.v6 = ipv6.NewPacketConn(uc)
	}
	r.msgs = make([]ipv4.Message, n)
	for i := range r.msgs {
		r.msgs[i].Buffers = [][]byte{r.bufs[i]}
	}
	return r
}

// read waits for at least one datagram and returns how many it read.
func (r *batchReader) read(bool) (int, error) {
	if r.msgs == nil {
		n, _, err := r.pc.ReadFrom(r.bufs[0])
		if err != nil {
			return 0, err
		}
		r.n0 = n
		return 1, nil
	}
	if r.v4 != nil {
		return r.v4.ReadBatch(r.msgs, 0)
	}
	return r.v6.ReadBatch(r.msgs, 0)
}

func (r *batchReader) LocalAddr() net.Addr { return r.pc.LocalAddr() }

func (r *batchReader) Close() error { return r.pc.Close() }

// datagram returns the i-th datagram of the last read; it stays valid
// until the next read.
func (r *batchReader) datagram(i int) []byte {
	if r.msgs == nil {
		return r.bufs[0][:r.n0]
	}
	return r.bufs[i][:r.msgs[i].N]
}

// maxDatagram is the largest UDP payload (65,535 bytes less the IPv4 and
// UDP headers); a read buffer this size never truncates a datagram.
const maxDatagram = 65507

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
		_, ref, err := a.ingest(ctx, name, chunk, lineproto.Nanosecond)
		chunk = chunk[:0]
		if ref.firstBad != nil {
			a.log.Debug("bad line", "listener", name, "remote", c.RemoteAddr().String(), "err", ref.firstBad)
		}
		if ref.firstConflict != nil {
			a.log.Debug("field type conflict", "listener", name, "remote", c.RemoteAddr().String(), "line", ref.firstConflict.line, "err", ref.firstConflict)
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
