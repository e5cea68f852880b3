package cluster

// Rejoining. Gossip alone never brings a broker back: memberlist forgets
// a dead member after a while and contacts only the members it knows to
// be alive, and a restarted broker knows nobody unless it is told. So a
// broker started without --join (the first of a cluster) stayed outside
// the gossip after a restart, and the controller kept it not alive for
// good although it was back and replicating.
//
// Every broker therefore remembers the gossip address of every other
// broker it has known, and keeps trying those that are missing from its
// gossip view:
//
//   - The leader registers each broker's gossip address (as memberlist
//     sees it) in the controller metadata (BrokerInfo.GossipAddr), so
//     every broker learns every address through raft.
//   - The membership loop saves the addresses of the metadata and of the
//     live gossip members, by node id, to DataDir/controller/peers.json
//     whenever they change (a small file, written and renamed), so a
//     restart knows them before raft has caught up.
//   - rejoinLoop tries a gossip join of each known broker that is not a
//     live gossip member: at start, within Config.RejoinInterval once it
//     goes missing, then after RejoinInterval again, doubling after each failed try up to
//     rejoinMaxFactor times it. A restarted broker thus joins the peers it
//     knows within its first tick whatever its flags, and the others find
//     a restarted broker again on their own even if it knows nobody.
//
// A join is a memberlist push-pull: the other side learns the joiner is
// alive (memberlist's refutation settles an older "dead" entry about a
// restarted member), the membership events reach the controller leader,
// and its next reconcile marks the broker alive again.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/simtel/simtel/internal/fsutil"
)

// rejoinMaxFactor bounds the backoff of rejoin tries: at most
// RejoinInterval × rejoinMaxFactor between two tries of one broker.
const rejoinMaxFactor = 8

// peersFileName is the known peers' file in the controller directory.
const peersFileName = "peers.json"

// peersFile is the content of DataDir/controller/peers.json.
type peersFile struct {
	// Brokers is the gossip address (host:port) of every other broker
	// known, by node id.
	Brokers map[string]string `json:"brokers"`
}

// RemembersPeers reports whether dataDir holds the gossip addresses of
// brokers known from an earlier run, so that a start without --join can
// rejoin them.
func RemembersPeers(dataDir string) bool {
	peers, err := readPeers(filepath.Join(dataDir, "controller", peersFileName))
	return err == nil && len(peers) > 0
}

// readPeers reads a peers file; a missing file is no peer and no error.
func readPeers(path string) (map[int32]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[int32]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read known peers: %w", err)
	}
	var f peersFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("cannot decode known peers in %s: %w", path, err)
	}
	out := make(map[int32]string, len(f.Brokers))
	for k, v := range f.Brokers {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || v == "" {
			return nil, fmt.Errorf("known peers in %s: bad entry %q: %q", path, k, v)
		}
		out[int32(id)] = v
	}
	return out, nil
}

// writePeers replaces the peers file, so a crash leaves the old or the new
// file, never a torn one.
func writePeers(path string, peers map[int32]string) error {
	f := peersFile{Brokers: make(map[string]string, len(peers))}
	for id, a := range peers {
		f.Brokers[strconv.Itoa(int(id))] = a
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteFile(path, append(data, '\n'), fsutil.WriteOptions{}); err != nil {
		return fmt.Errorf("cannot save known peers to %s: %w", path, err)
	}
	return nil
}

// knownPeers is a copy of the gossip addresses of the other brokers this
// node knows, by node id.
func (n *Node) knownPeers() map[int32]string {
	n.peers.Lock()
	defer n.peers.Unlock()
	return maps.Clone(n.peers.m)
}

// savePeers merges the gossip addresses of the metadata's brokers and of
// the live gossip members (these win: they are current) into the known
// peers and saves them when they changed. Runs on the loop goroutine.
func (n *Node) savePeers(md *Metadata, members map[int32]nodeMeta) {
	n.peers.Lock()
	next := maps.Clone(n.peers.m)
	n.peers.Unlock()
	for id, b := range md.Brokers {
		if id != n.cfg.NodeID && b.GossipAddr != "" {
			next[id] = b.GossipAddr
		}
	}
	for id, m := range members {
		if id != n.cfg.NodeID && m.Gossip != "" {
			next[id] = m.Gossip
		}
	}
	n.peers.Lock()
	changed := !maps.Equal(next, n.peers.m)
	n.peers.m = next
	n.peers.Unlock()
	if !changed && !n.peers.dirty {
		return
	}
	if err := writePeers(n.peers.path, next); err != nil {
		n.peers.dirty = true
		n.log.Warn("cannot save the known brokers' gossip addresses; a restart without --join may not find the cluster", "err", err)
		return
	}
	n.peers.dirty = false
}

// rejoinLoop tries a gossip join of every known broker missing from the
// gossip view, with a per-broker backoff (see the file comment), until
// ctx ends. Each try runs on its own goroutine (a join to an unreachable
// host waits for memberlist's TCP timeout); rejoinLoop waits for them.
func (n *Node) rejoinLoop(ctx context.Context) {
	type state struct {
		next     time.Time
		wait     time.Duration
		inFlight bool
		failures int
	}
	type result struct {
		id   int32
		addr string
		err  error
	}
	tries := map[int32]*state{}
	results := make(chan result)
	var wg sync.WaitGroup
	defer wg.Wait()
	// Every quarter interval while a broker is missing; every interval
	// (a broker newly missing is tried within it) while none is.
	t := time.NewTimer(n.cfg.RejoinInterval / 4)
	defer t.Stop()
	for {
		members := n.members()
		now := time.Now()
		for id, addr := range n.knownPeers() {
			if _, ok := members[id]; ok {
				delete(tries, id)
				continue
			}
			s := tries[id]
			if s == nil {
				s = &state{next: now, wait: n.cfg.RejoinInterval}
				tries[id] = s
			}
			if s.inFlight || now.Before(s.next) {
				continue
			}
			s.inFlight = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := n.ml.Join([]string{addr})
				select {
				case results <- result{id, addr, err}:
				case <-ctx.Done():
				}
			}()
		}
		if len(tries) > 0 {
			t.Reset(n.cfg.RejoinInterval / 4)
		} else {
			t.Reset(n.cfg.RejoinInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case r := <-results:
			s := tries[r.id]
			if s == nil {
				continue
			}
			s.inFlight = false
			switch {
			case r.err == nil:
				n.log.Info("joined the gossip of a known broker", "node_id", r.id, "gossip", r.addr, "failed_tries", s.failures)
			case s.failures == 0:
				n.log.Info("a known broker is not in the gossip and does not answer; trying again", "node_id", r.id, "gossip", r.addr, "err", r.err)
			default:
				n.log.Debug("gossip join of a known broker failed", "node_id", r.id, "gossip", r.addr, "tries", s.failures+1, "err", r.err)
			}
			if r.err != nil {
				s.failures++
				n.rejoins.WithLabelValues("error").Inc()
			} else {
				n.rejoins.WithLabelValues("ok").Inc()
			}
			// A join that worked ends the tries once the broker shows
			// up as a member; if another process answers at its address
			// (the broker moved), the tries go on at the slower pace too.
			s.next = time.Now().Add(s.wait)
			s.wait = min(2*s.wait, rejoinMaxFactor*n.cfg.RejoinInterval)
		}
	}
}
