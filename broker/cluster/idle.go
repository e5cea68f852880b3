package cluster

import "time"

// idleStreamsAfter is how long a data group's raft connections stay open
// after they last carried bytes. Each connection hashicorp/raft's
// NetworkTransport keeps costs a 256 KiB write buffer on the side that
// dialed it and a 256 KiB read buffer (and a goroutine) on the side that
// accepted it; a group keeps one to each peer, so thousands of groups held
// gigabytes for connections that an idle group never uses (its heartbeats
// go over the node's coalescing links, its empty AppendEntries are
// answered by its transport, see transport.go). A group that becomes busy
// again dials new streams on the peers' existing sessions, which costs a
// stream header, not a TCP or TLS handshake.
const idleStreamsAfter = 30 * time.Second

// closeIdleStreamsLoop closes, every third of idleStreamsAfter until done,
// the pooled raft connections of the data groups whose connections have
// carried nothing for idleStreamsAfter (closeIdleStreams).
func (n *Node) closeIdleStreamsLoop(done <-chan struct{}) {
	t := time.NewTicker(idleStreamsAfter / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			n.closeIdleStreams(now, idleStreamsAfter)
		}
	}
}

// closeIdleStreams closes the pooled connections of each data group idle
// for after (NetworkTransport.CloseStreams), once per idle spell. An RPC in
// flight holds its connection outside the pool and is not affected.
// CloseStreams also tells the group's handlers of connections peers
// opened to stop after their next request; a peer's connection to an idle
// group is idle too, so the peer closes it from its side as well (its
// handler here then ends at once), and in the rare case that the peer
// sends first, that request is answered and the next one fails and is
// retried by raft on a new connection.
func (n *Node) closeIdleStreams(now time.Time, after time.Duration) int {
	cut := now.Add(-after).UnixNano()
	closed := 0
	for _, t := range n.transports() {
		if t.group == ControllerGroup || t.stream == nil {
			continue
		}
		last := t.stream.used.Load()
		if last == 0 || last > cut || !t.stream.used.CompareAndSwap(last, 0) {
			continue
		}
		t.NetworkTransport.CloseStreams()
		closed++
	}
	return closed
}
