// Package wal is one broker's write-ahead log for the raft groups of its
// replicated partitions: a raft.LogStore and raft.StableStore per group,
// all appended to one sequence of segment files so that one fsync covers
// the appends of every group that wrote meanwhile (group commit).
//
// # Data path
//
//  1. A group's StoreLogs, DeleteRange or Set encodes its records (see
//     record.go), and under WAL.mu checks them against the group's
//     in-memory index, writes them at the end of the active segment and
//     updates the index (group + raft index → segment, offset, length).
//  2. It then waits for an fsync that covers its write. If none in
//     flight does, it starts one of the active segment that covers
//     everything written so far, so the writers that came meanwhile
//     return without another fsync (group commit). Two fsyncs can be in
//     flight: a write made while one runs need not wait for it to end
//     before its own starts. Only then does the call return, so raft
//     never counts an entry or a vote that is not on disk.
//     StoreLogsDeferred returns after step 1 with the wait of step 2:
//     a partition's leader stores its new entries that way and lets its
//     state machine wait (broker/partition, leaderSync).
//  3. GetLog looks the position up under WAL.mu and reads the record with
//     one pread outside the lock, checking its CRC.
//
// # Segments and compaction
//
// A segment is rolled when it would grow past Options.SegmentBytes. The
// new segment starts with a checkpoint: for every group its stable values
// and the deletion of everything before its first entry. So once no group
// has a live entry in the oldest segments they can be deleted whole
// (checked after every prefix DeleteRange and DropGroup): nothing in them
// is needed to rebuild the index any more. Segments go oldest first only,
// so a group that writes rarely would keep every later segment: when the
// segments hold more than twice the live entries plus two segments, the
// live entries of the oldest one are copied forward (move records,
// fsynced) when a segment is rolled, and it is deleted.
//
// Replay after deletions sees records whose context is gone (an entry
// whose predecessors were in a deleted segment and are dead by the end).
// It therefore places an entry by its index, truncating what is above
// and filling a gap below with holes; a hole still live at the end of
// the replay is reported as corruption.
//
// # Recovery
//
// Open reads every segment in order and replays its records into the
// index, exactly as the live calls applied them. A record whose length
// or CRC is wrong in the last segment is a write torn by a crash (nothing
// after it was acknowledged, because an acknowledgement waits for an
// fsync that covers everything written before it): the segment is
// truncated there. The same in an older segment (fsynced when it was
// rolled) is corruption and Open fails.
//
// # Locks
//
// mu is held only for index updates and write syscalls, never for an
// fsync except when a segment is rolled or entries are relocated; the
// fsyncs of appends run with it released, counted in mu.syncing, which
// Close waits to drop to zero.
package wal
