// Package broker is simtel's Kafka-wire-compatible broker.
//
// # Layout
//
// The root package is the broker's state: the table of APIs it serves
// (broker.go), the topics and their partitions (topics.go), cluster mode
// (cluster.go, leaders.go, reassign.go), the group coordinators'
// placement (coordinators.go), the broker's side of transactions
// (transactions.go), security inside a cluster (cluster_tls.go),
// metrics and configuration. The APIs it answers itself, those on a
// partition's data path, Metadata and the coordinator lookups, each have
// an NN_ file named after the key (00_produce.go, 01_fetch.go, …) with
// the supported versions in its header. The rest are packages:
//
//   - server: the connection server: listeners, TLS and SASL, each
//     connection's read and write loops, request decoding, dispatch
//     through the table, and the APIs a connection answers itself
//     (ApiVersions, SaslHandshake, SaslAuthenticate).
//   - partition: one partition: its log, idempotent producer state, high
//     watermark and, when replicated, its raft state machine and
//     snapshots.
//   - admin: the admin APIs (topics, configs, DeleteRecords,
//     reassignments, DescribeCluster) and the topic configs the broker
//     understands, served through admin.Broker.
//   - group: the consumer group coordinator and its APIs, routed through
//     group.Router.
//   - txn: the transaction coordinators and their APIs.
//   - kapi: the API table every NN_ file registers into; ApiVersions is
//     built from it.
//   - secstate: the SCRAM credentials and ACLs, the controller's in
//     cluster mode, security.json on a single broker; the ACL authorizer
//     reads them.
//   - cluster (controller, raft mux, gossip), storage (the segment log),
//     wal (the raft groups' shared write-ahead log).
//
// # Data path
//
// A client connection (package server) has a read loop and a write loop.
// The read loop decodes each frame with kmsg and dispatches it through the
// table; the write loop answers in request order. On a SASL listener the
// read loop first lets through only ApiVersions and the SASL exchange,
// whose handlers run inline and keep the connection's principal and
// session.
//
// Produce: the partition checks each record batch (magic 2, length,
// CRC-32C, size limit) and the idempotent-producer sequences, and appends
// the bytes as received, with only the base offset and leader epoch
// rewritten (storage.Log.Append). On a single replica, acks=all then waits
// for Partition.Commit, a group-committed fsync; the high watermark moves
// to the durable end and wakes long-polling fetches. A replicated
// partition hands the batches to raft instead (Partition.Replicate): they
// are appended on every replica once a majority has them, and the high
// watermark is the applied end.
//
// Fetch: storage.Log.Read returns file ranges holding whole batches below
// the high watermark; 01_fetch.go splices them into kmsg's encoding of the
// response and the write loop sends them with sendfile(2), so record bytes
// never enter user space.
//
// Transactions: the coordinators are package txn, bound to the broker in
// transactions.go (the partitions of __transaction_state, the data
// partitions its markers go to, the group coordinators, the producer id
// allocator). A transactional produce is checked against the coordinator
// (under the transaction's lock on a single node) and appended to the
// partition; markers are control batches (partition.Partition.WriteMarker,
// and WriteTxnMarkers from another broker's coordinator). The log's
// transaction index (storage/txn.go) gives the last stable offset and the
// aborted transactions that read_committed fetches need.
//
// # Goroutines
//
//   - Run: the server's accept loops, the HTTP server, the maintenance
//     loop (retention, compaction), each waited for before Run returns.
//   - Per connection (package server): read loop and write loop; per
//     in-flight blocking request (acks=all commit, fetch long poll,
//     JoinGroup/SyncGroup, OffsetCommit) one goroutine that finishes its
//     pending response and exits when the connection's context ends.
//   - The transaction coordinator's loop (txn.Coordinators.Run, started by
//     Run, single node only; in cluster mode runCoordinators's
//     txn.Coordinators.Sync opens one per led __transaction_state
//     partition): aborts timed-out transactions and retries unfinished
//     completions every second.
//   - Per partition: a flusher that makes acks=0/1 appends durable so the
//     high watermark advances; stopped by Partition.Close.
//   - Cluster mode only (cluster.go): the cluster.Node's goroutines (see
//     package cluster), followClusterMetadata, which opens and closes
//     local partitions as the controller metadata changes, reportLeaders
//     (leaders.go), which reports the partitions this broker leads in raft
//     to the controller, placementLoop (reassign.go), which carries out
//     reassignments of the partitions this broker leads, reports the
//     catch-up of new replicas, hands leadership to preferred leaders and,
//     on the controller leader, plans moves, runCoordinators, which opens
//     and closes the group coordinators of the __consumer_offsets
//     partitions this broker leads (coordinators.go; each coordinator owns
//     a janitor and a persister, stopped by its Close, which
//     runCoordinators waits for), and per replicated partition its raft
//     group's goroutines (stopped by Partition.Close).
//
// # Cluster mode
//
// With Config.RaftListen set, topics come from the controller (package
// cluster) instead of topics.json: b.mu.topics mirrors the controller's
// metadata, with a nil *partition.Partition for each partition this
// broker has no replica of. Partitions with more than one replica are
// raft groups (package partition, started in leaders.go); Broker.partition
// returns only those this broker leads. Topic admin runs on the
// controller leader (NOT_CONTROLLER elsewhere). __consumer_offsets is
// replicated too, and the coordinator of a group is the raft leader of its
// partition (coordinators.go).
//
// # Locks
//
// Broker.adminMu (topic create/delete/alter, and applying controller
// metadata in cluster mode) is taken before Broker.mu (the topic map).
// Broker.coords (the cluster-mode coordinator slots) is a leaf: held only
// to read or swap slots, never across a coordinator call.
// A controller command may be applied through raft while adminMu is held
// (alter configs); the raft FSM never takes a broker lock, so this cannot
// deadlock. Partition.mu (producer state + append) is never held while
// taking a broker lock (see package partition). A transaction's lock
// (package txn) is taken before Partition.mu (transactional produce,
// markers) and before the group coordinator's lock (offsets applied on
// commit).
package broker
