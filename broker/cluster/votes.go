package cluster

// Votes on streams of their own. hashicorp/raft's NetworkTransport sends
// every RPC on a pooled connection of the group to the peer, with a
// 256 KiB write buffer on the side that dialed it and a 256 KiB read
// buffer on the side that accepted it (constants in hashicorp/raft). A
// candidate starts each election round's vote requests without waiting
// for the last round's answers, and a request in flight holds its
// connection, so while peers answer late (a broker opening thousands of
// groups after a restart, a loaded machine) each round dials another
// connection per peer: thousands of groups electing at once held
// gigabytes of buffers, the collector and the scheduler took the CPU the
// peers needed to answer, and the rounds went on. So vote requests,
// pre-vote requests and TimeoutNow (all a few hundred bytes) go each on a
// new mux stream of its own, closed after the answer, with buffers sized
// for them; entries and snapshots still go over the NetworkTransport.
//
// A vote stream (kindVote) carries after its kind byte the group u64 and
// the RPC type u8, then one frame (writeFrame) each way: the request
// (msgpack, as NetworkTransport encodes it), and the answer: status u8
// (0 ok, then the msgpack response; 1 error, then its message). A broker
// of an older release closes a stream of an unknown kind without an
// answer: the request then goes over the NetworkTransport.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

const kindVote byte = 6 // one vote, pre-vote or TimeoutNow RPC of one group

// RPC types on a vote stream.
const (
	voteRequestVote byte = 1
	votePreVote     byte = 2
	voteTimeoutNow  byte = 3
)

// voteTimeout bounds one vote RPC, as the NetworkTransport's timeout
// (newTransport) bounds its RPCs.
const voteTimeout = 10 * time.Second

// votesInFlight bounds the vote RPCs of data groups in flight to one peer
// (the controller's are not counted). Every stream opened to a peer goes
// through the one session with it: when thousands of groups elected at
// once (a loaded machine, leaders stepping down for want of heartbeat
// answers), their vote streams filled the session's queue, the
// heartbeats behind them came late, more leaders stepped down and more
// groups elected. A vote beyond the bound waits for one in flight to
// end, within its own timeout (then it fails, as an unanswered one does).
const votesInFlight = 64

// voteBuffer is the read buffer of a vote stream: requests and answers
// are a few hundred bytes.
const voteBuffer = 512

// errVotesUnsupported: the peer closed a vote stream without an answer (a
// broker that knows no kindVote).
var errVotesUnsupported = errors.New("peer closed the vote stream without an answer")

var voteCodec = &codec.MsgpackHandle{}

// vote sends one vote RPC on a stream of its own, tried again on a stale
// stream (stale.go), or over the NetworkTransport (fallback) when the
// transport has no mux (tests of the transport alone) or the peer takes
// no vote streams.
func (t *groupTransport) vote(target raft.ServerAddress, typ byte, args, resp any, fallback func() error) error {
	if t.stream == nil {
		return retryStale(fallback)
	}
	err := retryStale(func() error { return t.voteRPC(target, typ, args, resp) })
	if errors.Is(err, errVotesUnsupported) {
		return retryStale(fallback)
	}
	return err
}

// voteRPC is one try of vote.
func (t *groupTransport) voteRPC(target raft.ServerAddress, typ byte, args, resp any) error {
	deadline := time.Now().Add(voteTimeout)
	if t.group != ControllerGroup {
		release, err := t.stream.mux.voteSlot(target, voteTimeout)
		if err != nil {
			return err
		}
		defer release()
	}
	var req bytes.Buffer
	if err := codec.NewEncoder(&req, voteCodec).Encode(args); err != nil {
		return err
	}
	var h [10]byte
	h[0] = kindVote
	binary.BigEndian.PutUint64(h[1:9], t.group)
	h[9] = typ
	c, err := t.stream.dial(target, time.Until(deadline), h[:])
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if err := writeFrame(c, req.Bytes()); err != nil {
		return err
	}
	data, err := readFrame(bufio.NewReaderSize(c, voteBuffer))
	switch {
	case err == io.EOF:
		return errVotesUnsupported
	case err != nil:
		return err
	case len(data) == 0:
		return fmt.Errorf("empty vote answer from %s", target)
	case data[0] == 1:
		return errors.New(string(data[1:]))
	case data[0] != 0:
		return fmt.Errorf("vote answer from %s with status %d", target, data[0])
	}
	return codec.NewDecoderBytes(data[1:], voteCodec).Decode(resp)
}

// RequestVote goes on a vote stream.
func (t *groupTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.vote(target, voteRequestVote, args, resp, func() error { return t.NetworkTransport.RequestVote(id, target, args, resp) })
}

