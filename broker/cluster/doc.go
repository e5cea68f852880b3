// Package cluster is the broker's cluster membership: a raft transport
// shared by many raft groups on one listener, gossip discovery, and the
// controller — a hashicorp/raft group over the brokers whose state machine
// holds the cluster metadata (brokers, topics, configs, partition
// assignments, leaders and leader epochs, and the SCRAM credentials and
// ACLs of security.go).
//
// # Data path
//
//  1. Discovery. Every broker runs a memberlist member on --gossip-listen
//     and gossips its node meta: node id, Kafka address, raft address, and
//     whether it is part of a controller configuration yet. Gossip only
//     advertises; membership of raft groups changes through raft.
//  2. Bootstrap. A broker without raft state waits until gossip shows
//     Config.BootstrapExpect brokers of which none is in a cluster; the one
//     with the lowest node id then bootstraps the controller with all of
//     them as voters. A broker with raft state on disk never bootstraps.
//  3. Joining. The controller leader reconciles gossip into the controller
//     every Config.Tick: each gossip member is registered alive in the
//     metadata and added to the raft configuration (a voter while there
//     are fewer than Config.MaxVoters, else a non-voter). A registered
//     broker missing from gossip for Config.DeadAfter is marked not alive;
//     it stays in the raft configuration so that a restart rejoins.
//     Rejoining (rejoin.go): the leader also registers each broker's
//     gossip address; every broker saves the addresses it knows in
//     DataDir/controller/peers.json and keeps trying a gossip join of each
//     known broker missing from its gossip view (Config.RejoinInterval,
//     backing off). So a restarted broker finds the cluster without
//     Config.Join, and the others find a broker that comes back.
//  4. Commands. Node.Apply applies a Command on the leader (raft.Apply, the
//     FSM's Result comes back); on a follower it forwards the command to
//     the leader over the raft mux (connection kind 2, one length-prefixed
//     JSON frame each way) and retries while the leader is unknown or
//     moving. The broker itself answers Kafka admin requests on
//     non-leaders with NOT_CONTROLLER and uses Apply's forwarding only for
//     auto-creation. Node.CatchUp is a read barrier for followers.
//  5. State. FSM.Apply builds a new immutable Metadata per command (copy
//     on write), publishes it with an atomic pointer and signals each
//     reader of Changes on a channel of its own.
//     Readers (Metadata requests, the broker's partition follower) never
//     lock. Snapshots encode the current Metadata as JSON. The security
//     commands (credentials, ACLs) go to the leader through Apply from any
//     broker, as Kafka's clients send CreateAcls to any broker; their
//     readers call CatchUp first, so a change is seen on every broker.
//
// # The raft mux
//
// Mux owns the --raft-listen listener. Every connection (and every stream
// of a session) starts with a kind byte: 1 is a raft stream followed by an 8-byte big-endian group id (the
// controller is group 0; a replicated partition's group id is
// PartitionGroupID(topic id, partition), see group.go), 2 is a
// forwarded controller command, 3 a link carrying coalesced heartbeats
// (transport.go), 4 an idle watch connection (watch.go) and 5 a session
// (session.go): one TCP (and TLS) connection per destination broker,
// multiplexed with yamux, whose streams start with one of the other
// headers. Everything a broker dials goes over its session with the
// peer, so two brokers share two connections (one dialed by each)
// whatever the number of groups. Mux.Group(id)
// returns a raft.StreamLayer for raft.NewNetworkTransport, so any number
// of raft instances share one port. A connection naming a group nobody
// registered is held briefly, then closed. When --raft-listen is a
// specific IP, Mux dials peers from that IP (see Mux.localAddrFor), so a
// peer can tell brokers apart by source address.
//
// # Transport, heartbeats and failure detection
//
// Every raft group (the controller too) runs on a groupTransport: a
// NetworkTransport whose heartbeats go through the node's heartbeatHub,
// one link and one goroutine per destination broker, heartbeats gathered
// for Config.HeartbeatWindow and sent in one frame; the receiving node
// runs each through its group's raft heartbeat handler. A data group's
// heartbeats to a follower are paced to one per quarter of its heartbeat
// timeout, so the held heartbeats of all groups go out together in a few
// frames a second (transport.go). An idle data group's empty
// AppendEntries that repeat what a follower acknowledged are answered by
// the transport from that answer rather than sent (transport.go). The
// transport owns raft's RPC channel so that the node can hand a group a
// TimeoutNow. The node keeps one watch connection to every other broker
// of the metadata; when a broker's process is seen to go away, or the
// broker says on it that it is stopping (Node.Leaving), the groups that
// follow it as leader elect a new one at once (watch.go).
//
// # Data groups
//
// Node.StartGroup starts one more raft instance on the mux for a
// replicated partition (the broker supplies the state machine): its raft
// log and stable store in the broker's raft WAL (package wal, one per
// broker in DataDir/raft-wal, opened by the first group and closed with
// the last, wal.go), behind a log cache (logcache.go), and file snapshots in the
// partition's raft directory, every initial replica bootstrapping the
// same configuration of all replicas as voters (unless the group's
// members changed since: replicas added later never bootstrap). GroupConfig.Snapshots lets the broker wrap
// the snapshot store so that a snapshot sent to a lagging or new replica
// carries the partition's data. The broker changes a group's members
// (reassignment) with raft's AddNonvoter, AddVoter and RemoveServer on the
// group's leader.
//
// # Storage
//
// The controller's raft log and stable store are one bbolt file
// (DataDir/controller/raft.db, each write an fsynced transaction); its
// snapshots are raft's file snapshot store in the same directory.
//
// # Goroutines
//
//   - Mux.Serve: the accept loop (Node.Run starts it); one short-lived
//     goroutine per accepted connection (and per stream of an accepted
//     session) reads the header and hands the connection to a group's
//     Accept or serves a forwarded command; an accepted session's accept
//     loop runs on its connection's goroutine. One goroutine per dialed
//     session (Mux.runSession) dials it and closes it when it ends or the
//     mux closes; yamux runs its own goroutines per session. Mux.Close
//     waits for all of them.
//   - Node.loop: gossip join retries (Config.Join), bootstrap, the
//     gossiped InCluster flag, saving the known peers and, on the leader,
//     membership reconciliation.
//   - Node.rejoinLoop: joins of known brokers missing from gossip, one
//     short-lived goroutine per try (it waits for them before returning;
//     Run waits for it).
//   - Node.watchPeers and one watchPeer goroutine per other broker
//     (Run waits for them); one heartbeatHub.run goroutine per
//     destination broker (Close waits for them); one forwarding goroutine
//     per groupTransport (its Close waits for it). Heartbeat and watch
//     connections from peers are served on mux goroutines and closed when
//     the node shuts down.
//   - hashicorp/raft and memberlist run their own goroutines; Node.Close
//     shuts them down (gossip leave, raft shutdown, transport close) before
//     closing the mux and the store.
//
// # Locks
//
// FSM.applyMu serializes Apply and Restore; Mux.mu guards the group and
// session tables;
// Node.groups, Node.down, Node.peers, heartbeatHub.mu and each heartbeatLink.mu guard
// their own maps and queues; sharedWAL.mu guards the WAL's reference count
// (taken around wal.Open, wal.Close and Stats only). None is held while
// calling out or while taking another, so there is no lock order to keep.
package cluster
