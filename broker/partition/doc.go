// Package partition is one partition of a topic as a broker holds it: its
// log (package storage), the state kept beside it (idempotent producers,
// the high watermark, fetch waiters) and, when the partition has more than
// one replica, its raft group (package cluster) with the partition as the
// group's state machine. It knows nothing of the broker: topic configs
// arrive as Settings, the broker's raft mux as a *cluster.Node, and who
// committed which offset as a function.
//
// # Data path
//
// Unreplicated (a single node, or a replication factor of 1): Append
// checks the batches (storage.ParseBatches: magic 2, length, CRC-32C, size
// limit) and the idempotent-producer sequences (producers.go), and appends
// them as received, with only the base offset and leader epoch rewritten
// (storage.Log.Append). Commit waits until they are durable (a
// group-committed fsync); CommitLater leaves that to the flusher. The high
// watermark moves to the durable end and wakes the fetches waiting on the
// partition (AddWaiter).
//
// Replicated: Replicate checks the batches and hands them to raft. The
// raft log keeps them in the partition log (datastore.go): storing an
// entry, on every replica, runs the producer check and appends at the
// next offsets, and the broker's raft WAL keeps a reference, so each byte
// is written once per replica. The state machine (replica.go) moves the
// high watermark, the applied end, past each committed entry; above it
// the log holds entries raft may still replace. ApplyResult waits for the
// entry. Snapshots carry the high watermark, and the log's data when raft
// sends one to a lagging replica (snapshot.go). Only the raft leader serves, and only once it has applied
// everything committed before its term (IsLeader, ReadyLeaders).
//
// Transactions (txn.go): transactional batches are appended like others;
// the coordinator ends them with markers (AppendMarker, WriteMarker), and
// the log's transaction index gives LastStableOffset.
//
// # Goroutines
//
//   - Per partition, a flusher that makes Append's data durable when asked
//     (CommitLater), started by Open and stopped by Close or Remove.
//   - Per replicated partition, its raft group's goroutines (package
//     cluster), stopped by Close or Remove; raft calls the state machine
//     on one goroutine.
//   - ReadyLeaders runs one barrier per partition concurrently and waits
//     for them all.
//
// # Locks
//
// Partition.mu guards the producer state and is held across a check and
// its append (for a replicated partition: across a StoreLogs call's
// appends), so the two are atomic; it is never held while taking a lock
// outside the package. A caller may hold its own lock around AppendChecked
// (the transaction coordinator holds a transaction's). Partition.waitMu
// guards only the fetch waiter set.
package partition