// RequestPreVote goes on a vote stream.
func (t *groupTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.vote(target, votePreVote, args, resp, func() error { return t.NetworkTransport.RequestPreVote(id, target, args, resp) })
}

// TimeoutNow goes on a vote stream.
func (t *groupTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.vote(target, voteTimeoutNow, args, resp, func() error { return t.NetworkTransport.TimeoutNow(id, target, args, resp) })
}

// serveVote answers one vote stream (runs on a mux goroutine). A group
// not open here yet is waited for as a raft connection's is (a peer opens
// a new group seconds before this broker does).
func (n *Node) serveVote(conn net.Conn) {
	defer conn.Close()
	stop := n.closeOnShutdown(conn)
	defer stop()
	deadline := time.Now().Add(voteTimeout)
	_ = conn.SetDeadline(deadline)
	var h [9]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return
	}
	group, typ := binary.BigEndian.Uint64(h[:8]), h[8]
	data, err := readFrame(bufio.NewReaderSize(conn, voteBuffer))
	if err != nil {
		return
	}
	answer := func(status byte, body []byte) {
		_ = writeFrame(conn, append([]byte{status}, body...))
	}
	fail := func(format string, args ...any) { answer(1, []byte(fmt.Sprintf(format, args...))) }
	var cmd any
	switch typ {
	case voteRequestVote:
		cmd = &raft.RequestVoteRequest{}
	case votePreVote:
		cmd = &raft.RequestPreVoteRequest{}
	case voteTimeoutNow:
		cmd = &raft.TimeoutNowRequest{}
	default:
		fail("unknown vote RPC type %d", typ)
		return
	}
	if err := codec.NewDecoderBytes(data, voteCodec).Decode(cmd); err != nil {
		fail("cannot decode vote RPC: %v", err)
		return
	}
	t := n.voteTransport(group, deadline)
	if t == nil {
		fail("raft group %d is not running on broker %d", group, n.cfg.NodeID)
		return
	}
	res, err := t.deliver(cmd, deadline)
	if err != nil {
		fail("%v", err)
		return
	}
	if res.Error != nil {
		fail("%v", res.Error)
		return
	}
	var out bytes.Buffer
	if err := codec.NewEncoder(&out, voteCodec).Encode(res.Response); err != nil {
		fail("cannot encode vote answer: %v", err)
		return
	}
	answer(0, out.Bytes())
}

// voteTransport is group's transport, waited for (up to the mux's wait for
// unknown groups, and deadline) if the group is not open yet.
func (n *Node) voteTransport(group uint64, deadline time.Time) *groupTransport {
	if t := n.transport(group); t != nil {
		return t
	}
	if n.mux.waitGroup(group) == nil {
		return nil
	}
	// The mux knows the group a moment before the node's registry does
	// (newTransport).
	for time.Now().Before(deadline) {
		if t := n.transport(group); t != nil {
			return t
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// deliver hands cmd to the group's raft (through the same path as the
// NetworkTransport's RPCs, see groupTransport.start) and waits for the answer
// until deadline.
func (t *groupTransport) deliver(cmd any, deadline time.Time) (raft.RPCResponse, error) {
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: cmd, RespChan: respCh}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case t.votes <- rpc:
	case <-t.detached:
		return raft.RPCResponse{}, errors.New("raft group is closing")
	case <-t.closed:
		return raft.RPCResponse{}, errors.New("raft group is closed")
	case <-timer.C:
		return raft.RPCResponse{}, errors.New("raft group did not take the vote RPC in time")
	}
	select {
	case res := <-respCh:
		return res, nil
	case <-t.closed:
		return raft.RPCResponse{}, errors.New("raft group is closed")
	case <-timer.C:
		return raft.RPCResponse{}, errors.New("raft group did not answer the vote RPC in time")
	}
}

// voteSlot takes one of the votesInFlight slots for addr, waiting at most
// timeout; release gives it back.
func (m *Mux) voteSlot(addr raft.ServerAddress, timeout time.Duration) (release func(), err error) {
	m.mu.Lock()
	if m.mu.voteSlots == nil {
		m.mu.voteSlots = map[raft.ServerAddress]chan struct{}{}
	}
	slots := m.mu.voteSlots[addr]
	if slots == nil {
		slots = make(chan struct{}, votesInFlight)
		m.mu.voteSlots[addr] = slots
	}
	m.mu.Unlock()
	release = func() { <-slots }
	select {
	case slots <- struct{}{}:
		return release, nil
	default:
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case slots <- struct{}{}:
		return release, nil
	case <-timer.C:
		return nil, fmt.Errorf("%d vote requests to %s in flight for %v", votesInFlight, addr, timeout)
	case <-m.done:
		return nil, ErrMuxClosed
	}
}
