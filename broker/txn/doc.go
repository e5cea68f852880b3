// Package txn is the broker's transaction coordinator: the transaction
// APIs (InitProducerID, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
// TxnOffsetCommit, DescribeTransactions, ListTransactions, each in its NN_
// file and bound by the broker from APIs), the state of every
// transactional id, and the check of a transactional produce against it.
// What it needs of the broker — the partitions of StateTopic and their
// raft leadership, the data partitions it writes markers to, the group
// coordinators, the producer id allocator, the cluster metadata — comes
// through the Broker interface; the partitions themselves write markers
// and keep the last stable offset.
//
// # State
//
// One txnEntry per transactional id, its txnMeta changed only by writing
// the new meta as a record to a partition of the internal, compacted
// topic __transaction_state (state.go: key the id, value JSON) and then
// adopting it; a coordinator loading a partition replays its log (the
// newest record of each id wins). The state is nothing but the records
// of one partition, so replicating the partition replicates the
// coordinator, and its leader coordinates.
//
// # Ending a transaction
//
// EndTxn writes Prepare{Commit,Abort} (the decision is durable from
// here), writes a control batch (COMMIT or ABORT marker) to every
// partition of the transaction and makes it durable, applies the
// transaction's group offsets to the group coordinator on commit, then
// writes Complete{Commit,Abort}. A crash anywhere in between leaves a
// Prepare* state, which the coordinator completes when it loads (writing
// a marker twice is harmless: a marker ends only a transaction that is
// open in its partition). A failed marker write leaves Prepare* too, and
// the coordinator's loop retries it every txnCheckInterval.
//
// # Single node
//
// One coordinator (Open, Run) for every transactional id, its state in
// partition 0 of __transaction_state (created when the first
// transactional id initializes), each record appended and fsynced. A
// transactional produce is checked and appended under the transaction's
// lock (Produce).
//
// # Cluster
//
// __transaction_state is a replicated internal topic (created through the
// controller when the first transactional request finds it missing,
// stateTopicPartitions partitions, compacted). A transactional id belongs
// to partition hash(id) mod the partition count, and its coordinator is
// the raft leader of that partition:
//
//   - Sync (on the group coordinators' tick) opens a coordinator for each
//     state partition this broker leads and is ready in (its raft barrier
//     went through, so the local log holds every committed state record),
//     loading the ids from the log; it closes the ones of partitions it no
//     longer leads or whose term changed. A request for an id of a
//     partition this broker does not lead gets NOT_COORDINATOR;
//     FindCoordinator (key type 1, Locate) names the partition's raft
//     leader.
//   - Every state change is one raft entry of the partition
//     (StatePartition.Propose, refused once the term changed), applied on
//     every replica, answered once committed on a majority. A new leader
//     therefore knows every Ongoing transaction (with its start time: the
//     timeout keeps counting) and every Prepare* decision; its check loop
//     writes the markers of the Prepare* ones and completes them.
//   - Markers go to each data partition's raft leader: written directly
//     when this broker leads it, else in a WriteTxnMarkers request to the
//     leader (which the broker answers). Each carries the coordinator's
//     epoch, the raft term of its state partition, so the replicas refuse
//     a marker of a deposed coordinator. Any failure leaves the
//     transaction in Prepare*, retried every txnCheckInterval until every
//     marker is written. A leader that refuses the request (this
//     broker's principal lacks ClusterAction on the cluster) is no
//     passing failure: it is logged at error level, counted
//     (simtel_broker_txn_completion_failures_total{reason="refused"}), and
//     EndTxn answers CONCURRENT_TRANSACTIONS rather than success until the
//     markers are written (metrics.go).
//   - A transactional produce at a partition's leader is checked against
//     the coordinator once per transaction and partition (VerifyPartition:
//     a verify-only AddPartitionsToTxn to the coordinator's broker).
//   - Transactional offsets (TxnOffsetCommit) are sent by clients to the
//     group's coordinator, which checks the member's generation and
//     passes the offsets to the transaction coordinator (a TxnOffsetCommit
//     carrying txnForwardMember); they are part of the replicated
//     transaction state. On commit the transaction coordinator writes them
//     to the group: directly when it coordinates the group too, else in a
//     TxnOffsetCommit carrying txnApplyMember, which the group coordinator
//     applies to the group's replicated log. Until then OffsetFetch with
//     RequireStable answers UNSTABLE_OFFSET_COMMIT for them
//     (PendingOffset).
//
// # Goroutines
//
// Each coordinator runs one loop (coordinator.run: timeouts, expiry,
// unfinished completions): the single node's under Run, a cluster's
// per slot, started by Sync and stopped by Sync or Close. Request
// handlers run on the broker's connection goroutines.
//
// # Locks
//
// coordinator.mu guards the map only and is never held while waiting for
// anything else. txnEntry.mu serializes everything done for one
// transactional id — coordinator requests, the timeout abort, and the
// check-and-append of its transactional produce (so no batch of a
// transaction lands after its marker). Lock order: txnEntry.mu, then the
// partition's lock or the group coordinator's; pendingMu, fwdMu and
// peersMu are leaves.
package txn
