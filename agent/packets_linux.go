package agent

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// packetSocket is a UDP socket that the agent reads with recvmmsg on its
// own, outside Go's network poller.
//
// Why: a socket in the poller is registered with epoll, and the kernel
// reports every datagram that arrives on it, whether or not a goroutine
// waits for one. While the reader lets datagrams gather in the socket
// buffer (servePackets), each arrival still woke a thread of the Go
// runtime, which took a processor, found nothing to run and went back to
// sleep: a wake-up that did nothing for every datagram. Out of the
// poller, a datagram arriving wakes nobody: the reader either sleeps on a
// timer (gathering) and then takes what is waiting without blocking, or,
// when the socket was found empty, blocks in recvmmsg on a thread of its
// own until the next datagram.
//
// Close shuts the socket down, which makes a recvmmsg blocked on it
// return; the descriptor itself is closed once no read is in progress, so
// that a concurrent read never sees it reused.
type packetSocket struct {
	addr net.Addr
	bufs [][]byte
	iovs []unix.Iovec
	msgs []mmsghdr

	mu      sync.Mutex
	fd      int
	reading bool
	closed  bool
}

// mmsghdr is struct mmsghdr of recvmmsg(2); Go pads it as C does.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// newPacketSource takes pc's socket out of the network poller: it
// duplicates the descriptor, closes pc (which removes pc's descriptor
// from epoll) and switches the duplicate to blocking mode.
func newPacketSource(pc net.PacketConn, n int) (packetSource, error) {
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		return newBatchReader(pc, n), nil
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) {
		fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("cannot duplicate the socket: %w", derr)
	}
	addr := uc.LocalAddr()
	if err := uc.Close(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("cannot make the socket blocking: %w", err)
	}
	p := &packetSocket{addr: addr, fd: fd}
	p.bufs = make([][]byte, n)
	p.iovs = make([]unix.Iovec, n)
	p.msgs = make([]mmsghdr, n)
	for i := range p.bufs {
		p.bufs[i] = make([]byte, maxDatagram)
		p.iovs[i].Base = &p.bufs[i][0]
		p.iovs[i].SetLen(maxDatagram)
		p.msgs[i].hdr.Iov = &p.iovs[i]
		p.msgs[i].hdr.SetIovlen(1)
	}
	return p, nil
}

// read takes up to len(bufs) datagrams. With block it waits for the first
// one; without, it returns 0 if none is waiting.
func (p *packetSocket) read(block bool) (int, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, net.ErrClosed
	}
	p.reading = true
	fd := p.fd
	p.mu.Unlock()

	flags := unix.MSG_WAITFORONE
	if !block {
		flags = unix.MSG_DONTWAIT
	}
	var n uintptr
	var errno unix.Errno
	for {
		n, _, errno = unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&p.msgs[0])), uintptr(len(p.msgs)), uintptr(flags), 0, 0)
		if errno != unix.EINTR {
			break
		}
	}

	p.mu.Lock()
	p.reading = false
	closed := p.closed
	if closed {
		unix.Close(p.fd)
		p.fd = -1
	}
	p.mu.Unlock()
	switch {
	case closed:
		return 0, net.ErrClosed
	case errno == unix.EAGAIN:
		return 0, nil
	case errno != 0:
		return 0, fmt.Errorf("recvmmsg: %w", errno)
	}
	return int(n), nil
}

// datagram returns the i-th datagram of the last read; it stays valid
// until the next read.
func (p *packetSocket) datagram(i int) []byte { return p.bufs[i][:p.msgs[i].len] }

func (p *packetSocket) LocalAddr() net.Addr { return p.addr }

func (p *packetSocket) receiveBuffer() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	v, err := unix.GetsockoptInt(p.fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		return 0
	}
	return v
}

// Close stops the socket: a read blocked on it returns net.ErrClosed, and
// so does every later one.
func (p *packetSocket) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if p.reading {
		// Wakes the blocked recvmmsg (an unconnected UDP socket reports
		// ENOTCONN but is shut down all the same); the reader closes the
		// descriptor when it returns.
		if err := unix.Shutdown(p.fd, unix.SHUT_RDWR); err != nil && !errors.Is(err, unix.ENOTCONN) {
			return fmt.Errorf("cannot shut down udp socket: %w", err)
		}
		return nil
	}
	err := unix.Close(p.fd)
	p.fd = -1
	return err
}
