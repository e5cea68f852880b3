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

import (
	"errors"

	"github.com/hashicorp/raft"
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

// RequestVote is the NetworkTransport's, tried again on a stale stream,
// one at a time per peer (oneVote).
func (t *groupTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.oneVote(target, func() error {
		return retryStale(func() error { return t.NetworkTransport.RequestVote(id, target, args, resp) })
	})
}

// RequestPreVote is the NetworkTransport's, tried again on a stale
// stream, one at a time per peer (oneVote).
func (t *groupTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.oneVote(target, func() error {
		return retryStale(func() error { return t.NetworkTransport.RequestPreVote(id, target, args, resp) })
	})
}

// errVoteInFlight fails a vote or pre-vote request to a peer that has not
// answered the group's previous one yet.
var errVoteInFlight = errors.New("the previous vote request to this peer is still unanswered")

// oneVote runs rpc, a vote or pre-vote request to target, unless one of
// the group's is still in flight to target; then the request fails at
// once (raft counts it as a vote not granted). Raft starts each election
// round's requests without waiting for the last round's, whose answers
// it no longer reads; on a broker opening thousands of groups, peers that
// answered late (groups not open yet, a CPU-starved machine) made every
// round add a request per peer, each on a connection of its own with
// NetworkTransport's 512 KiB of buffers, until the brokers held gigabytes
// of them and tens of thousands of streams waited to open, and no
// election finished. A request in flight longer than a round is one the
// peer will not answer in time for the next round either.
func (t *groupTransport) oneVote(target raft.ServerAddress, rpc func() error) error {
	t.votes.Lock()
	if t.votes.m[target] {
		t.votes.Unlock()
		return errVoteInFlight
	}
	if t.votes.m == nil {
		t.votes.m = map[raft.ServerAddress]bool{}
	}
	t.votes.m[target] = true
	t.votes.Unlock()
	defer func() {
		t.votes.Lock()
		delete(t.votes.m, target)
		t.votes.Unlock()
	}()
	return rpc()
}

// TimeoutNow is the NetworkTransport's, tried again on a stale stream.
func (t *groupTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return retryStale(func() error { return t.NetworkTransport.TimeoutNow(id, target, args, resp) })
}
