package cluster

// Stale pooled streams. hashicorp/raft's NetworkTransport keeps the
// connections (here mux streams) a group dialed to each peer in a pool
// and hands the next RPC to that peer one of them without looking at it.
// When the session under them ends (the peer was killed or restarted),
// yamux closes the streams under the pool, and the next RPC that takes
// one fails at its first write. A follower dials another follower only
// to ask for its vote, so its pool to a peer that restarted since the
// last election held such streams until the next election: the vote
// request of the election after a leader died then failed at once
// ("stream closed"), the candidate lacked the vote it needed, the other
// follower stood itself after Config.ElectionStagger in the same term,
// and the split vote lasted until a randomized election timeout (one to
// two heartbeat timeouts) ran out, while the partition had no leader.
// The same went for the TimeoutNow of a leadership transfer.
//
// So a vote request or a TimeoutNow that fails on a stream closed before
// anything of it went out is sent again: raft drops a connection that
// failed from its pool, so each try takes the next pooled stream or
// dials a new one. Nothing was sent, so the retry cannot be a duplicate.
// Votes now go on streams of their own (votes.go), dialed for each
// request on the session with the peer; a session that ended under them
// fails the same way and is retried the same way (the next try dials a
// new session).

import (
	"errors"

	"github.com/hashicorp/yamux"
)

// staleTries bounds the tries of one RPC: the pool holds at most as many
// streams per peer as newTransport's maxPool (2), and the last try dials.
const staleTries = 4

// staleStream reports whether err is a write on a stream that its
// session closed (or a session already shut down): nothing was sent.
func staleStream(err error) bool {
	return errors.Is(err, yamux.ErrStreamClosed) || errors.Is(err, yamux.ErrSessionShutdown)
}

// retryStale runs rpc until it fails other than on a stale stream, at
// most staleTries times.
func retryStale(rpc func() error) error {
	var err error
	for range staleTries {
		if err = rpc(); !staleStream(err) {
			return err
		}
	}
	return err
}
