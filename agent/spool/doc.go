// Package spool is the agent's disk spool: a bounded, crash-safe,
// disk-backed FIFO of small records (key, value, timestamp) between the
// listeners that accept samples and the shipper that produces them to
// Kafka.
//
// # Contract
//
// The caller's obligations, in order:
//
//  1. Open the spool with a Config; it recovers what a crash left behind.
//  2. Append from any number of goroutines. When Append returns nil the
//     records are in the page cache: they survive a crash of the agent
//     (SIGKILL, panic, OOM kill). They survive a power loss or kernel crash
//     once the broker has acknowledged them or the flusher has synced
//     them, at most two Config.SyncIntervals later (never, with NoSync).
//     Records of one goroutine keep their order;
//     those of one call stay together.
//  3. From one consumer goroutine, Read batches and hand them to the
//     producer. When the broker has acknowledged everything up to a batch's
//     position, Ack that position, in order. Key and Value alias a read
//     buffer that is reused after the Ack covering them; the producer must
//     be done with them by then (franz-go is, once its promise ran).
//  4. If the producer failed and records read but not acknowledged may be
//     lost, call Rewind: the next Read starts again at the ack cursor.
//  5. Close (after the consumer stopped) syncs everything (unless NoSync)
//     and persists the ack cursor.
//
// Delivery is at least once. Within one life every record is read once
// (plus again after a Rewind). After Close and Open, delivery resumes
// exactly at the last Ack. After a crash it resumes at the last persisted
// checkpoint of the ack cursor: records acknowledged in the last
// Config.CheckpointInterval before the crash are delivered again, unless
// their whole segment had been deleted. A record is lost only if the
// DropOldest policy dropped it (counted in Stats.Dropped), or, after a
// power loss, if it was not yet synced (counted as CorruptBytes where
// detected).
//
// # Files
//
// The record stream is numbered by byte Offset and by record Seq, both
// counted from the creation of the directory (records cut off a torn head
// by recovery leave their positions to the next records). The
// directory holds segment files "<base>.seg" named by the offset of their
// first record byte (20 decimal digits), the "cursor" file with the
// persisted ack position (24 bytes, created whole through cursor.tmp and
// a rename, then rewritten in place; see writeCursor), and "LOCK" (flock
// held by the open Spool). Each
// segment starts with a 24-byte header (magic, CRC-32C, base offset, base
// seq) followed by frames: length, CRC-32C, timestamp, key length, key,
// value (20 bytes of overhead per record; see format.go). Segment k ends
// where segment k+1 begins, so the files need no index.
//
// # Data path
//
// Append encodes the frames (and their CRCs) into a pooled buffer without
// any lock, so concurrent callers encode in parallel, cutting it into
// chunks that fit a segment (one chunk, unless the call is huge). It then
// takes the append lock and, per chunk: checks space (waits or drops, per
// Policy), seals the head and creates the next segment if the chunk does
// not fit, writes the chunk with one pwrite at the head's end, and
// publishes the new end under mu, waking a waiting reader. A failed write
// publishes nothing and cuts the file back.
//
// Read finds the segment of the read cursor, preads up to maxBytes from
// its own file descriptor into a pooled batch buffer, checks each frame's
// length (and its CRC if an earlier life wrote it outside the head that
// Open scanned: frames this process wrote come back as written) and
// returns records aliasing the buffer. It never reads
// past the published end, so it never sees a half-written batch. Ack moves
// the ack cursor, releases batch buffers and deletes the sealed segments
// it wholly covers, which wakes appenders blocked on space.
//
// Recovery (Open) trusts sealed segments (Read checks their CRCs anyway),
// scans the head segment frame by frame, truncates it at the first torn
// or corrupt frame, and clamps the persisted cursor into the recovered
// range.
//
// # Goroutines
//
// The Spool owns one goroutine, the flusher, started by Open and stopped
// and waited for by Close. It does every fdatasync (every SyncInterval: the
// cursor file, and the segments, sealed or head, holding records that a
// tick ago were already appended and are still unacknowledged, then the
// directory if files came or went; while the broker keeps up nothing but
// the cursor is synced, and segments deleted within the kernel's
// writeback delay never reach the disk), closes the write descriptors of
// sealed and deleted segments and writes the cursor checkpoint when Ack
// leaves it to it (one pwrite, at most every CheckpointInterval; an Ack
// that comes after a quiet CheckpointInterval writes the cursor itself,
// see checkpointAfterAck). Append and Read never wait for it. Read
// waits for data, and Append for space, on channels that the other side
// closes; both also wake on their context and on Close.
//
// # Locks
//
// Lock order: wlock -> readMu -> ckptMu -> mu.
//
//   - wlock (a channel, so waiting honours the context) serializes
//     appenders: space checks, drops, rotation and the write itself. The
//     write syscall runs under wlock alone.
//   - readMu serializes Read, Ack and Rewind and guards the reader state
//     (read cursor, reader fd, batch buffers). Read releases it while it
//     waits for data so Ack and Rewind never wait for new appends.
//   - ckptMu serializes writers of the cursor file (Ack, the flusher,
//     Close) and guards it.
//   - mu guards the segment list, end, ack and checkpoint positions, byte
//     and record counters and the wake-up channels. It is held only for
//     short sections without I/O.
//
// Close takes wlock (forever), then readMu, stops the flusher, and does
// the final sync and checkpoint itself.
package spool
