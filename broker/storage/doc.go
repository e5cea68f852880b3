// Package storage is the partition log of the broker: a directory of
// segment files holding Kafka v2 record batches exactly as producers sent
// them, plus sparse indexes, retention, compaction and crash recovery.
//
// # Files
//
// A partition directory holds, for each segment with base offset B:
//
//	<B %020d>.log        batches, back to back
//	<B %020d>.index      sparse offset index: (relOffset uint32, position uint32)
//	<B %020d>.timeindex  sparse time index: (maxTimestampBefore int64, relOffset uint32)
//
// and two small checkpoints written atomically (temp file, fsync, rename,
// directory fsync): log-start-offset (DeleteRecords) and
// cleaner-checkpoint (when each segment was first compacted), plus the
// file "transactions" in a log that has held transactional batches (its
// in-memory transaction index is then rebuilt at Open; see txn.go). Index files
// exist only for closed segments whose data was fully fsynced; they are
// written by the flusher, by maintenance operations and by Close. That
// invariant lets Open trust them without re-reading the segment.
//
// # Data path
//
// Produce: ParseBatches validates the request bytes (CRC-32C, magic,
// lengths) without copying them. Append assigns offsets by rewriting each
// batch's baseOffset and partitionLeaderEpoch in the caller's buffer (both
// lie outside the CRC), writes the buffer with one pwrite to the active
// segment and records O(1) index bookkeeping per batch. Sync then waits
// for durability (group commit, below). Append does no per-record work and
// no fsync, so it is a clean primitive that replication can reuse.
//
// Fetch: Read locates the segment by binary search over base offsets and
// the start position by binary search in the in-memory sparse index, then
// walks batch headers (small preads, never bodies) to find whole batches
// within maxBytes and below the high watermark. It returns file ranges for
// sendfile, each pinning its file by reference count: deletion (retention,
// DeleteRecords, Truncate) and compaction unlink or rename files at once,
// but a descriptor is closed only when its last reader releases it.
//
// # Goroutines
//
// Each Log owns exactly one goroutine, the flusher, started by Open and
// stopped (and waited for) by Close. It runs flush rounds when kicked by
// Sync or by a segment roll: it fdatasyncs every segment with unsynced
// bytes (and the directory after a segment was created), advances
// SyncedOffset to the end offset captured at the start of the round and
// wakes all waiters. Callers arriving during a round are served together
// by the next one. An fsync error is sticky: Append and Sync fail from then
// on. After a round the flusher persists pending index files if it can
// take the maintenance lock without waiting. Compaction creates zstd
// coders (which may own goroutines) per run and closes them before
// returning.
//
// # Locks
//
// Lock order: maint -> appendMu -> mu. Segment file reference counts are
// atomic and taken under mu (or while already holding a reference).
//
//   - maint serializes operations that restructure segment files:
//     EnforceRetention, DeleteRecords, Truncate, Compact, index
//     persistence and Close. It guards compaction bookkeeping. Compaction
//     holds it for a long time, so nothing on the produce, fetch or sync
//     path ever waits for it (the flusher only uses TryLock).
//   - appendMu serializes writers of the active segment (Append, rolls,
//     Truncate, Close). The write syscall runs under appendMu alone, so
//     readers are never blocked behind a write.
//   - mu guards the in-memory state: the segment list, each segment's
//     size, next offset, index and sync state, the start/end/synced
//     offsets and the sticky error. It is only held for short, non-blocking
//     sections; no I/O happens under it.
//
// # Recovery
//
// Open removes leftover temporary files (an interrupted compaction's
// ".cleaned" file is simply discarded: the rename that would have
// installed it is atomic), trusts non-tail segments with consistent index
// files, and scans every other segment, always including the tail, batch by
// batch checking length, magic, CRC and offsets. At the first invalid or
// torn batch it truncates the file, logs one warning with the number of
// bytes dropped and removes all later segments. Scanned segments are
// fsynced before SyncedOffset covers them, since their data may only have
// lived in the page cache of a crashed process.
package storage
